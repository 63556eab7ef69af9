"""``round-robin``: block ``g`` of ``clump`` consecutive rows goes to split ``g mod S``.

Trade-off: every split samples the whole table evenly (a table sorted by source
or length spreads over all splits), with no randomness in which rows a split
owns; reads inside a split stride through the table, one run of ``clump`` rows
at a time. Split sizes differ by at most one block.
"""

from __future__ import annotations

import numpy as np

from prep.plan import units as _units

__all__ = ["units", "assign", "locate", "split_rows"]


def units(*, num_rows: int, num_splits: int, split: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> _units.Units:
    """The split's units: blocks ``split, split + S, split + 2S, ...``."""
    blocks = -(-num_rows // clump)
    count = len(range(split, blocks, num_splits))
    tail = num_rows % clump
    short = count - 1 if tail and count and (blocks - 1) % num_splits == split else -1
    return _units.Units(
        count=count,
        num_rows=count * clump - (clump - tail if short >= 0 else 0),
        clump=clump,
        short_unit=short,
        short_len=tail,
        first_row=lambda u: (split + u * num_splits) * clump,
    )


def assign(*, positions: np.ndarray, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> np.ndarray:
    """The split of each of ``positions`` (vectorized, O(len(positions)))."""
    return (np.asarray(positions, dtype=np.int64) // clump) % num_splits


def locate(*, row: int, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> tuple[int, int, int]:
    """(split, unit, offset in unit) of table position ``row``."""
    block = row // clump
    return block % num_splits, block // num_splits, row % clump


def split_rows(
    *, num_rows: int, num_splits: int, split: int, epoch: int, seed: int = 0, clump: int = 1, hash_keys: np.ndarray | None = None
) -> np.ndarray:
    """Positions of ``split`` in this epoch's read order (see the module docstring)."""
    u = units(num_rows=num_rows, num_splits=num_splits, split=split, seed=seed, clump=clump, hash_keys=hash_keys)
    return _units.read_order(u, seed=seed, epoch=epoch, split=split)
