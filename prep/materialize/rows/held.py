"""Rows held in memory, and how a split takes its read order from them.

Taking rows from an in-memory Arrow table costs a fraction of a Lance ``take``
per row (measured: a full random epoch of GSM8K x16 in 0.4 s on 2 threads vs
1.4 s through Lance), so both executors hand a split task the rows it needs
when they can: a holder as all the rows of its group of splits, read in one
sequential pass (:func:`hold_splits`, on either executor), the Ray executor's
spilled group as its rows read back from disk (:mod:`prep.materialize.rows.spill`).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from prep import plan
from prep.materialize.options import PICK_ROWS
from prep.materialize.resolved import ResolvedTable, dataset
from prep.materialize.rows.selected import read_range
from prep.plan.spec import PlanSpec
from prep.materialize.rows.take import byte_view, from_byte_view

__all__ = ["Held", "rows_at", "hold_splits", "reads_scattered", "SCATTERED_BELOW_CLUMP", "SLICE_FROM_RUN_ROWS"]

SCATTERED_BELOW_CLUMP = 16  # clumps smaller than this make a Lance take read scattered rows (see reads_scattered)
SLICE_FROM_RUN_ROWS = 16  # average run length from which runs are sliced rather than taken (see Held._pick)


def reads_scattered(p: PlanSpec) -> bool:
    """Whether a split's rows are scattered over the table in small clumps, so that both
    executors read them with scans instead of Lance takes (a take per row costs ~5x a scan).

    >>> reads_scattered(PlanSpec(strategy="random")), reads_scattered(PlanSpec(strategy="sequential"))
    (True, False)
    """
    return p.strategy != "sequential" and p.clump < SCATTERED_BELOW_CLUMP


class Held:
    """Selected rows in memory, as they were read: consecutive pieces, never concatenated.

    Concatenating the pieces into one table would copy every row once more
    (with fresh pages, ~0.8 CPU-s and twice the memory for GSM8K x134), so a
    batch takes its rows from the pieces that hold them: runs of consecutive
    rows (clumps) as slices, else one take per piece it touches, put back in
    order by a take of the batch alone. Token lists are byte blocks throughout
    (:mod:`prep.materialize.rows.take`): one ``memcpy`` per row.

    Args:
        pieces (Sequence[pa.Table]): the rows, in position order, cut anywhere (at least one piece, same schema).
        positions (np.ndarray): selected position of each row, ascending.
    """

    def __init__(self, pieces: Sequence[pa.Table], positions: np.ndarray) -> None:
        self.schema = pieces[0].schema
        kept = [t for t in pieces if t.num_rows]
        self._views = [byte_view(c) for t in kept for c in _single_chunks(t)]
        self._starts = np.cumsum([0] + [v.num_rows for v in self._views])
        self.positions = positions
        if int(self._starts[-1]) != len(positions):
            raise ValueError(f"{int(self._starts[-1])} rows held for {len(positions)} positions")

    def batches(self, order: np.ndarray, batch_rows: int, pick_rows: int = PICK_ROWS) -> Iterator[pa.RecordBatch]:
        """The rows at positions ``order`` (all held), in that order, ``batch_rows`` at a time, taken about
        ``pick_rows`` at once."""
        first, count = (int(self.positions[0]), len(self.positions)) if len(self.positions) else (0, 0)
        if count and int(self.positions[-1]) - first == count - 1:  # a range of positions (all rows held)
            local = np.asarray(order, dtype=np.int64) - first
        else:
            local = np.searchsorted(self.positions, order)
        step = batch_rows * max(1, pick_rows // batch_rows)  # whole batches, taken a few at a time
        for i in range(0, len(local), step):
            yield from from_byte_view(self._pick(local[i : i + step]), self.schema).to_batches(max_chunksize=batch_rows)

    def _pick(self, index: np.ndarray) -> pa.Table:
        """Held rows ``index`` (in the byte view): runs of consecutive rows copied as slices, else taken.

        A take copies row by row; with runs of ``SLICE_FROM_RUN_ROWS`` rows or more on
        average, slicing the runs and concatenating them once is ~6x cheaper (clump 64, measured).
        """
        piece = np.searchsorted(self._starts, index, side="right") - 1
        within = index - self._starts[piece]
        breaks = np.flatnonzero((np.diff(index) != 1) | (np.diff(piece) != 0)) + 1
        if (len(breaks) + 1) * SLICE_FROM_RUN_ROWS <= len(index):
            runs = zip(np.r_[0, breaks], np.r_[breaks, len(index)])
            return pa.concat_tables([self._views[piece[a]].slice(int(within[a]), int(b - a)) for a, b in runs]).combine_chunks()
        ordered = bool(np.all(np.diff(piece) >= 0))  # rows of one piece, or a filter: taken in order
        by_piece = np.arange(len(index)) if ordered else np.argsort(piece, kind="stable")
        grouped_piece = piece[by_piece]
        cuts = np.flatnonzero(np.diff(grouped_piece)) + 1
        taken = [self._views[grouped_piece[a]].take(pa.array(within[by_piece[a:b]]))
                 for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(index)])]
        grouped = pa.concat_tables(taken).combine_chunks() if len(taken) > 1 else taken[0]
        if ordered:
            return grouped
        back = np.empty_like(by_piece)
        back[by_piece] = np.arange(len(by_piece))
        return grouped.take(pa.array(back))


def rows_at(pieces: Sequence[pa.Table], positions: np.ndarray, wanted: np.ndarray) -> pa.Table:
    """The rows at positions ``wanted`` (any order) of rows held as ``pieces`` at ``positions``, as one table."""
    batches = Held(pieces, positions).batches(wanted, max(1, len(wanted)))
    return pa.Table.from_batches(list(batches), schema=pieces[0].schema)


def _single_chunks(table: pa.Table) -> Iterator[pa.Table]:
    """``table`` as tables of one chunk per column (Lance returns a batch per fragment), without copying."""
    for batch in table.to_batches():
        if batch.num_rows:
            yield pa.Table.from_batches([batch])


def hold_splits(job: ResolvedTable, splits: range, hash_keys: np.ndarray | None, chunk_rows: int) -> Held:
    """Reads the selected rows in order, ``chunk_rows`` at a time, keeping those of ``splits``.

    One sequential pass over the selected rows, whatever the strategy: the rows
    of every split in ``splits`` end up in memory, in position order.

    Args:
        job (ResolvedTable): the run.
        splits (range): the splits whose rows to keep (all of them: no filtering).
        hash_keys (np.ndarray | None): one key per selected row (``hash`` strategy), else None.
        chunk_rows (int): rows per sequential read.

    Returns:
        The held rows and their positions.
    """
    source = dataset(job, job.source, job.version)
    every = splits == range(job.plan.num_splits)
    kept, positions = [], []
    for start in range(0, job.num_selected, chunk_rows):
        stop = min(start + chunk_rows, job.num_selected)
        table, pos = read_range(job, source, start, stop), np.arange(start, stop)
        if not every:
            owner = plan.assign_rows(positions=pos, hash_keys=hash_keys, **job.split_kwargs())
            mine = (owner >= splits.start) & (owner < splits.stop)
            table, pos = rows_at([table], pos, pos[mine]), pos[mine]
        kept.append(table)
        positions.append(pos)
    return Held(kept, np.concatenate(positions))
