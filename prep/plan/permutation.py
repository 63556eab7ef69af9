"""A seeded bijection on ``[0, n)`` computed per position: no array of ``n`` ids.

A balanced Feistel network permutes ``[0, 4**h)`` (``h`` bits per half, the
smallest ``4**h >= n``); cycle walking (apply again while the value is ``>= n``)
restricts it to ``[0, n)`` and stays a bijection. Because ``4**h < 4n``, a
position needs fewer than 4 passes on average. Every call is vectorized over a
NumPy array of positions and costs O(len(positions)) time and memory, whatever
``n`` is, so a task can compute its own few rows of a 10^10-row plan, and
:func:`invert` finds where a single row went in O(1).

Keys come from ``np.random.SeedSequence``. The domain tag in ``spawn_key``
separates the split assignment (``[seed]``) from the per-epoch order
(``[seed, epoch, split]``): SeedSequence pads entropy with zeros, so
``[seed]`` and ``[seed, 0, 0]`` would otherwise give the same keys.
"""

from __future__ import annotations

import numpy as np

from prep.errors import PrepError

__all__ = ["ROUNDS", "ASSIGN", "ORDER", "MIX", "keys", "permute", "invert", "mix64"]

ROUNDS = 4
ASSIGN = 1  # spawn_key tag: which rows a split owns (fixed across epochs)
ORDER = 2  # spawn_key tag: the order inside a split (changes every epoch)
MIX = 3  # spawn_key tag: a mixture source's stream order, per pass (prep.plan.mixture)

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def keys(tag: int, *entropy: int) -> np.ndarray:
    """Round keys (uint64, one per Feistel round) for ``SeedSequence(entropy, spawn_key=(tag,))``.

    >>> keys(ORDER, 0, 1, 2).dtype
    dtype('uint64')
    """
    for value in entropy:
        if value < 0:
            raise PrepError(f"seed, epoch and split must be >= 0, got {value}; pick a non-negative seed")
    seq = np.random.SeedSequence(list(entropy), spawn_key=(tag,))
    return seq.generate_state(ROUNDS, dtype=np.uint64)


def mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer: a fast, well-mixing uint64 -> uint64 function."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        x = x ^ (x >> np.uint64(31))
    return x


def _half_bits(n: int) -> int:
    return max(1, ((n - 1).bit_length() + 1) // 2)


def _rounds(x: np.ndarray, round_keys: np.ndarray, h: int, inverse: bool) -> np.ndarray:
    mask = np.uint64((1 << h) - 1)
    shift = np.uint64(h)
    left, right = x >> shift, x & mask
    order = reversed(round_keys) if inverse else round_keys
    for k in order:
        if inverse:
            left, right = right ^ (mix64(left ^ k) & mask), left
        else:
            left, right = right, left ^ (mix64(right ^ k) & mask)
    return (left << shift) | right


def _walk(x: np.ndarray, n: int, round_keys: np.ndarray, inverse: bool) -> np.ndarray:
    if n <= 1:
        return x.astype(np.int64)
    h = _half_bits(n)
    out = _rounds(x.astype(np.uint64), round_keys, h, inverse)
    limit = np.uint64(n)
    todo = np.flatnonzero(out >= limit)
    while todo.size:
        out[todo] = _rounds(out[todo], round_keys, h, inverse)
        todo = todo[out[todo] >= limit]
    return out.astype(np.int64)


def _check(positions: np.ndarray, n: int) -> np.ndarray:
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and (positions.min() < 0 or positions.max() >= n):
        raise PrepError(f"positions must lie in [0, {n}), got [{positions.min()}, {positions.max()}]")
    return positions


def permute(positions: np.ndarray, n: int, round_keys: np.ndarray) -> np.ndarray:
    """Images of ``positions`` under the bijection on ``[0, n)`` keyed by ``round_keys``.

    Args:
        positions: int array of positions in ``[0, n)``.
        n: domain size (any size up to 2^62).
        round_keys: from :func:`keys`.

    Returns:
        int64 array, same shape: a permutation of ``positions`` when they cover ``[0, n)``.

    >>> k = keys(ASSIGN, 7)
    >>> sorted(permute(np.arange(10), 10, k).tolist()) == list(range(10))
    True
    """
    return _walk(_check(positions, n), n, round_keys, inverse=False)


def invert(values: np.ndarray, n: int, round_keys: np.ndarray) -> np.ndarray:
    """The inverse of :func:`permute`: ``invert(permute(p)) == p``.

    >>> k = keys(ASSIGN, 7)
    >>> invert(permute(np.arange(5), 1000, k), 1000, k).tolist()
    [0, 1, 2, 3, 4]
    """
    return _walk(_check(values, n), n, round_keys, inverse=True)
