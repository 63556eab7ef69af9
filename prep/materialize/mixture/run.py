"""A mixture's run (:class:`MixtureRun`): several tables, by weight, into shuffled epochs of exact global batches.

The steps are the single table's (:func:`prep.materialize.run.materialize`): resolve (open,
pin and check the tables, :mod:`prep.materialize.mixture.sources`), claim the output,
plan each epoch in the driver (:func:`prep.plan.mixture.epoch_sequence`: each position's
source and row, after checking that the plan fits in memory), run one task per missing
(epoch, split) on the local executor or on Ray, and write the manifest last. A rerun
writes again only the splits without a sound done record, so a killed run finishes
where it stopped and writes the same bytes.

Global batch ``t`` of an epoch (``G`` positions) is laid out as the reader reads a global
batch of ``G`` rows, a run of rows in each split (``b = G/S`` when ``S`` divides ``G``;
:func:`prep.plan.mixture.split_positions`): the reader's step ``t`` is that global batch at
every world size dividing ``G``. Every row carries its source
index in a ``uint16`` ``source`` column, and every done record counts the rows and
tokens each source put in its split (the manifest sums them per epoch).

Where the rows come from: when all selected rows of all sources fit in one holder's
budget (``--max-memory``, :class:`prep.materialize.budget.Budget`), a holder (:meth:`~prep.materialize.resolved.TaskExecutor.run_holders`:
this process locally, a task on each node on Ray) holds them after one scan per
source and writes its splits from them (like a single-table full random run);
otherwise each split takes its rows from each table with Lance takes, a budget's batch at a time.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from prep import __version__ as prep_version
from prep.io import storage
from prep.errors import PrepError
from prep.contracts.done import DoneRecord
from prep.contracts.manifest import Epoch, Manifest, MixtureTable, Source
from prep.materialize.rows.held import Held
from prep.materialize.resolved import Call, TaskExecutor, run_task
from prep.materialize.mixture.sources import (SOURCE_COLUMN, OpenSource, check_repeats, epoch_rows_for, open_sources,
                                              output_schema, plan_sources, row_tokens)
from prep.materialize.options import DEFAULT_LANCE_FORMAT, READ_ROWS, RunOptions
from prep.materialize.run import materialize
from prep.materialize.write import write_split_dataset
from prep.plan import mixture as mixplan
from prep.plan.spec import DEFAULT_SPLITS, PlanSpec

if TYPE_CHECKING:
    from prep.materialize.executors.local import LocalExecutor

__all__ = ["materialize_mixture", "MixtureRun", "ResolvedMixture", "epoch_plan", "check_plannable", "PLAN_BYTES_PER_ROW"]

log = logging.getLogger("prep.materialize")

# Driver memory to plan one epoch, per row: the source (2 bytes) and row (8) of each position,
# plus the sort keys and order of the interleaving (~5 int64 arrays while it runs), measured
# ~48 bytes a row at 10 M rows; 64 leaves room. verify holds the same per epoch.
PLAN_BYTES_PER_ROW = 64


@dataclass(frozen=True, kw_only=True)
class ResolvedMixture:
    """What every mixture task shares, by value (the sources pickle as URIs, versions and row addresses)."""

    output: str
    fingerprint: str
    plan: PlanSpec
    sources: tuple[OpenSource, ...]
    schema: pa.Schema
    s3: storage.S3Options = field(default_factory=storage.S3Options)
    read_rows: int = READ_ROWS
    lance_format: str = DEFAULT_LANCE_FORMAT

    @property
    def source(self) -> str:
        """The first table's URI (the marker and the manifest name it; the fingerprint covers all)."""
        return self.sources[0].spec.table

    @property
    def version(self) -> int:
        return self.sources[0].spec.version

    def lance_options(self, uri: str) -> dict[str, str] | None:
        return storage.lance_storage_options(uri, self.s3)


def epoch_plan(plan: PlanSpec, sources: Sequence[OpenSource], epoch: int) -> mixplan.EpochSequence:
    """Epoch ``epoch`` of a pinned mixture plan: each position's source and row (pure, see :mod:`prep.plan.mixture`)."""
    mix = plan.mixture
    return mixplan.epoch_sequence(plan_sources(mix, sources), global_batch=mix.global_batch, epoch_rows=mix.epoch_rows,
                                  epoch=epoch, seed=plan.seed, clump=plan.clump, unit=mix.weight_by)


