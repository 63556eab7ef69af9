"""A resolved materialize run and what every task shares: the :class:`ResolvedTable`, a per-worker dataset cache, the calls executors run.

Tasks get a :class:`ResolvedTable` by value (URIs and versions, never handles) and open
datasets lazily in the worker, cached per run. Executors
(:mod:`prep.materialize.executors.local`, :mod:`prep.materialize.executors.on_ray`) run :class:`Call` s:
a function, its arguments and where it is in the run, for the error message.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Protocol, Sequence

from prep.io import lance_tables

from prep.io import storage
from prep.errors import PrepError, one_line
from prep.contracts.manifest import Epoch, Manifest
from prep.materialize.budget import Budget
from prep.materialize.options import DEFAULT_LANCE_FORMAT, PICK_ROWS, READ_ROWS
from prep.plan.spec import PlanSpec

__all__ = ["ResolvedTable", "Call", "TaskExecutor", "resolved_for_manifest", "dataset", "run_task"]


@dataclass(frozen=True, kw_only=True)
class ResolvedTable:
    """Everything a single-table task needs, passed by value (URIs and versions, never handles).

    Args:
        source: source table URI.
        version: source table version the plan is computed on.
        columns: output columns, in order.
        plan: the plan.
        num_selected: rows in the selected row set.
        output: output directory URI.
        fingerprint: the plan's fingerprint.
        selection: URI of the filter sidecar, or None without ``--filter``.
        s3: resolved S3 options (shipped to workers).
        read_rows: rows per Lance ``take`` and per written batch.
        pick_rows: rows taken from held rows at once (a whole number of written batches).
        spill_dir: where rows beyond the memory budget are spilled (None: :func:`prep.materialize.rows.spill.spill_root`).
        lance_format: Lance data storage version of the split datasets.
        run_id: unique per run: workers cache open datasets per run, since
            ``_work`` datasets are rewritten at the same URI by a later run.
    """

    source: str
    version: int
    columns: tuple[str, ...]
    plan: PlanSpec
    num_selected: int
    output: str
    fingerprint: str
    selection: str | None = None
    s3: storage.S3Options = field(default_factory=storage.S3Options)
    read_rows: int = READ_ROWS
    pick_rows: int = PICK_ROWS
    lance_format: str = DEFAULT_LANCE_FORMAT
    run_id: str = ""
    spill_dir: str | None = None

    def lance_options(self, uri: str) -> dict[str, str] | None:
        return storage.lance_storage_options(uri, self.s3)

    def split_kwargs(self) -> dict[str, Any]:
        """The :mod:`prep.plan` arguments of this run's selected rows (add ``split``, ``epoch``, ``hash_keys``)."""
        return dict(num_rows=self.num_selected, **self.plan.split_args())


class Call(NamedTuple):
    """One task for an executor: ``fn(*args)``; ``where`` names it in an error ("epoch 0 split 3")."""

    where: str
    fn: Callable[..., Any]
    args: tuple


class TaskExecutor(Protocol):
    """What both executors offer (:class:`prep.materialize.executors.local.LocalExecutor`, :class:`prep.materialize.executors.on_ray.RayExecutor`)."""

    budget: Budget  # the memory one holder may use (one holder runs at a time per node)
    hold_bytes: int  # bytes of rows one holder may keep in memory for its split calls (``budget.hold_bytes``)
    min_holders: int  # holders that keep every CPU of the executor busy (one per node)
    threads: int  # threads of one holder (the CPUs of the smallest node it may run on)

    def put(self, value: Any) -> Any:
        """``value`` as the tasks receive it (shared once, not copied per call)."""

    def run(self, calls: Sequence[Call], on_done: Callable[[], None] = ...) -> list:
        """The calls' results in order; the first failure is raised as one line naming its ``where``."""

    def run_holders(self, calls: Sequence[Call], on_done: Callable[[], None] = ...) -> list:
        """Holder calls, ``fn(*args, executor)``: each holds a group's rows in memory and yields its split
        calls' results from ``executor.as_done`` (threads beside those rows); their results, concatenated,
        ``on_done`` as each arrives."""


def resolved_for_manifest(manifest: Manifest, path: str, s3: storage.S3Options | None = None,
                          epoch: Epoch | None = None) -> ResolvedTable:
    """A :class:`ResolvedTable` describing the run that wrote ``epoch`` of ``manifest`` (default: its
    newest epochs), over the table version that epoch drew from (no filter sidecar)."""
    entry = epoch or next(e for e in manifest.epochs if e.version == manifest.source.version)
    return ResolvedTable(
        source=manifest.source.uri, version=entry.version, columns=manifest.columns, plan=manifest.plan,
        num_selected=entry.num_selected_rows, output=path, fingerprint=manifest.epoch_fingerprint(entry),
        s3=(s3 or storage.S3Options()).resolved(),
    )


@functools.lru_cache(maxsize=8)
def _open(uri: str, version: int | None, options: tuple[tuple[str, str], ...] | None, run_id: str):
    return lance_tables.open_table(uri, version=version, storage_options=dict(options) if options else None)


def dataset(job: ResolvedTable, uri: str, version: int | None = None):
    """An open dataset, cached per worker: a pinned version is immutable; anything else only within this run."""
    opts = job.lance_options(uri)
    return _open(uri, version, tuple(sorted(opts.items())) if opts else None, "" if version is not None else job.run_id)


def run_task(fn: Callable[..., Any], where: str, *args: Any) -> Any:
    """``fn(*args)``; any error comes out as one PrepError line starting with ``where`` (re-raised in the driver)."""
    try:
        return fn(*args)
    except PrepError as exc:
        raise PrepError(f"{where}: {exc}") from None
    except Exception as exc:  # wrapped with where it happened, re-raised in the driver
        raise PrepError(f"{where}: {type(exc).__name__}: {one_line(exc, limit=300)}") from exc
