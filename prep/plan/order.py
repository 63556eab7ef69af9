"""The global order of a materialized output's rows, and each rank's share of every global batch: pure
arithmetic that the plan (a mixture's layout), materialize and the reader share.

**The global order.** With ``S`` splits and global batch ``G``, global position ``p``
(0, 1, 2, ...) is row ``p // S`` of split ``sigma(p % S)``, where, with ``g = gcd(G, S)``,
``sigma(j) = (j % g) * (S // g) + j // g``. Global batch ``t`` is positions
``[t*G, (t+1)*G)``, presented split after split; each split gives it one contiguous run
of rows. When ``S`` divides ``G``, ``sigma`` is the identity and step ``t`` is rows
``[t*b, (t+1)*b)`` of every split, ``b = G // S`` (what every output made so far was read as).

**Ranks.** Rank ``r`` of ``W`` (``W`` divides ``G``) takes rows ``[r*G/W, (r+1)*G/W)`` of each
global batch in that split-after-split presentation, so the ranks' batches, concatenated in
rank order, are the global batch for every ``W`` (elastic determinism). ``sigma`` spreads each
batch evenly over ``g`` groups of ``S // g`` consecutive splits, so when ``W`` also divides
``S`` rank ``r`` reads only, and all of, its own splits ``[r*S/W, (r+1)*S/W)``; otherwise a
rank's rows also come from splits beside its own.

**Mixtures.** A mixture's output is laid out in the order of its own global batch ``G0``
(:func:`prep.plan.mixture.split_positions`); a reader of ``k*G0`` rows keeps that order
(``Share(order_batch=G0)``), so its batch ``t`` is mixture batches ``k*t .. k*t + k - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import numpy as np

from prep.errors import PrepError

__all__ = ["splits_for_rank", "valid_world_sizes", "Share"]


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


@dataclass(frozen=True)
class Share:
    """Rank ``rank`` of ``world_size``'s rows of every global batch (the module docstring's rule).

    Args:
        global_batch_size: ``G``, rows per global step.
        num_splits: ``S``, splits per epoch.
        rank: this rank.
        world_size: ``W``, which must divide ``G``.
        order_batch: the global batch whose ``g = gcd(order_batch, S)`` defines the global order
            (default ``G``). A mixture's output is laid out for its own global batch ``G0``, so a
            reader of ``k*G0`` rows keeps ``G0``'s order: its batch ``t`` is then mixture batches
            ``k*t .. k*t + k - 1`` exactly (another ``g`` would regroup rows across them).

    Raises:
        PrepError: ``G < 1``, ``W`` not dividing ``G`` (the message lists the world sizes that do), or
            ``order_batch`` not dividing ``G``.

    >>> Share(64, 48, rank=1, world_size=4).splits, Share(64, 48, rank=1, world_size=4).local_batch_size
    (range(12, 24), 16)
    """

    global_batch_size: int
    num_splits: int
    rank: int = 0
    world_size: int = 1
    order_batch: int | None = None

    def __post_init__(self) -> None:
        G, S, W = self.global_batch_size, self.num_splits, self.world_size
        if G < 1:
            raise PrepError(f"global_batch_size={G} must be >= 1")
        if S < 1 or W < 1 or not 0 <= self.rank < W:
            raise PrepError(f"num_splits={S}, rank={self.rank}, world_size={W}: need S >= 1 and 0 <= rank < world_size")
        if G % W:
            raise PrepError(f"world_size={W} does not divide global_batch_size={G}: every rank takes G/W rows a step; "
                            f"use a world size in {valid_world_sizes(G)} or a global batch that is a multiple of {W}")
        if self.order_batch is not None and (self.order_batch < 1 or G % self.order_batch):
            raise PrepError(f"global_batch_size={G} must be a multiple of the order's global batch {self.order_batch}")

    @property
    def _g(self) -> int:
        """``gcd`` of the order's global batch and ``S``: the order spreads each batch over this many split groups."""
        return gcd(self.order_batch or self.global_batch_size, self.num_splits)

    @property
    def local_batch_size(self) -> int:
        """Rows this rank takes each step: ``G / W``."""
        return self.global_batch_size // self.world_size

    def steps_per_epoch(self, min_split_rows: int) -> int:
        """Full global batches in an epoch whose smallest split has ``min_split_rows`` rows: ``S * n // G``."""
        return self.num_splits * int(min_split_rows) // self.global_batch_size

    def split_starts(self, steps: np.ndarray) -> np.ndarray:
        """``(len(steps), S)``: the first row of each split in global batch ``t`` (rows before it: earlier steps)."""
        S, g = self.num_splits, self._g
        split = np.arange(S)
        j = (split % (S // g)) * g + split // (S // g)  # sigma's inverse: where split s sits in a block of S
        return (np.asarray(steps, np.int64)[:, None] * self.global_batch_size - j[None, :] + S - 1) // S

    def rows(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, counts)``, each ``(len(steps), S)``: at step ``steps[i]`` this rank takes rows
        ``[starts[i, s], starts[i, s] + counts[i, s])`` of split ``s`` (count 0: none)."""
        steps = np.asarray(steps, np.int64)
        first = self.split_starts(steps)
        total = self.split_starts(steps + 1) - first
        before = np.cumsum(total, axis=1) - total  # rows of earlier splits in the split-after-split batch
        lo, hi = self.rank * self.local_batch_size, (self.rank + 1) * self.local_batch_size
        skip = np.clip(lo - before, 0, total)
        return first + skip, np.clip(hi - before, 0, total) - skip

    @property
    def splits(self) -> range:
        """The splits this rank reads: its own ``[r*S/W, (r+1)*S/W)`` when ``W`` divides ``S``, else the
        range its rows come from (the order repeats every ``S / gcd(G, S)`` steps)."""
        S, W = self.num_splits, self.world_size
        if self._g % W == 0:  # W divides S (and G, and the order's batch): whole groups of splits per rank
            return splits_for_rank(S, self.rank, W)
        _, counts = self.rows(np.arange(S // gcd(self.global_batch_size, S)))
        used = np.flatnonzero(counts.sum(axis=0))
        return range(int(used[0]), int(used[-1]) + 1)

    @property
    def home_splits(self) -> range:
        """The splits this rank answers for (dropped rows): ``[r*S//W, (r+1)*S//W)``; every split has one rank."""
        S, W, r = self.num_splits, self.world_size, self.rank
        return range(r * S // W, (r + 1) * S // W)