def _memory_bytes() -> int:
    """Physical memory of this machine (the bound an epoch's plan is checked against)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: no bound known, none applied
        return 1 << 62


def check_plannable(epoch_rows: int, where: str) -> None:
    """Refuses an epoch whose plan would not fit in half this machine's memory
    (:data:`PLAN_BYTES_PER_ROW` bytes a row), before anything is allocated.

    Raises:
        PrepError: one line with the epoch size, what planning it needs and what the machine has.
    """
    need, have = epoch_rows * PLAN_BYTES_PER_ROW, _memory_bytes()
    if need > have // 2:
        raise PrepError(f"{where}: epoch_rows={epoch_rows:,} needs ~{need / 2**30:,.1f} GiB to plan "
                        f"({PLAN_BYTES_PER_ROW} bytes a row) and this machine has {have / 2**30:,.1f} GiB (at most half "
                        f"is used, {have // 2 // PLAN_BYTES_PER_ROW:,} rows): lower epoch_rows or epoch_tokens")


class MixtureRun:
    """A mixture (a :class:`PlanSpec` with a mixture, versions pinned here unless given).

    Args:
        plan: the plan.
    """

    name = "mixture"

    def __init__(self, plan: PlanSpec) -> None:
        if plan.mixture is None:
            raise PrepError("materialize_mixture needs a plan with a mixture; use materialize_shuffle for one table")
        self.plan = plan
        self._sequences: dict[int, mixplan.EpochSequence] = {}

    def resolve(self, output: str, options: RunOptions, s3: storage.S3Options) -> ResolvedMixture:
        """Opens and checks the tables, pins the plan (versions, epoch size)."""
        if options.extend:
            raise PrepError("--extend works with --table: a mixture names the table version of each source "
                            "(`version:` in the mixture file; default: the newest when first materialized)")
        plan = self.plan
        if plan.mixture.epoch_rows is not None:
            check_plannable(plan.mixture.epoch_rows, "mixture")
        sources = tuple(open_sources(plan.mixture, s3))
        schema = output_schema(sources)
        epoch_rows = epoch_rows_for(plan.mixture, sources, plan.num_splits)
        check_plannable(epoch_rows, "mixture")
        plan = replace(plan, mixture=replace(plan.mixture, sources=tuple(s.spec for s in sources), epoch_rows=epoch_rows))
        first = sources[0].spec
        return ResolvedMixture(output=output, fingerprint=plan.fingerprint(first.table, first.version), plan=plan,
                          sources=sources, schema=schema, s3=s3, read_rows=options.read_rows,
                          lance_format=options.lance_format)

    def prepare(self, job: ResolvedMixture, epochs: range) -> ResolvedMixture:
        """Plans every epoch of the run, and refuses one that repeats a source more than its
        ``max_repeats`` (even an epoch already written: a rerun refuses what the first run would)."""
        for e in epochs:
            seq = epoch_plan(job.plan, job.sources, e)
            check_repeats(job.plan.mixture, job.sources, e, np.bincount(seq.source, minlength=len(job.sources)))
            self._sequences[e] = seq
        return job

    def write(self, job: ResolvedMixture, todo: Sequence[tuple[int, int]], executor: TaskExecutor,
              on_done: Callable[[], None]) -> list[DoneRecord]:
        """The (epoch, split) pairs in ``todo``: from rows held in memory when one holder can hold them all,
        else each split taking its rows from the tables."""
        mix, p = job.plan.mixture, job.plan
        pairs = []
        for e, s in todo:
            at = mixplan.split_positions(mix.epoch_rows, mix.global_batch, p.num_splits, s)
            seq = self._sequences[e]
            pairs.append((e, s, seq.source[at], seq.row[at]))
        held_bytes, budget = _held_bytes(job), executor.budget
        row_bytes = held_bytes // max(1, sum(s.selected for s in job.sources))
        job = replace(job, read_rows=budget.rows(budget.write_bytes(executor.threads), row_bytes, job.read_rows))
        if held_bytes <= executor.hold_bytes:
            count = min(len(pairs), executor.min_holders)  # each holds every source: one per node, no more
            calls = [Call("holding the sources", _write_held, (job, pairs[i::count])) for i in range(count)]
            return executor.run_holders(calls, on_done)
        shared = executor.put(job)
        return executor.run([Call(f"epoch {e} split {s}", _write_split, (shared, e, s, src, row, None))
                             for e, s, src, row in pairs], on_done)

    def manifest(self, job: ResolvedMixture, epochs: tuple[Epoch, ...]) -> Manifest:
        first = job.sources[0]
        return Manifest(
            prep_version=prep_version, fingerprint=job.fingerprint,
            source=Source(uri=first.spec.table, version=first.spec.version, num_rows=first.num_rows, metadata=first.metadata),
            plan=job.plan, num_selected_rows=job.plan.mixture.epoch_rows, columns=tuple(job.schema.names), epochs=epochs,
            mixture=tuple(MixtureTable(uri=s.spec.table, version=s.spec.version, num_rows=s.num_rows, selected_rows=s.selected)
                          for s in job.sources))


def materialize_mixture(*, mixture: str | Path | PlanSpec, splits: int = DEFAULT_SPLITS, **options: Any) -> Manifest:
    """Materializes epochs ``[start_epoch, start_epoch + epochs)`` of a mixture.

    Args:
        mixture: a mixture file (:mod:`prep.materialize.mixture.file`) or a plan with a mixture.
        splits: splits per epoch when ``mixture`` is a file (any number: an epoch is a multiple of
            ``lcm(global_batch, splits)`` rows).
        **options: the run's options, :class:`prep.materialize.options.RunOptions` (``output`` and ``epochs`` at least).

    Returns:
        The manifest that was written.

    Raises:
        PrepError: a bad mixture file, tables that cannot be mixed, a source asked to repeat more
            than its ``max_repeats``, or an output that holds another plan.
    """
    run_options = RunOptions(**options)
    plan = mixture if isinstance(mixture, PlanSpec) else _load(mixture, splits)
    return materialize(MixtureRun(plan), run_options)


def _load(path: str | Path, splits: int) -> PlanSpec:
    """The plan of a mixture file (the loader imports pydantic, ~0.3 s of start-up: only when a file is read)."""
    from prep.materialize.mixture.file import load_mixture

    return load_mixture(path, splits)


def _held_bytes(job: ResolvedMixture) -> int:
    """Arrow bytes of all selected rows of all sources, from their first rows (it only decides holding or not)."""
    total = 0
    for s in job.sources:
        sample = s.take(np.arange(min(256, s.selected)), job.schema.names[:-1])
        total += sample.nbytes * s.selected // max(1, sample.num_rows)
    return total


def _hold(job: ResolvedMixture) -> tuple[Held, np.ndarray]:
    """All selected rows of every source, one scan each, source after source (with their ``source`` column);
    and where each source starts."""
    parts = []
    for s in job.sources:
        table = s.read_all(job.schema.names[:-1])
        column = pa.array(np.full(table.num_rows, s.index, dtype=np.uint16))
        parts.append(pa.Table.from_arrays([*table.columns, column], schema=job.schema))
    starts = np.cumsum([0] + [s.selected for s in job.sources])[:-1]
    return Held(parts, np.arange(sum(t.num_rows for t in parts))), starts  # held as read: no concatenated copy


def _write_held(job: ResolvedMixture, pairs: Sequence[tuple[int, int, np.ndarray, np.ndarray]],
                executor: LocalExecutor) -> Iterator[DoneRecord]:
    """A holder: every selected row of every source, one scan each, then ``pairs`` (epoch, split and its
    rows' sources and rows) written from them on ``executor``'s threads, each record as its split is done."""
    held = run_task(_hold, "reading the mixture's sources", job)
    yield from executor.as_done([Call(f"epoch {e} split {s}", _write_split, (job, e, s, src, row, held))
                                 for e, s, src, row in pairs])


def _taken(job: ResolvedMixture, src: np.ndarray, row: np.ndarray) -> pa.Table:
    """Positions ``(src[i], row[i])`` taken from the tables, in order."""
    parts, where = [], []
    for s in job.sources:
        at = np.flatnonzero(src == s.index)
        if len(at):
            table = s.take(row[at], job.schema.names[:-1])
            column = pa.array(np.full(len(at), s.index, dtype=np.uint16))
            parts.append(pa.Table.from_arrays([*table.columns, column], schema=job.schema))
            where.append(at)
    return pa.concat_tables(parts).combine_chunks().take(pa.array(np.argsort(np.concatenate(where), kind="stable")))


def _split_batches(job: ResolvedMixture, src: np.ndarray, row: np.ndarray,
                   held: tuple[Held, np.ndarray] | None) -> Iterator[pa.RecordBatch]:
    if held is not None:
        rows, starts = held
        yield from rows.batches(starts[src] + row, job.read_rows, 4 * job.read_rows)
        return
    for i in range(0, len(src), job.read_rows):
        yield from _taken(job, src[i:i + job.read_rows], row[i:i + job.read_rows]).to_batches(max_chunksize=job.read_rows)


def _write_split(job: ResolvedMixture, epoch: int, split: int, src: np.ndarray, row: np.ndarray,
                 held: tuple[Held, np.ndarray] | None) -> DoneRecord:
    """One (epoch, split): its rows in read order, written with the rows and tokens each source gave it."""
    n = len(job.sources)
    rows, tokens = np.zeros(n, np.int64), np.zeros(n, np.int64)

    def counted() -> Iterator[pa.RecordBatch]:
        for batch in _split_batches(job, src, row, held):
            which = np.asarray(batch.column(SOURCE_COLUMN))
            rows[:] += np.bincount(which, minlength=n)
            tokens[:] += np.bincount(which, weights=row_tokens(batch), minlength=n).astype(np.int64)
            yield batch

    return write_split_dataset(job, epoch, split, job.schema, counted(), lambda: (rows.tolist(), tokens.tolist()))
