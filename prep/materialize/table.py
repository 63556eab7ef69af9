"""A single table's run: resolve, the filter sidecar, the split tasks, the manifest (:class:`TableRun`).

Where a split task gets its rows is the same on both executors, chosen by the run's
memory budget (:class:`~prep.materialize.budget.Budget`, ``--max-memory``):

- held: when the selected rows fit one holder's budget on a one-node run, a holder
  (:meth:`~prep.materialize.resolved.TaskExecutor.run_holders`) reads them in one
  sequential pass, keeps them in memory (:mod:`prep.materialize.held`) and writes every
  split from them on its threads.
- taken: when clumps are large (``sequential`` included) and the rows do not fit or
  there are several nodes, each split task takes its rows from the table with Lance
  takes, which such clumps make nearly scans (memory: a few written batches a task).
- spilled: otherwise, a two-pass external shuffle (:mod:`prep.materialize.spill`): the
  table is read once, each row routed to the spill file of its group of splits, then
  each group is read back once, held and written. Cost and memory are linear at any
  table/budget ratio, and on several nodes every row is read once, not once per node.
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
from prep.contracts.foreign import serving_metadata
from prep.contracts.table import TableMetadata
from prep.contracts.materialized import WORK
from prep.errors import PrepError
from prep.io import lance_tables, storage
from prep.io.table_checksums import require_intact
from prep.materialize.faults import kill_point
from prep.materialize import spill
from prep.materialize.held import hold_splits, reads_scattered
from prep.materialize.resolved import Call, ResolvedTable, TaskExecutor, dataset, run_task
from prep.materialize.options import RunOptions
from prep.materialize.run import materialize
from prep.materialize.rows import bytes_per_row, hash_keys_for, selection_fingerprint, write_selection
from prep.materialize.write import output_schema, write_split, write_split_dataset
from prep.plan import split_rows, split_size
from prep.plan.spec import DEFAULT_SPLITS, PlanSpec

if TYPE_CHECKING:
    from prep.materialize.local import LocalExecutor

__all__ = ["materialize_shuffle", "TableRun", "hold_groups", "SEGMENT_BYTES"]

log = logging.getLogger("prep.materialize")
_READ_BYTES = 64 << 20  # rows per sequential read: about this many bytes at most (less within a small budget)
SEGMENT_BYTES = 4 << 30  # rows one spill segment routes at most: a killed run's rerun keeps finished segments


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


def _route(job: ResolvedTable, layout: spill.SpillLayout, root: str, segments: Sequence[int], keys: np.ndarray | None,
           read_rows: int, row_bytes: int, executor: LocalExecutor) -> Iterator[int]:
    """A spilling holder, route pass: its ``segments`` routed to the spill on ``executor``'s threads."""
    yield from executor.as_done([Call(f"spilling rows [{layout.segments[i][0]}, {layout.segments[i][1]})",
                                      spill.route_segment, (job, layout, root, i, keys, read_rows, row_bytes))
                                 for i in segments])


def _write_spilled(job: ResolvedTable, layout: spill.SpillLayout, root: str, group: int, pairs: Sequence[tuple[int, int]],
                   keys: np.ndarray | None, parts: int, executor: LocalExecutor) -> Iterator[DoneRecord]:
    """A spilling holder, write pass: group ``group``'s rows read back once and its (epoch, split) ``pairs``
    written from them on ``executor``'s threads; a split above the budget (``parts`` > 1) in parts."""
    first, stop = layout.groups[group]
    if parts == 1:
        held = run_task(spill.read_group, f"reading the spilled rows of splits {first}..{stop - 1}", job, root, layout, group)
        yield from executor.as_done([Call(f"epoch {e} split {s}", write_split, (job, e, s, keys, held)) for e, s in pairs])
        return
    for e, s in pairs:
        order = split_rows(split=s, epoch=e, hash_keys=keys, **job.split_kwargs())
        batches = spill.split_parts(job, root, layout, group, order, parts)
        yield run_task(write_split_dataset, f"epoch {e} split {s}", job, e, s, output_schema(job), batches)


