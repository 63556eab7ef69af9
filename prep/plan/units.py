"""Clumps ("units") of a split and their per-epoch order: the part every strategy shares.

A strategy decides which rows a split owns and groups them into units of
``clump`` rows, in a canonical order that does not depend on the epoch. The read
order of an epoch is then a seeded permutation of those units
(``SeedSequence([seed, epoch, split])``), each unit's rows kept in table order, so
a clump of 64 costs one read per 64 rows. Units all hold ``clump`` rows except at
most one shorter unit (the table's, or the split's, last block).

Everything is computed per unit from O(1) state (or from the split's member list
for ``hash``), so enumerating a slice of a split's read order costs memory in
proportion to the slice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from prep.plan import permutation

__all__ = ["Units", "expand_ranges", "read_order", "iter_read_order", "read_rows", "index_of"]


def expand_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenates ``range(start, start + length)`` for each pair, vectorized.

    >>> expand_ranges(np.array([10, 3]), np.array([2, 3])).tolist()
    [10, 11, 3, 4, 5]
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    begins = np.cumsum(lengths) - lengths
    return np.repeat(starts - begins, lengths) + np.arange(total, dtype=np.int64)


@dataclass(frozen=True, kw_only=True)
class Units:
    """One split's rows, grouped into units of ``clump`` rows, in canonical order.

    Args:
        count: number of units.
        num_rows: rows in the split.
        clump: rows per unit (all but ``short_unit``).
        short_unit: the unit holding fewer rows, or -1 when all are full.
        short_len: rows in ``short_unit``.
        first_row: unit indices -> index of each unit's first row: a table position,
            or an index into ``members`` when that is given.
        members: the split's positions in canonical order (``hash`` only).
    """

    count: int
    num_rows: int
    clump: int
    short_unit: int
    short_len: int
    first_row: Callable[[np.ndarray], np.ndarray]
    members: np.ndarray | None = None

    def lengths(self, units: np.ndarray) -> np.ndarray:
        out = np.full(units.shape, self.clump, dtype=np.int64)
        if self.short_unit >= 0:
            out[units == self.short_unit] = self.short_len
        return out

    def expand(self, units: np.ndarray) -> np.ndarray:
        """Positions of the rows of ``units``, unit after unit."""
        units = np.asarray(units, dtype=np.int64)
        rows = expand_ranges(self.first_row(units), self.lengths(units))
        return rows if self.members is None else self.members[rows]


def contiguous(size: int, clump: int, first_row: Callable[[np.ndarray], np.ndarray], members: np.ndarray | None = None) -> Units:
    """Units of ``clump`` consecutive rows over ``size`` rows: only the last may be short."""
    count = -(-size // clump)
    tail = size % clump
    return Units(
        count=count, num_rows=size, clump=clump, short_unit=count - 1 if tail else -1, short_len=tail,
        first_row=first_row, members=members,
    )


def _order_keys(seed: int, epoch: int, split: int) -> np.ndarray:
    return permutation.keys(permutation.ORDER, seed, epoch, split)


def read_order(units: Units, *, seed: int, epoch: int, split: int, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Positions of the split's units in read slots ``[start, stop)`` of this epoch.

    Read slot ``i`` holds unit ``P(i)``, ``P`` the seeded bijection of
    ``[0, units.count)`` for ``(seed, epoch, split)``.
    """
    stop = units.count if stop is None else min(stop, units.count)
    slots = np.arange(start, max(start, stop), dtype=np.int64)
    return units.expand(permutation.permute(slots, units.count, _order_keys(seed, epoch, split)))


def iter_read_order(units: Units, *, seed: int, epoch: int, split: int, chunk_rows: int) -> Iterator[np.ndarray]:
    """The split's read order in consecutive chunks of about ``chunk_rows`` rows."""
    step = max(1, chunk_rows // units.clump)
    for start in range(0, units.count, step):
        yield read_order(units, seed=seed, epoch=epoch, split=split, start=start, stop=start + step)


def _short_slot(units: Units, keys: np.ndarray) -> int:
    if units.short_unit < 0:
        return -1
    return int(permutation.invert(np.array([units.short_unit]), units.count, keys)[0])


def _rows_before(units: Units, slot: int, short_slot: int) -> int:
    before = slot * units.clump
    if 0 <= short_slot < slot:
        before -= units.clump - units.short_len
    return before


def read_rows(units: Units, *, seed: int, epoch: int, split: int, start: int, stop: int) -> np.ndarray:
    """Positions at read-order indices ``[start, stop)`` of the split: O(stop - start)."""
    start, stop = max(0, start), min(stop, units.num_rows)
    if stop <= start:
        return np.zeros(0, dtype=np.int64)
    short_slot = _short_slot(units, _order_keys(seed, epoch, split))

    def slot_of(row: int) -> int:
        if 0 <= short_slot and row >= short_slot * units.clump + units.short_len:
            return (row + units.clump - units.short_len) // units.clump
        return row // units.clump

    first, last = slot_of(start), slot_of(stop - 1)
    rows = read_order(units, seed=seed, epoch=epoch, split=split, start=first, stop=last + 1)
    skip = start - _rows_before(units, first, short_slot)
    return rows[skip : skip + stop - start]


def index_of(units: Units, *, seed: int, epoch: int, split: int, unit: int, offset: int) -> int:
    """Index in the split's read order of row ``offset`` of ``unit``: O(1)."""
    keys = _order_keys(seed, epoch, split)
    slot = int(permutation.invert(np.array([unit]), units.count, keys)[0])
    return _rows_before(units, slot, _short_slot(units, keys)) + offset
