"""The one check every integration makes: the reader reads the rank the framework trains."""

from __future__ import annotations

from prep.errors import PrepError
from prep.reader import ReaderDataset

__all__ = ["check_rank"]


def check_rank(dataset: ReaderDataset, rank: int, world_size: int, framework: str) -> None:
    """Raises a one-line ``PrepError`` when ``dataset`` was built for another rank or world size.

    Example:
        >>> check_rank(type("D", (), {"rank": 0, "world_size": 2})(), 1, 2, "Accelerate")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        prep.errors.PrepError: ReaderDataset is rank 0 of 2, Accelerate trains process 1 of 2: ...
    """
    if (dataset.rank, dataset.world_size) != (rank, world_size):
        raise PrepError(f"ReaderDataset is rank {dataset.rank} of {dataset.world_size}, {framework} trains process "
                        f"{rank} of {world_size}: build the dataset after the process group is up (or pass "
                        f"rank={rank}, world_size={world_size})")
