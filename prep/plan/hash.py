"""``hash``: a row's split is a seeded hash of the chosen columns' values.

``split = mix64(key ^ k) mod S``, ``key`` a uint64 made from the row's values in
``hash_columns`` (:func:`row_keys`) and ``k`` from ``SeedSequence([seed])``. A row
keeps its split when rows are appended, inserted or deleted elsewhere, so caches
and per-split statistics survive a growing table; equal keys land together (hash
a document id to keep a document's chunks in one split). Inside a split, rows in
table order are grouped into clumps of ``clump`` rows that are reordered every
epoch.

Trade-off: split sizes are only balanced on average (binomial spread, so a few
percent apart for small tables), and finding a split's rows takes one pass over
all keys (O(rows) time, O(rows in the split) memory, done in chunks).
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prep.errors import PrepError
from prep.plan import permutation
from prep.plan import units as _units

__all__ = ["row_keys", "split_of", "units", "assign", "locate", "split_rows"]

_CHUNK = 1 << 20
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _column_key(col: pa.ChunkedArray | pa.Array, name: str) -> np.ndarray:
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.cast(t.value_type)
        t = col.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        filled = pc.fill_null(col.cast(pa.int64()) if not pa.types.is_uint64(t) else col, 0)
        return np.asarray(filled.to_numpy(zero_copy_only=False)).astype(np.int64, copy=False).view(np.uint64)
    if pa.types.is_floating(t):
        return np.asarray(pc.fill_null(col.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)).view(np.uint64)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        out = np.empty(len(col), dtype=np.uint64)
        for i, value in enumerate(col.to_pylist()):
            raw = b"" if value is None else value.encode() if isinstance(value, str) else value
            out[i] = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")
        return out
    raise PrepError(
        f"hash column {name!r} has type {t}; use integer, float, string or binary columns (e.g. --hash-columns id)"
    )


def row_keys(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """One uint64 key per row from the values of ``columns`` (pure: no I/O).

    Integer ids are used as they are; strings are hashed with blake2b (a
    Python loop: prefer an integer id column for large tables).

    >>> row_keys(pa.table({"id": pa.array([3, 9], pa.uint64())}), ["id"]).tolist()
    [3, 9]
    """
    if not columns:
        raise PrepError("the hash strategy needs at least one column: pass --hash-columns id")
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise PrepError(f"hash columns {missing} are not in the table; it has {table.column_names}")
    keys = _column_key(table.column(columns[0]), columns[0])
    for name in columns[1:]:
        with np.errstate(over="ignore"):
            keys = permutation.mix64(keys * _GOLDEN + _column_key(table.column(name), name))
    return keys


def split_of(keys: np.ndarray, num_splits: int, seed: int) -> np.ndarray:
    """The split of each key (int64)."""
    salt = permutation.keys(permutation.ASSIGN, seed)[0]
    return (permutation.mix64(np.asarray(keys, dtype=np.uint64) ^ salt) % np.uint64(num_splits)).astype(np.int64)


def _members(keys: np.ndarray, num_splits: int, split: int, seed: int) -> np.ndarray:
    parts = [
        np.flatnonzero(split_of(keys[i : i + _CHUNK], num_splits, seed) == split) + i
        for i in range(0, len(keys), _CHUNK)
    ]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def _require(hash_keys: np.ndarray | None, num_rows: int) -> np.ndarray:
    if hash_keys is None or len(hash_keys) != num_rows:
        got = "none" if hash_keys is None else len(hash_keys)
        raise PrepError(f"the hash strategy needs hash_keys with one key per row ({num_rows}), got {got}; see row_keys()")
    return hash_keys


def units(*, num_rows: int, num_splits: int, split: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> _units.Units:
    """The split's units: runs of ``clump`` consecutive members, in table order."""
    members = _members(_require(hash_keys, num_rows), num_splits, split, seed)
    return _units.contiguous(len(members), clump, lambda u: u * clump, members)


def assign(*, positions: np.ndarray, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> np.ndarray:
    """The split of each of ``positions`` (vectorized, O(len(positions)))."""
    return split_of(_require(hash_keys, num_rows)[np.asarray(positions, dtype=np.int64)], num_splits, seed)


def locate(*, row: int, num_rows: int, num_splits: int, seed: int, clump: int, hash_keys: np.ndarray | None) -> tuple[int, int, int]:
    """(split, unit, offset in unit) of table position ``row``: O(rows), it needs the split's members."""
    keys = _require(hash_keys, num_rows)
    split = int(split_of(keys[row : row + 1], num_splits, seed)[0])
    index = int(np.searchsorted(_members(keys, num_splits, split, seed), row))
    return split, index // clump, index % clump


def split_rows(
    *, num_rows: int, num_splits: int, split: int, epoch: int, seed: int = 0, clump: int = 1, hash_keys: np.ndarray | None = None
) -> np.ndarray:
    """Positions of ``split`` in this epoch's read order (see the module docstring)."""
    u = units(num_rows=num_rows, num_splits=num_splits, split=split, seed=seed, clump=clump, hash_keys=hash_keys)
    return _units.read_order(u, seed=seed, epoch=epoch, split=split)
