"""``sequential``: split ``s`` owns the contiguous rows ``[s*n/S, (s+1)*n/S)``.

Trade-off: the cheapest to read (each split is one range of the table, so reads
are sequential even with clump 1 inside the split's own range) but splits see
different parts of the table: if the table is sorted by source or length, so are
the splits. Rows are still reordered inside the split every epoch, in clumps of
``clump`` rows counted from the split's first row; a clump at least as large as
the split (``clump >= n/S``) makes it one unit, read in table order every epoch.
"""

from __future__ import annotations

import numpy as np

from prep.plan import units as _units

__all__ = ["units", "assign", "locate", "split_rows"]


def _bounds(num_rows: int, num_splits: int, split: int) -> tuple[int, int]:
    return split * num_rows // num_splits, (split + 1) * num_rows // num_splits


def units(*, num_rows: int, num_splits: int, split: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> _units.Units:
    """The split's units: blocks of ``clump`` rows from the start of its range."""
    lo, hi = _bounds(num_rows, num_splits, split)
    return _units.contiguous(hi - lo, clump, lambda u: lo + u * clump)


def assign(*, positions: np.ndarray, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> np.ndarray:
    """The split of each of ``positions`` (vectorized, O(len(positions)))."""
    return ((np.asarray(positions, dtype=np.int64) + 1) * num_splits - 1) // num_rows


def locate(*, row: int, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> tuple[int, int, int]:
    """(split, unit, offset in unit) of table position ``row``."""
    split = ((row + 1) * num_splits - 1) // num_rows
    lo, _ = _bounds(num_rows, num_splits, split)
    return split, (row - lo) // clump, (row - lo) % clump


def split_rows(
    *, num_rows: int, num_splits: int, split: int, epoch: int, seed: int = 0, clump: int = 1, hash_keys: np.ndarray | None = None
) -> np.ndarray:
    """Positions of ``split`` in this epoch's read order (see the module docstring)."""
    u = units(num_rows=num_rows, num_splits=num_splits, split=split, seed=seed, clump=clump, hash_keys=hash_keys)
    return _units.read_order(u, seed=seed, epoch=epoch, split=split)
