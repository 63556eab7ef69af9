"""Rank, world size and global-batch arithmetic shared by materialize and the reader.

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

import os
import sys
from dataclasses import dataclass
from math import gcd

import numpy as np

from prep.errors import PrepError

__all__ = ["rank_and_world_size", "splits_for_rank", "valid_world_sizes", "Share"]


def rank_and_world_size(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """This process's rank and the world size, from the first source that has them.

    Order: the arguments; an initialised ``torch.distributed`` process group;
    ``RANK``/``WORLD_SIZE``; ``SLURM_PROCID``/``SLURM_NTASKS``; else a single process.
    A value the arguments leave open comes from the first source, and must agree with it.
    A world of several processes with no rank (``WORLD_SIZE=2`` alone, or a launcher's
    ``LOCAL_RANK=1``/``LOCAL_WORLD_SIZE=2`` without ``RANK``) is an error: guessing rank 0
    of 1 would make every process read the whole global batch.

    Args:
        rank: this rank (default: from the sources above).
        world_size: number of ranks (default: from the sources above).

    Returns:
        ``(rank, world_size)`` with ``0 <= rank < world_size``.

    Raises:
        PrepError: a non-integer variable, a world size without a rank, a rank out of
            range, or arguments that contradict the process group or the environment.

    >>> rank_and_world_size(2, 4)
    (2, 4)
    """
    if rank is not None and world_size is not None:
        got, source = (rank, world_size), "argument"
    elif rank is None and world_size is None:
        got, source = _found_world()
    else:
        (found_rank, found_world), found_source = _found_world(need_rank=rank is None)
        if rank is None and (found_world != world_size if found_source != _SINGLE else world_size != 1):
            raise PrepError(f"world_size={world_size} (argument) comes without a rank, and {found_source} gives "
                            f"rank {found_rank} of {found_world}; pass rank= as well")
        got = (found_rank if rank is None else rank, found_world if world_size is None else world_size)
        source = f"rank from {'argument' if rank is not None else found_source}, " \
                 f"world size from {'argument' if world_size is not None else found_source}"
    r, w = got
    if w < 1:
        raise PrepError(f"world size {w} ({source}) must be >= 1")
    if not 0 <= r < w:
        raise PrepError(f"rank {r} must be in [0, {w}) ({source}); pass rank= and world_size= that agree")
    return r, w


_SINGLE = "the default (no process group, RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS)"


def _found_world(need_rank: bool = True) -> tuple[tuple[int, int], str]:
    """``((rank, world_size), source)`` from the process group, the launcher's variables, else one process.

    With ``need_rank=False`` (the caller has a rank), a world size alone is enough.
    """
    group = _process_group()
    if group is not None:
        return group, "torch.distributed"
    for rank_var, world_var in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, world = _env_int(rank_var), _env_int(world_var)
        if rank is None and world is None:
            continue
        if rank is None and world != 1 and need_rank:
            raise PrepError(f"{world_var}={world} is set but {rank_var} is not, so this process's rank is unknown "
                            "(LOCAL_RANK numbers processes on one node only); set "
                            f"{rank_var}, initialise torch.distributed before building the reader, or pass rank=")
        return (rank or 0, 1 if world is None else world), f"{rank_var}/{world_var}"
    local = {name: _env_int(name) for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    if (local["LOCAL_RANK"] or 0) > 0 or (local["LOCAL_WORLD_SIZE"] or 1) > 1:
        shown = " ".join(f"{k}={v}" for k, v in local.items() if v is not None)
        raise PrepError(f"{shown} {'are' if ' ' in shown else 'is'} set but RANK and WORLD_SIZE are not: this is one "
                        "of several processes and its global rank is unknown (LOCAL_* number the processes of one "
                        "node only); set RANK and WORLD_SIZE, initialise torch.distributed before building the "
                        "reader, or pass rank= and world_size=")
    return (0, 1), _SINGLE


def _process_group() -> tuple[int, int] | None:
    """Rank and size of an initialised default process group; never imports torch itself."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def _env_int(name: str) -> int | None:
    """``int(os.environ[name])``, None when unset or empty."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise PrepError(f"{name}={value!r} is not an integer; set it to a whole number or unset it") from None


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
