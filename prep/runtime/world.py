"""This process's rank and the world size, from the arguments, a process group or a launcher's variables.

What a rank reads of each global batch is :class:`prep.plan.order.Share` (the global order).
"""

from __future__ import annotations

import os
import sys

from prep.errors import PrepError

__all__ = ["rank_and_world_size"]


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
