"""A single table's run: resolve, the filter sidecar, the split tasks, the manifest (:class:`TableRun`).

Where a split task gets its rows is the same on both executors, chosen by the run's
memory budget (:class:`~prep.materialize.budget.Budget`, ``--max-memory``):

- held: when the selected rows fit one holder's budget on a one-node run, a holder
  (:meth:`~prep.materialize.resolved.TaskExecutor.run_holders`) reads them in one
  sequential pass, keeps them in memory (:mod:`prep.materialize.rows.held`) and writes every
  split from them on its threads.
- taken: when clumps are large (``sequential`` included) and the rows do not fit or
  there are several nodes, each split task takes its rows from the table with Lance
  takes, which such clumps make nearly scans (memory: a few written batches a task).
- spilled: otherwise, a two-pass external shuffle (:mod:`prep.materialize.rows.spill`): the
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
from prep.materialize.rows import spill
from prep.materialize.rows.held import hold_splits, reads_scattered
from prep.materialize.resolved import Call, ResolvedTable, TaskExecutor, dataset, run_task
from prep.materialize.options import RunOptions
from prep.materialize.run import materialize
from prep.materialize.rows.selected import bytes_per_row, hash_keys_for, selection_fingerprint, write_selection
from prep.materialize.write import output_schema, write_split, write_split_dataset
from prep.plan import assign_rows, split_rows, split_size
from prep.plan.spec import DEFAULT_SPLITS, PlanSpec

if TYPE_CHECKING:
    from prep.materialize.executors.local import LocalExecutor

__all__ = ["materialize_shuffle", "TableRun", "hold_groups", "SEGMENT_BYTES"]

log = logging.getLogger("prep.materialize")
_READ_BYTES = 64 << 20  # rows per sequential read: about this many bytes at most (less within a small budget)
SEGMENT_BYTES = 4 << 30  # rows one spill segment routes at most: a killed run's rerun keeps finished segments


def hold_groups(split_bytes: Sequence[int], hold_bytes: int, at_least: int = 1) -> list[range]:
    """Contiguous groups of splits whose bytes (``split_bytes``, per split) add up to ``hold_bytes`` at most (one
    split a group at least, and so a split above it alone), and ``at_least`` groups when there are enough splits.

    >>> hold_groups([400] * 8, 1000), hold_groups([100] * 8, 1000, at_least=2), hold_groups([300, 2000, 300], 1000)
    ([range(0, 2), range(2, 4), range(4, 6), range(6, 8)], [range(0, 4), range(4, 8)], [range(0, 1), range(1, 2), range(2, 3)])
    """
    cap = min(hold_bytes, -(-sum(split_bytes) // max(1, min(at_least, len(split_bytes)))))
    groups, start, size = [], 0, 0
    for s, b in enumerate(split_bytes):
        if s > start and size + b > cap:
            groups.append(range(start, s))
            start, size = s, 0
        size += b
    return groups + [range(start, len(split_bytes))]


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
                   keys: np.ndarray | None, executor: LocalExecutor) -> Iterator[DoneRecord]:
    """A spilling holder, write pass: group ``group``'s rows read back once and its (epoch, split) ``pairs``
    written from them on ``executor``'s threads."""
    first, stop = layout.groups[group]
    held = run_task(spill.read_group, f"reading the spilled rows of splits {first}..{stop - 1}", job, root, layout, group)
    yield from executor.as_done([Call(f"epoch {e} split {s}", write_split, (job, e, s, keys, held)) for e, s in pairs])


def _write_in_parts(job: ResolvedTable, layout: spill.SpillLayout, root: str, pairs: Sequence[tuple[int, int, int]],
                    keys: np.ndarray | None, parts: int, executor: LocalExecutor) -> Iterator[DoneRecord]:
    """A spilling holder, write pass for splits above the budget (each its own group): its (group, epoch, split)
    ``pairs`` on ``executor``'s threads, each split in ``parts`` parts (a part per thread fits the budget)."""
    yield from executor.as_done([Call(f"epoch {e} split {s}", _split_in_parts, (job, layout, root, g, e, s, keys, parts))
                                 for g, e, s in pairs])


def _split_in_parts(job: ResolvedTable, layout: spill.SpillLayout, root: str, group: int, epoch: int, split: int,
                    keys: np.ndarray | None, parts: int) -> DoneRecord:
    order = split_rows(split=split, epoch=epoch, hash_keys=keys, **job.split_kwargs())
    batches = spill.split_parts(job, root, layout, group, order, parts)
    return write_split_dataset(job, epoch, split, output_schema(job), batches)


def _split_sizes(job: ResolvedTable, hash_keys: np.ndarray | None) -> list[int]:
    """Rows of each split (``hash``: one pass over the keys, a million at a time; else arithmetic)."""
    if hash_keys is None:
        return [split_size(split=s, **job.split_kwargs()) for s in range(job.plan.num_splits)]
    counts = np.zeros(job.plan.num_splits, dtype=np.int64)
    for a in range(0, job.num_selected, 1 << 20):
        at = np.arange(a, min(a + (1 << 20), job.num_selected))
        counts += np.bincount(assign_rows(positions=at, hash_keys=hash_keys, **job.split_kwargs()), minlength=len(counts))
    return counts.tolist()


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
        """The two passes of :mod:`prep.materialize.rows.spill`: route every selected row once, then write each group
        (``hash_keys``: the keys, and as the executor shares them)."""
        raw_keys, keys = hash_keys
        n, nodes, hold = job.num_selected, executor.min_holders, executor.budget.hold_bytes
        sizes = [int(rows) * row_bytes for rows in _split_sizes(job, raw_keys)]
        in_parts = max(sizes) > hold  # splits above the budget: a group each, written in parts
        groups = [range(s, s + 1) for s in range(len(sizes))] if in_parts else hold_groups(sizes, hold, at_least=nodes)
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
        threads = executor.threads
        if not in_parts:  # each group held whole, its splits written from it on the threads
            calls = [Call(f"splits {group.start}..{group.stop - 1}", _write_spilled, (job, layout, root, g, mine, keys))
                     for g, group in enumerate(groups) if (mine := [(e, s) for e, s in todo if s in group])]
        else:  # one split a thread, each in parts of a thread's share of the budget
            parts = -(-max(sizes) * threads // hold)
            pairs = [(s, e, s) for e, s in todo]  # a group per split
            calls = [Call(f"splits in parts of {parts}", _write_in_parts, (job, layout, root, pairs[i:i + threads], keys, parts))
                     for i in range(0, len(pairs), threads)]
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