def _segments(n: int, count: int, fragment_starts: np.ndarray | None) -> tuple[tuple[int, int], ...]:
    """``count`` position ranges covering ``[0, n)``, each cut moved to a fragment's start within a quarter of a
    segment when there is one: a page the cut falls in would be read by both segments.

    >>> _segments(10, 2, None), _segments(100, 4, np.array([0, 24, 52, 90]))
    (((0, 5), (5, 10)), ((0, 24), (24, 52), (52, 75), (75, 100)))
    """
    per = n / count
    cuts = []
    for k in range(1, count):
        ideal = round(k * per)
        if fragment_starts is not None and len(fragment_starts):
            near = fragment_starts[np.argmin(np.abs(fragment_starts - ideal))]
            ideal = int(near) if abs(int(near) - ideal) <= per / 4 else ideal
        cuts.append(ideal)
    bounds = sorted({0, n, *[c for c in cuts if 0 < c < n]})
    return tuple(zip(bounds[:-1], bounds[1:]))


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
        self.metadata: TableMetadata | None = None  # its prep metadata, or what was inferred from its columns

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
        self.metadata = serving_metadata(source, uri)  # a table that cannot serve is refused here, before any work
        if self.metadata.inferred is not None:
            log.warning("%s", self.metadata.inferred)
        names = source.schema.names
        columns = list(spec.columns or names)
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise PrepError(f"--columns {unknown} are not in {uri}; it has {names}")
        if spec.strategy == "hash" and any(c not in names for c in spec.hash_columns):
            raise PrepError(f"--hash-columns {list(spec.hash_columns)} must name columns of {uri}; it has {names}")
        return ResolvedTable(source=uri, version=version, columns=tuple(columns), plan=spec, num_selected=total, output=output,
                   fingerprint=spec.fingerprint(uri, version), s3=s3, read_rows=options.read_rows,
                   lance_format=options.lance_format, run_id=uuid.uuid4().hex, spill_dir=options.spill_dir)

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
        raw_keys = hash_keys_for(job, self.source) if job.plan.strategy == "hash" else None
        keys = executor.put(raw_keys)
        row_bytes = bytes_per_row(job, self.source)
        total = row_bytes * job.num_selected
        budget, threads = executor.budget, executor.threads
        batch = budget.rows(budget.write_bytes(threads), row_bytes, job.read_rows)
        job = replace(job, read_rows=batch, pick_rows=budget.rows(4 * budget.write_bytes(threads), row_bytes, job.pick_rows))
        read_rows = budget.rows(budget.read_bytes(threads), row_bytes, max(job.read_rows, _READ_BYTES // row_bytes))
        one_node = executor.min_holders == 1
        if total <= budget.hold_bytes and one_node:
            every = range(job.plan.num_splits)
            return executor.run_holders([Call("holding the selected rows", _write_group, (job, every, todo, keys, read_rows))],
                                        on_done)
        if not reads_scattered(job.plan):  # large clumps: takes are nearly scans
            return executor.run([Call(f"epoch {e} split {s}", write_split, (job, e, s, keys)) for e, s in todo], on_done)
        return self._spill(job, todo, executor, (raw_keys, keys), row_bytes, read_rows, on_done)

    def _spill(self, job: ResolvedTable, todo: Sequence[tuple[int, int]], executor: TaskExecutor,
               hash_keys: tuple[np.ndarray | None, Any], row_bytes: int, read_rows: int,
               on_done: Callable[[], None]) -> list[DoneRecord]:
        """The two passes of :mod:`prep.materialize.spill`: route every selected row once, then write each group
        (``hash_keys``: the keys, and as the executor shares them)."""
        raw_keys, keys = hash_keys
        n, nodes, hold = job.num_selected, executor.min_holders, executor.budget.hold_bytes
        groups = hold_groups(job.plan.num_splits, row_bytes * n, hold, at_least=nodes)
        count = max(nodes * executor.threads, -(-row_bytes * n // SEGMENT_BYTES))
        layout = spill.SpillLayout(job.fingerprint, _segments(n, count, None if job.selection else self._fragment_starts()),
                                   tuple((g.start, g.stop) for g in groups))
        per = n // len(layout.segments)
        root = spill.spill_root(job, job.spill_dir, nodes)
        done = spill.open_spill(root, layout, job.s3)
        left = [i for i in range(len(layout.segments)) if i not in done]
        log.info("spilling %d of %d segments of %d rows to %s, for %d groups", len(left), len(layout.segments), per, root,
                 len(groups))
        try:
            executor.run_holders([Call("spilling rows", _route, (job, layout, root, left[k::nodes], keys, read_rows, row_bytes))
                                  for k in range(nodes) if left[k::nodes]])
        except PrepError:  # a full disk, a read that failed: the output stays as it was, the spill goes
            spill.remove_spill(root, job.s3)
            raise
        calls = []
        for g, group in enumerate(groups):
            mine = [(e, s) for e, s in todo if s in group]
            if mine:  # a group of one split may be above the budget: written in parts
                alone = split_size(split=group.start, hash_keys=raw_keys, **job.split_kwargs()) if len(group) == 1 else 0
                parts = max(1, -(-alone * row_bytes // hold))
                calls.append(Call(f"splits {group.start}..{group.stop - 1}", _write_spilled,
                                  (job, layout, root, g, mine, keys, parts)))
        records = executor.run_holders(calls, on_done)
        spill.remove_spill(root, job.s3)
        return records

    def _fragment_starts(self) -> np.ndarray:
        """The position of each fragment's first row (the table read in order: no filter)."""
        return np.cumsum([0] + [f.count_rows() for f in self.source.get_fragments()])[:-1]

    def manifest(self, job: ResolvedTable, epochs: tuple[Epoch, ...]) -> Manifest:
        return Manifest(
            prep_version=prep_version, fingerprint=job.fingerprint,
            source=Source(uri=job.source, version=job.version, num_rows=self.source.count_rows(),
                          metadata=self.metadata),
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
