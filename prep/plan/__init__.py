"""The shuffle plan: which rows each split reads, in which order, every epoch.

A plan is a pure function of (num_rows, num_splits, strategy, clump, seed,
epoch): no I/O, no global RNG. Each strategy module decides which rows a split
owns (fixed across epochs, so caches stay warm) and groups them into clumps of
``clump`` rows; the order of those clumps inside the split is a fresh seeded
permutation every epoch (``SeedSequence([seed, epoch, split])``, see
:mod:`prep.plan.units`). Strategies:

- ``sequential``: contiguous ranges (:mod:`prep.plan.sequential`)
- ``round-robin``: blocks dealt in turn (:mod:`prep.plan.round_robin`)
- ``random``: a seeded bijection of blocks, cut into ranges (:mod:`prep.plan.random`)
- ``hash``: a seeded hash of chosen columns (:mod:`prep.plan.hash`)

The plan's parameters, their JSON form and fingerprint live in one typed spec,
:class:`prep.plan.spec.PlanSpec`.

Positions are ``0 .. num_rows - 1`` into the selected row set (the table, or
the rows that matched the filter, in table order).

>>> rows = [split_rows(num_rows=10, num_splits=2, split=s, epoch=0, strategy="random") for s in (0, 1)]
>>> sorted(rows[0].tolist() + rows[1].tolist()) == list(range(10))
True
"""

from __future__ import annotations

from typing import Iterator, Protocol

import numpy as np

from prep.errors import PrepError
from prep.plan import hash as _hash
from prep.plan import random as _random
from prep.plan import round_robin as _round_robin
from prep.plan import sequential as _sequential
from prep.plan import units as _units

__all__ = [
    "STRATEGIES",
    "SplitFn",
    "split_rows",
    "split_size",
    "iter_split_rows",
    "split_rows_range",
    "locate_row",
    "assign_rows",
    "validate",
]


class SplitFn(Protocol):
    def __call__(
        self,
        *,
        num_rows: int,
        num_splits: int,
        split: int,
        epoch: int,
        seed: int = 0,
        clump: int = 1,
        hash_keys: np.ndarray | None = None,
    ) -> np.ndarray: ...


STRATEGIES: dict[str, SplitFn] = {
    "sequential": _sequential.split_rows,
    "round-robin": _round_robin.split_rows,
    "random": _random.split_rows,
    "hash": _hash.split_rows,
}


class Strategy(Protocol):
    """What each strategy module provides besides ``split_rows`` (checked by mypy against every module in :data:`_MODULES`)."""

    def units(self, *, num_rows: int, num_splits: int, split: int, seed: int, clump: int,
              hash_keys: np.ndarray | None) -> _units.Units: ...

    def assign(self, *, positions: np.ndarray, num_rows: int, num_splits: int, seed: int, clump: int,
               hash_keys: np.ndarray | None) -> np.ndarray: ...

    def locate(self, *, row: int, num_rows: int, num_splits: int, seed: int, clump: int,
               hash_keys: np.ndarray | None) -> tuple[int, int, int]: ...


_MODULES: dict[str, Strategy] = {"sequential": _sequential, "round-robin": _round_robin, "random": _random, "hash": _hash}


def validate(*, num_rows: int, num_splits: int, strategy: str, seed: int = 0, clump: int = 1) -> None:
    """Raises :class:`PrepError` naming the bad argument, its value and the fix."""
    if strategy not in STRATEGIES:
        raise PrepError(f"strategy={strategy!r} is not one of {sorted(STRATEGIES)}")
    if num_splits < 1:
        raise PrepError(f"num_splits={num_splits} must be >= 1 (48 lets any world size in 1,2,3,4,6,8,12,16,24,48 read it)")
    if clump < 1:
        raise PrepError(f"clump={clump} must be >= 1 (1 = shuffle single rows)")
    if seed < 0:
        raise PrepError(f"seed={seed} must be >= 0")
    if num_rows < 0:
        raise PrepError(f"num_rows={num_rows} must be >= 0")


def _units_of(num_rows: int, num_splits: int, split: int, epoch: int, strategy: str, seed: int, clump: int, hash_keys: np.ndarray | None) -> _units.Units:
    validate(num_rows=num_rows, num_splits=num_splits, strategy=strategy, seed=seed, clump=clump)
    if not 0 <= split < num_splits:
        raise PrepError(f"split={split} must be in [0, num_splits={num_splits})")
    if epoch < 0:
        raise PrepError(f"epoch={epoch} must be >= 0")
    if num_rows == 0:
        return _units.Units(count=0, num_rows=0, clump=clump, short_unit=-1, short_len=0, first_row=lambda u: u)
    return _MODULES[strategy].units(
        num_rows=num_rows, num_splits=num_splits, split=split, seed=seed, clump=clump, hash_keys=hash_keys
    )


