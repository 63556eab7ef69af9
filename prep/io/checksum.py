"""The content checksum of Arrow data and Lance datasets, independent of how rows are cut into batches.

sha256 over a canonical form of the Arrow data: one byte stream per leaf of the
schema (null positions, list/string lengths, value bytes), each hashed on its
own, then combined with the schema and the row count. Materialize computes it
while writing a split, verify and prewarm recompute it from the files, so the
same rows give the same checksum however they were batched or stored.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prep.io import lance_tables
from prep.errors import PrepError

__all__ = ["Checksum", "table_checksum", "dataset_checksum"]


class Checksum:
    """Batch-boundary independent sha256 of Arrow data.

    >>> t = pa.table({"x": [[1, 2], None, [3]], "s": ["a", "bc", None]})
    >>> a, b = Checksum(), Checksum()
    >>> a.update(t)
    >>> for i in range(3): b.update(t.slice(i, 1))
    >>> a.hexdigest() == b.hexdigest()
    True
    """

    def __init__(self) -> None:
        self._streams: dict[str, Any] = {}
        self._seen: dict[str, int] = {}
        self._schema: pa.Schema | None = None
        self.num_rows = 0

    def _put(self, path: str, data: Any) -> None:
        h = self._streams.get(path)
        if h is None:
            h = self._streams[path] = hashlib.sha256()
        h.update(data)

    def _nulls(self, path: str, arr: pa.Array) -> None:
        start = self._seen.get(path, 0)
        self._seen[path] = start + len(arr)
        if arr.null_count:
            valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            self._put(path + "#nulls", (np.flatnonzero(~valid) + start).astype("<i8").tobytes())

    def _array(self, path: str, arr: pa.Array) -> None:
        t = arr.type
        if isinstance(t, pa.ExtensionType):
            arr, t = arr.storage, t.storage_type
        if pa.types.is_dictionary(t):
            arr = arr.cast(t.value_type)
            t = arr.type
        self._nulls(path, arr)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            lengths = pc.fill_null(pc.list_value_length(arr), 0)
            self._put(path + "#len", np.asarray(lengths.to_numpy(zero_copy_only=False), dtype="<i8").tobytes())
            self._array(path + ".item", arr.flatten())
        elif pa.types.is_fixed_size_list(t):
            self._array(path + ".item", arr.flatten())
        elif pa.types.is_struct(t):
            for f, child in zip(t, arr.flatten()):
                self._array(f"{path}.{f.name}", child)
        elif pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            arr = pc.fill_null(arr, "" if pa.types.is_string(t) or pa.types.is_large_string(t) else b"")
            big = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if big else np.int32)[arr.offset : arr.offset + len(arr) + 1]
            self._put(path + "#len", np.diff(offsets).astype("<i8").tobytes())
            data = arr.buffers()[2]
            if data is not None and len(offsets) and offsets[-1] > offsets[0]:
                self._put(path, memoryview(data)[int(offsets[0]) : int(offsets[-1])])
        elif pa.types.is_boolean(t):
            filled = pc.fill_null(arr, False)
            self._put(path, np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.uint8).tobytes())
        elif pa.types.is_null(t):
            pass
        elif t.bit_width and t.bit_width % 8 == 0:
            if arr.null_count:
                arr = pc.fill_null(arr, pa.scalar(0).cast(t))
            width = t.bit_width // 8
            data = arr.buffers()[1]
            if data is not None and len(arr):
                self._put(path, memoryview(data)[arr.offset * width : (arr.offset + len(arr)) * width])
        else:
            raise PrepError(f"column {path!r} has type {t}, which the content checksum does not support")

    def update(self, data: pa.Table | pa.RecordBatch) -> None:
        """Adds rows (a table or a batch) to the checksum."""
        if self._schema is None:
            self._schema = pa.schema([pa.field(f.name, f.type) for f in data.schema])
        columns = data.columns
        for f, col in zip(data.schema, columns):
            chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            for chunk in chunks:
                self._array(f.name, chunk)
        self.num_rows += data.num_rows

    def hexdigest(self) -> str:
        """sha256 hex over the schema, the row count and each stream's digest."""
        top = hashlib.sha256()
        top.update(str(self._schema).encode() if self._schema is not None else b"")
        top.update(str(self.num_rows).encode())
        for path in sorted(self._streams):
            top.update(path.encode() + b"\0" + self._streams[path].digest())
        return top.hexdigest()


def table_checksum(batches: Iterable[pa.Table | pa.RecordBatch]) -> tuple[int, str]:
    """(rows, checksum) of a sequence of tables or batches."""
    c = Checksum()
    for b in batches:
        c.update(b)
    return c.num_rows, c.hexdigest()


def dataset_checksum(uri: str, storage_options: dict[str, str] | None = None) -> tuple[int, str]:
    """(rows, checksum) of a committed Lance dataset, read in order."""
    ds = lance_tables.open_table(uri, storage_options=storage_options)
    return table_checksum(ds.to_batches(batch_size=8192))
