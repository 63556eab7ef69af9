"""A single table's run: resolve, the filter sidecar, the split tasks, the manifest (:class:`TableRun`).

Where a split task gets its rows is the same on both executors:

- held (the default): holders (:meth:`~prep.materialize.resolved.TaskExecutor.run_holders`)
  each read the selected rows in one sequential pass, keep those of their group of
  splits in memory (:mod:`prep.materialize.held`, within ``hold_bytes``:
  :data:`~prep.materialize.local.HOLD_BYTES`) and write the group's splits from them on
  their threads. Locally the holders run one after another in this process; on Ray
  each is a task that takes a node's CPUs, one per node at least.
- taken: when the selected rows do not fit in one holder and clumps are large
  (``sequential`` included), each split task takes its rows from the table with Lance
  takes, which such clumps make nearly scans (memory: a few read batches a task).
- gathered (Ray only): when small clumps would need more than :data:`GATHER_FROM_GROUPS`
  holders, each reading the whole selection, map tasks read it once and cut it into
  pieces per split through the object store (:mod:`prep.materialize.gather`).
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from prep import __version__ as prep_version
from prep.contracts.done import DoneRecord
from prep.contracts.manifest import Epoch, Manifest, Source
from prep.contracts.table import read_table_metadata
from prep.contracts.materialized import WORK
from prep.errors import PrepError
from prep.io import lance_tables, storage
from prep.io.table_checksums import require_intact
from prep.materialize.faults import kill_point
from prep.materialize.gather import gather_pieces, write_gathered
from prep.materialize.held import hold_splits, reads_scattered
from prep.materialize.resolved import Call, ResolvedTable, TaskExecutor, dataset, run_task
from prep.materialize.options import RunOptions
from prep.materialize.run import materialize
from prep.materialize.rows import bytes_per_row, hash_keys_for, selection_fingerprint, write_selection
from prep.materialize.write import write_split
from prep.plan.spec import DEFAULT_SPLITS, PlanSpec

if TYPE_CHECKING:
    from prep.materialize.local import LocalExecutor

__all__ = ["materialize_shuffle", "TableRun", "hold_groups"]

log = logging.getLogger("prep.materialize")
_READ_BYTES = 64 << 20  # rows per sequential read while holding: about this many bytes
# Holding reads the whole selection once per group; the gather pass reads it once and moves every row
# through the object store. With more groups than this, an executor with an object store gathers.
GATHER_FROM_GROUPS = 4


def hold_groups(num_splits: int, total_bytes: int, hold_bytes: int, at_least: int = 1) -> list[range]:
    """Contiguous groups of splits, each holding about ``hold_bytes`` of rows at most (one split per group
    at least), and ``at_least`` groups when there are enough splits.

    >>> hold_groups(8, 3 * 1000, 1000), hold_groups(8, 1000, 1000, at_least=2)
    ([range(0, 3), range(3, 6), range(6, 8)], [range(0, 4), range(4, 8)])
    """
    count = min(num_splits, max(at_least, 1, -(-total_bytes // hold_bytes)))
    per = -(-num_splits // count)
    return [range(a, min(a + per, num_splits)) for a in range(0, num_splits, per)]


def _write_group(job: ResolvedTable, group: range, pairs: Sequence[tuple[int, int]], keys: np.ndarray | None,
                 chunk_rows: int, executor: LocalExecutor) -> Iterator[DoneRecord]:
    """A holder: the rows of the splits in ``group``, read in one sequential pass, then its (epoch, split)
    ``pairs`` written from them on ``executor``'s threads, each record as its split is done."""
    held = run_task(hold_splits, f"reading the rows of splits {group.start}..{group.stop - 1}", job, group, keys, chunk_rows)
    yield from executor.as_done([Call(f"epoch {e} split {s}", write_split, (job, e, s, keys, held)) for e, s in pairs])


