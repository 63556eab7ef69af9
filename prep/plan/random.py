"""``random``: a seeded bijection of the table's blocks, cut into ``S`` equal ranges.

Block ``g`` holds rows ``[g*clump, (g+1)*clump)``. With ``P`` the seeded bijection
of ``[0, B)`` (``B`` blocks, keyed by ``SeedSequence([seed])``), split ``s`` owns
the blocks ``P(k)`` for ``k`` in ``[s*B/S, (s+1)*B/S)``. ``P`` is computed per
position (:mod:`prep.plan.permutation`), so a split's rows cost O(rows in the
split) and one row's split and position cost O(1), at any table size.

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


def _slots(blocks: int, num_splits: int, split: int) -> tuple[int, int]:
    return split * blocks // num_splits, (split + 1) * blocks // num_splits


def units(*, num_rows: int, num_splits: int, split: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> _units.Units:
    """The split's units: blocks ``P(lo), P(lo + 1), ...`` of its slot range."""
    blocks = -(-num_rows // clump)
    lo, hi = _slots(blocks, num_splits, split)
    keys = permutation.keys(permutation.ASSIGN, seed)
    tail = num_rows % clump
    short = -1
    if tail:
        slot = int(permutation.invert(np.array([blocks - 1]), blocks, keys)[0])
        short = slot - lo if lo <= slot < hi else -1
    count = hi - lo
    return _units.Units(
        count=count,
        num_rows=count * clump - (clump - tail if short >= 0 else 0),
        clump=clump,
        short_unit=short,
        short_len=tail,
        first_row=lambda u: permutation.permute(lo + u, blocks, keys) * clump,
    )


def assign(*, positions: np.ndarray, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> np.ndarray:
    """The split of each of ``positions`` (vectorized, O(len(positions)))."""
    blocks = -(-num_rows // clump)
    slots = permutation.invert(np.asarray(positions, dtype=np.int64) // clump, blocks, permutation.keys(permutation.ASSIGN, seed))
    return ((slots + 1) * num_splits - 1) // blocks


def locate(*, row: int, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> tuple[int, int, int]:
    """(split, unit, offset in unit) of table position ``row``: O(1)."""
    blocks = -(-num_rows // clump)
    slot = int(permutation.invert(np.array([row // clump]), blocks, permutation.keys(permutation.ASSIGN, seed))[0])
    split = ((slot + 1) * num_splits - 1) // blocks
    lo, _ = _slots(blocks, num_splits, split)
    return split, slot - lo, row % clump


def split_rows(
    *, num_rows: int, num_splits: int, split: int, epoch: int, seed: int = 0, clump: int = 1, hash_keys: np.ndarray | None = None
) -> np.ndarray:
    """Positions of ``split`` in this epoch's read order (see the module docstring)."""
    u = units(num_rows=num_rows, num_splits=num_splits, split=split, seed=seed, clump=clump, hash_keys=hash_keys)
    return _units.read_order(u, seed=seed, epoch=epoch, split=split)
