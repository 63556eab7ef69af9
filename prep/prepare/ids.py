"""Stable row ids: the same source row gets the same uint64 id on every run.

An id mixes a 64-bit hash of the source key with the row's position in that
source (line byte offset, row number, member name hash...), through SplitMix64 so
nearby positions spread out. The source key is the file's whole identity under the
inputs (:attr:`prep.prepare.listing.ListedFile.ids_from`: its path relative to the
folder all inputs share, or its full URI), never its base name, so two
``train.jsonl`` in two folders never share ids. It is vectorized: one call per
chunk, no per-row Python.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["key_hash", "stable_ids"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def key_hash(key: str) -> int:
    """64-bit hash of a string (blake2b), stable across processes and Python versions."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def stable_ids(source_key: str, positions: np.ndarray, salt: int = 0) -> np.ndarray:
    """uint64 ids for ``positions`` (non-negative ints) within ``source_key``.

    ``salt`` separates derived rows (e.g. the pieces of a split row).

    >>> a = stable_ids("train.jsonl", np.array([0, 120]))
    >>> bool((a == stable_ids("train.jsonl", np.array([0, 120]))).all()), a.dtype.name
    (True, 'uint64')
    """
    base = np.uint64(key_hash(source_key))
    pos = np.asarray(positions, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return _splitmix64(_splitmix64(pos ^ base) + np.uint64(salt))