class TableRun:
    """One prepared table under a plan (:class:`PlanSpec` without a mixture).

    Args:
        table: the prepared Lance table (local path or ``s3://``).
        plan: the plan.
    """

    name = "plan"

    def __init__(self, table: str, plan: PlanSpec) -> None:
        if plan.mixture is not None:
            raise PrepError("this plan is a mixture: materialize it with materialize_mixture")
        self.table, self.plan = table, plan
        self.source: Any = None  # the open table, once resolved

    def resolve(self, output: str, options: RunOptions, s3: storage.S3Options) -> ResolvedTable:
        """Opens the table at its newest version and checks the plan's columns against it."""
        spec = self.plan
        uri = self.table if storage.is_remote(self.table) else os.path.abspath(self.table)
        if not storage.is_remote(uri) and not os.path.exists(uri):
            raise PrepError(f"--table {self.table}: no such path; pass a prepared Lance table (see `prep pretokenize`)")
        self.source = source = lance_tables.open_table(uri, storage_options=storage.lance_storage_options(uri, s3))
        require_intact(uri, source.version, s3)  # a damaged file is named and refused before any row is read
        version, total = source.version, source.count_rows()
        if total == 0:
            raise PrepError(f"table {uri} (version {version}) is empty: there is nothing to shuffle")
        names = source.schema.names
        columns = list(spec.columns or names)
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise PrepError(f"--columns {unknown} are not in {uri}; it has {names}")
        if spec.strategy == "hash" and any(c not in names for c in spec.hash_columns):
            raise PrepError(f"--hash-columns {list(spec.hash_columns)} must name columns of {uri}; it has {names}")
        return ResolvedTable(source=uri, version=version, columns=tuple(columns), plan=spec, num_selected=total, output=output,
                   fingerprint=spec.fingerprint(uri, version), s3=s3, read_rows=options.read_rows,
                   lance_format=options.lance_format, run_id=uuid.uuid4().hex)

    def prepare(self, job: ResolvedTable, epochs: range) -> ResolvedTable:
        """With a filter: the selection sidecar (kept from an interrupted run of the same plan) and its row count."""
        filt = job.plan.filter
        if filt:
            sel = storage.join(job.output, WORK, "selection.lance")
            kept = lance_tables.table_exists(sel, job.lance_options(sel))
            if kept and selection_fingerprint(dataset(job, sel)) == job.fingerprint:
                selected = dataset(job, sel).count_rows()
            else:
                selected = write_selection(job, self.source, sel)
                kill_point("selection")
            if selected == 0:
                raise PrepError(f"--filter {filt!r} matched none of the {job.num_selected:,} rows of {job.source}; "
                                "check the column values")
            job = replace(job, selection=sel, num_selected=selected)
        if job.num_selected < job.plan.num_splits:
            log.warning("only %d selected rows for %d splits: some splits will be empty", job.num_selected, job.plan.num_splits)
        return job

    def write(self, job: ResolvedTable, todo: Sequence[tuple[int, int]], executor: TaskExecutor,
              on_done: Callable[[], None]) -> list[DoneRecord]:
        """Writes the (epoch, split) pairs in ``todo`` (module docstring: where their rows come from)."""
        keys = executor.put(hash_keys_for(job, self.source) if job.plan.strategy == "hash" else None)
        row_bytes = bytes_per_row(job, self.source)
        total = row_bytes * job.num_selected
        if total > executor.hold_bytes and not reads_scattered(job.plan):  # large clumps: takes are nearly scans
            return executor.run([Call(f"epoch {e} split {s}", write_split, (job, e, s, keys)) for e, s in todo], on_done)
        if executor.gathers and len(hold_groups(job.plan.num_splits, total, executor.hold_bytes)) > GATHER_FROM_GROUPS:
            pieces = gather_pieces(job, self.source, executor, keys)
            calls = [Call(f"epoch {e} split {s}", write_gathered, (job, e, s, keys, *[c[s] for c in pieces])) for e, s in todo]
            del pieces  # the running tasks hold what they still need
            return executor.run(calls, on_done)
        chunk_rows = max(job.read_rows, _READ_BYTES // row_bytes)
        groups = hold_groups(job.plan.num_splits, total, executor.hold_bytes, at_least=executor.min_holders)
        calls = [Call(f"splits {g.start}..{g.stop - 1}", _write_group, (job, g, mine, keys, chunk_rows))
                 for g in groups if (mine := [(e, s) for e, s in todo if s in g])]
        return executor.run_holders(calls, on_done)

    def manifest(self, job: ResolvedTable, epochs: tuple[Epoch, ...]) -> Manifest:
        return Manifest(
            prep_version=prep_version, fingerprint=job.fingerprint,
            source=Source(uri=job.source, version=job.version, num_rows=self.source.count_rows(),
                          metadata=read_table_metadata(self.source, job.source)),
            plan=job.plan, num_selected_rows=job.num_selected, columns=job.columns, epochs=epochs)



def materialize_shuffle(*, table: str, splits: int = DEFAULT_SPLITS, strategy: str = "random",
                        hash_columns: Sequence[str] = ("id",), clump: int = 1, seed: int = 0, filter: str | None = None,
                        columns: Sequence[str] | None = None, **options: Any) -> Manifest:
    """Materializes epochs ``[start_epoch, start_epoch + epochs)`` of a shuffle plan over ``table``.

    Args:
        table: prepared Lance table (local path or ``s3://``).
        splits, strategy, hash_columns, clump, seed, filter, columns: the plan
            (:class:`prep.plan.spec.PlanSpec`, which checks them and documents them).
        **options: the run's options, :class:`prep.materialize.options.RunOptions` (``output`` and ``epochs`` at least).

    Returns:
        The manifest that was written.

    Raises:
        PrepError: missing/empty table, bad filter, plan or run options, or an
            output directory that holds a different plan.
    """
    run_options = RunOptions(**options)
    spec = PlanSpec(num_splits=splits, strategy=strategy, hash_columns=tuple(hash_columns), clump=clump, seed=seed,
                    filter=filter or None, columns=tuple(columns) if columns else None)
    return materialize(TableRun(table, spec), run_options)
