"""``random``: a seeded bijection of the table's full blocks, cut into ``S`` equal ranges.

Block ``g`` holds rows ``[g*clump, (g+1)*clump)``. With ``P`` the seeded bijection
of ``[0, F)`` (``F`` full blocks, keyed by ``SeedSequence([seed])``), split ``s``
owns the blocks ``P(k)`` for ``k`` in ``[s*F/S, (s+1)*F/S)``. The table's last,
partial block (``num_rows % clump`` rows, when there is one) goes to split 0,
which always holds the fewest full blocks (``floor(F/S)``), so split sizes
differ by at most one clump. ``P`` is computed per position
(:mod:`prep.plan.permutation`), so a split's rows cost O(rows in the split) and
one row's split and position cost O(1), at any table size.

Trade-off: the best mixing (every split is a uniform sample of the table, and
so is every global batch), but with clump 1 every row is a separate random
read when materializing; clumps of 32-256 rows keep most of the mixing and cut
the reads by that factor.
"""

from __future__ import annotations

import numpy as np

from prep.plan import permutation
from prep.plan import units as _units

__all__ = ["units", "assign", "locate", "split_rows"]


def _slots(full: int, num_splits: int, split: int) -> tuple[int, int]:
    return split * full // num_splits, (split + 1) * full // num_splits


def _split_of_slots(slots: np.ndarray, full: int, num_splits: int) -> np.ndarray:
    return ((slots + 1) * num_splits - 1) // max(full, 1)


def units(*, num_rows: int, num_splits: int, split: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> _units.Units:
    """The split's units: blocks ``P(lo), P(lo + 1), ...`` of its slot range, then (split 0) the partial block."""
    full, tail = divmod(num_rows, clump)
    lo, hi = _slots(full, num_splits, split)
    keys = permutation.keys(permutation.ASSIGN, seed)
    count = hi - lo
    short = count if tail and split == 0 else -1

    def first_row(u: np.ndarray) -> np.ndarray:
        u = np.asarray(u, dtype=np.int64)
        out = np.full(u.shape, full * clump, dtype=np.int64)  # the partial block starts after the full ones
        inner = u < count
        if inner.any():
            out[inner] = permutation.permute(lo + u[inner], full, keys) * clump
        return out

    return _units.Units(
        count=count + (short >= 0),
        num_rows=count * clump + (tail if short >= 0 else 0),
        clump=clump,
        short_unit=short,
        short_len=tail,
        first_row=first_row,
    )


def assign(*, positions: np.ndarray, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> np.ndarray:
    """The split of each of ``positions`` (vectorized, O(len(positions)))."""
    full = num_rows // clump
    blocks = np.asarray(positions, dtype=np.int64) // clump
    out = np.zeros(blocks.shape, dtype=np.int64)  # the partial block: split 0
    inner = blocks < full
    if inner.any():
        slots = permutation.invert(blocks[inner], full, permutation.keys(permutation.ASSIGN, seed))
        out[inner] = _split_of_slots(slots, full, num_splits)
    return out


def locate(*, row: int, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> tuple[int, int, int]:
    """(split, unit, offset in unit) of table position ``row``: O(1)."""
    full = num_rows // clump
    block = row // clump
    if block == full:  # the partial block: split 0's last unit
        lo, hi = _slots(full, num_splits, 0)
        return 0, hi - lo, row % clump
    slot = int(permutation.invert(np.array([block]), full, permutation.keys(permutation.ASSIGN, seed))[0])
    split = int(_split_of_slots(np.array([slot]), full, num_splits)[0])
    lo, _ = _slots(full, num_splits, split)
    return split, slot - lo, row % clump


def split_rows(
    *, num_rows: int, num_splits: int, split: int, epoch: int, seed: int = 0, clump: int = 1, hash_keys: np.ndarray | None = None
) -> np.ndarray:
    """Positions of ``split`` in this epoch's read order (see the module docstring)."""
    u = units(num_rows=num_rows, num_splits=num_splits, split=split, seed=seed, clump=clump, hash_keys=hash_keys)
    return _units.read_order(u, seed=seed, epoch=epoch, split=split)
