"""The gather pass of the Ray executor: how a split gets its rows when clumps are small and the
rows too many for a few holders (:data:`prep.materialize.table.GATHER_FROM_GROUPS`).

A Lance ``take`` per row costs ~5x a scan, so with small clumps
(:func:`prep.materialize.held.reads_scattered`) map tasks scan
contiguous chunks once per run and cut them into one piece per split (Ray
object store, spilled to disk when full); each (epoch, split) task
takes its rows into the epoch's order from its pieces (its rows in position
order, not concatenated: :mod:`prep.materialize.held`). The map pass is shared
by all epochs of the run. Holders, which read the whole selection each, need no
object store (:mod:`prep.materialize.table`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from prep import plan
from prep.materialize.held import Held, rows_at
from prep.materialize.resolved import Call, ResolvedTable, dataset
from prep.materialize.rows import bytes_per_row, read_range
from prep.materialize.write import write_split
from prep.contracts.done import DoneRecord

__all__ = ["GATHER_CHUNK_BYTES", "gather_pieces", "write_gathered"]

GATHER_CHUNK_BYTES = 64 << 20  # rows per gather map task: about this many bytes


def _gather_chunk(job: ResolvedTable, start: int, stop: int, hash_keys: np.ndarray | None) -> tuple[pa.Table, ...] | pa.Table:
    """Gather, map side: read selected rows ``[start, stop)`` in order, cut them into one piece per split.

    The pieces go to the Ray object store (shared memory, spilled to disk when
    full) and serve every epoch of this run.
    """
    table = read_range(job, dataset(job, job.source, job.version), start, stop)
    positions = np.arange(start, stop)
    splits = plan.assign_rows(positions=positions, hash_keys=hash_keys, **job.split_kwargs())
    order = np.argsort(splits, kind="stable")
    bounds = np.searchsorted(splits[order], np.arange(job.plan.num_splits + 1))
    grouped = rows_at([table], positions, positions[order])
    # Ray stores each slice compactly (only the slice's bytes), measured: no per-split copy needed here
    pieces = tuple(grouped.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:]))
    return pieces if len(pieces) > 1 else pieces[0]


def write_gathered(job: ResolvedTable, epoch: int, split: int, hash_keys: np.ndarray | None, *pieces: pa.Table) -> DoneRecord:
    """Gather, reduce side: the split's pieces (its rows in position order) -> its dataset."""
    positions = np.sort(plan.split_rows(split=split, epoch=epoch, hash_keys=hash_keys, **job.split_kwargs()))
    return write_split(job, epoch, split, hash_keys, Held(pieces, positions))


def gather_pieces(job: ResolvedTable, source: Any, executor: Any, hash_ref: Any) -> list[list]:
    """Submits the gather map tasks on ``executor`` (:meth:`~prep.materialize.on_ray.RayExecutor.scatter`);
    returns piece refs indexed [chunk][split]."""
    step = int(min(1 << 20, max(job.read_rows, GATHER_CHUNK_BYTES // bytes_per_row(job, source))))
    bounds = [(a, min(a + step, job.num_selected)) for a in range(0, job.num_selected, step)]
    calls = [Call(f"gather rows [{a}, {b})", _gather_chunk, (job, a, b, hash_ref)) for a, b in bounds]
    return executor.scatter(calls, job.plan.num_splits)