def split_rows(
    *,
    num_rows: int,
    num_splits: int,
    split: int,
    epoch: int,
    strategy: str,
    seed: int = 0,
    clump: int = 1,
    hash_keys: np.ndarray | None = None,
) -> np.ndarray:
    """The positions ``split`` reads in ``epoch``, in read order.

    Args:
        num_rows: rows in the selected row set.
        num_splits: number of splits ``S``.
        split: which split, ``0 <= split < S``.
        epoch: epoch number (changes the order, never the membership).
        strategy: one of :data:`STRATEGIES`.
        seed: plan seed (default 0); changes membership (except ``sequential`` and
            ``round-robin``) and order.
        clump: rows per shuffled block (default 1).
        hash_keys: uint64 key per row, for ``hash`` only (see :func:`prep.plan.hash.row_keys`).

    Returns:
        int64 positions in ``[0, num_rows)``; O(rows in the split) memory.

    Raises:
        PrepError: on an unknown strategy or out-of-range argument.

    >>> split_rows(num_rows=8, num_splits=2, split=1, epoch=0, strategy="sequential", clump=4).tolist()
    [4, 5, 6, 7]
    """
    u = _units_of(num_rows, num_splits, split, epoch, strategy, seed, clump, hash_keys)
    return _units.read_order(u, seed=seed, epoch=epoch, split=split)


def split_size(
    *, num_rows: int, num_splits: int, split: int, strategy: str, seed: int = 0, clump: int = 1, hash_keys: np.ndarray | None = None
) -> int:
    """Rows in ``split`` (the same in every epoch). O(1) except for ``hash``.

    >>> [split_size(num_rows=10, num_splits=3, split=s, strategy="round-robin") for s in range(3)]
    [4, 3, 3]
    """
    return _units_of(num_rows, num_splits, split, 0, strategy, seed, clump, hash_keys).num_rows


def iter_split_rows(
    *,
    num_rows: int,
    num_splits: int,
    split: int,
    epoch: int,
    strategy: str,
    seed: int = 0,
    clump: int = 1,
    hash_keys: np.ndarray | None = None,
    chunk_rows: int = 65536,
) -> Iterator[np.ndarray]:
    """:func:`split_rows` in consecutive chunks of about ``chunk_rows`` positions.

    Memory is O(chunk_rows) (plus the split's members for ``hash``), so a split
    of a 10^10-row plan can be enumerated in a few MB.
    """
    u = _units_of(num_rows, num_splits, split, epoch, strategy, seed, clump, hash_keys)
    yield from _units.iter_read_order(u, seed=seed, epoch=epoch, split=split, chunk_rows=chunk_rows)


def split_rows_range(
    *,
    num_rows: int,
    num_splits: int,
    split: int,
    epoch: int,
    strategy: str,
    start: int,
    stop: int,
    seed: int = 0,
    clump: int = 1,
    hash_keys: np.ndarray | None = None,
) -> np.ndarray:
    """``split_rows(...)[start:stop]`` in O(stop - start) time and memory (plus members for ``hash``).

    >>> split_rows_range(num_rows=10**10, num_splits=48, split=5, epoch=2, strategy="random", start=7, stop=9).shape
    (2,)
    """
    u = _units_of(num_rows, num_splits, split, epoch, strategy, seed, clump, hash_keys)
    return _units.read_rows(u, seed=seed, epoch=epoch, split=split, start=start, stop=stop)


def assign_rows(
    *, positions: np.ndarray, num_rows: int, num_splits: int, strategy: str, seed: int = 0, clump: int = 1, hash_keys: np.ndarray | None = None
) -> np.ndarray:
    """The split of each of ``positions`` (int64), vectorized: O(len(positions)).

    >>> assign_rows(positions=np.arange(6), num_rows=6, num_splits=3, strategy="round-robin").tolist()
    [0, 1, 2, 0, 1, 2]
    """
    validate(num_rows=num_rows, num_splits=num_splits, strategy=strategy, seed=seed, clump=clump)
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and (positions.min() < 0 or positions.max() >= num_rows):
        raise PrepError(f"positions must lie in [0, num_rows={num_rows})")
    return _MODULES[strategy].assign(
        positions=positions, num_rows=num_rows, num_splits=num_splits, seed=seed, clump=clump, hash_keys=hash_keys
    )


def locate_row(
    *, row: int, num_rows: int, num_splits: int, epoch: int, strategy: str, seed: int = 0, clump: int = 1, hash_keys: np.ndarray | None = None
) -> tuple[int, int]:
    """Where position ``row`` is read in ``epoch``: ``(split, index in the split's read order)``.

    O(1) for ``sequential``, ``round-robin`` and ``random``; O(rows) for ``hash``.

    >>> s, i = locate_row(row=5, num_rows=10, num_splits=2, epoch=1, strategy="random")
    >>> int(split_rows(num_rows=10, num_splits=2, split=s, epoch=1, strategy="random")[i])
    5
    """
    validate(num_rows=num_rows, num_splits=num_splits, strategy=strategy, seed=seed, clump=clump)
    if not 0 <= row < num_rows:
        raise PrepError(f"row={row} must be in [0, num_rows={num_rows})")
    module = _MODULES[strategy]
    split, unit, offset = module.locate(
        row=row, num_rows=num_rows, num_splits=num_splits, seed=seed, clump=clump, hash_keys=hash_keys
    )
    u = module.units(num_rows=num_rows, num_splits=num_splits, split=split, seed=seed, clump=clump, hash_keys=hash_keys)
    return split, _units.index_of(u, seed=seed, epoch=epoch, split=split, unit=unit, offset=offset)
