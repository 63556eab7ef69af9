"""Rank, world size and global-batch arithmetic shared by materialize and the reader.

With ``S`` splits and global batch ``G``, step ``t`` takes rows ``[t*b, (t+1)*b)``
from every split, ``b = G // S``. Rank ``r`` of ``W`` owns the contiguous splits
``[r*S/W, (r+1)*S/W)``, so the union of all ranks' rows at step ``t`` does not
depend on ``W`` (elastic determinism).
"""

from __future__ import annotations

import os

from prep.errors import PrepError

__all__ = ["rank_and_world_size", "splits_for_rank", "rows_per_split_step", "valid_world_sizes"]


def rank_and_world_size(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Resolves rank/world size from arguments, else ``RANK``/``WORLD_SIZE``, else (0, 1).

    >>> rank_and_world_size(2, 4)
    (2, 4)
    """
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size < 1:
        raise PrepError(f"world_size={world_size} must be >= 1")
    if not 0 <= rank < world_size:
        raise PrepError(f"rank={rank} must be in [0, world_size={world_size})")
    return rank, world_size


def valid_world_sizes(num_splits: int) -> list[int]:
    """World sizes that can read ``num_splits`` splits: its divisors.

    >>> valid_world_sizes(48)
    [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]
    """
    return [w for w in range(1, num_splits + 1) if num_splits % w == 0]


def splits_for_rank(num_splits: int, rank: int, world_size: int) -> range:
    """The splits rank ``rank`` of ``world_size`` reads.

    >>> splits_for_rank(48, 1, 8)
    range(6, 12)
    """
    if num_splits % world_size:
        raise PrepError(
            f"world_size={world_size} does not divide num_splits={num_splits}; "
            f"use one of {valid_world_sizes(num_splits)} or re-materialize with more splits"
        )
    per_rank = num_splits // world_size
    return range(rank * per_rank, (rank + 1) * per_rank)


def rows_per_split_step(global_batch_size: int, num_splits: int) -> int:
    """Rows each split contributes to one global step.

    >>> rows_per_split_step(96, 48)
    2
    """
    if global_batch_size < 1 or global_batch_size % num_splits:
        raise PrepError(
            f"global_batch_size={global_batch_size} must be a positive multiple of num_splits={num_splits} "
            f"(e.g. {num_splits * max(1, round(max(global_batch_size, 1) / num_splits))})"
        )
    return global_batch_size // num_splits
