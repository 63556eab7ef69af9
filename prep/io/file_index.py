"""Reading and writing a step's file index (its rows and rules: :mod:`prep.contracts.file_index`)."""

from __future__ import annotations

from typing import Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from prep.contracts.file_index import ADDED_LATER, INDEX_DIR, INDEX_NAME, SCHEMA, IndexRow, check_schema, index_path
from prep.contracts.source import SourceEntry
from prep.io import storage

__all__ = ["write_index", "read_index", "drop_unreferenced"]


def write_index(table: str, version: int, files: Sequence[SourceEntry], s3: storage.S3Options | None,
                removed: Sequence[str] = ()) -> str:
    """Writes ``files`` (as :meth:`prep.prepare.listing.ListedFile.describe` gives them) and the URIs whose rows
    the step ``removed`` as the index of the step committing ``version`` of ``table``; returns its path
    relative to the table. A step killed before its commit left the same path: the rerun replaces it."""
    rel = index_path(version)
    rows = [IndexRow.of(f) for f in files] + [IndexRow.gone(u) for u in removed]
    columns = {name: [getattr(r, name) for r in rows] for name in SCHEMA.names}
    fs, path = storage.filesystem(storage.join(table, rel), s3)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "wb") as out:
        pq.write_table(pa.table(columns, schema=SCHEMA), out, compression="zstd")
    return rel


def read_index(table: str, paths: Iterable[str], s3: storage.S3Options | None) -> dict[str, IndexRow]:
    """The files the indexes at ``paths`` (oldest first) list, by URI; a later index's row wins, and a
    file a later step removed is not held. An index written before stamps and digests reads without them.

    Raises:
        PrepError: an index whose columns are not an index's, naming the file and the column.
    """
    held: dict[str, IndexRow] = {}
    for rel in paths:
        fs, path = storage.filesystem(storage.join(table, rel), s3)
        with fs.open(path, "rb") as f:
            t = pq.read_table(f)
        check_schema(t.schema, {name: t.column(name).null_count for name in t.column_names}, storage.join(table, rel))
        names = [name for name in SCHEMA.names[:-1] if name not in ADDED_LATER or name in t.column_names]
        gone = t.column("removed").to_pylist() if "removed" in t.column_names else [False] * t.num_rows
        for was_removed, *values in zip(gone, *(t.column(name).to_pylist() for name in names)):
            row = IndexRow(**dict(zip(names, values)))
            if was_removed:
                held.pop(row.uri, None)
            else:
                held[row.uri] = row
    return held


def drop_unreferenced(table: str, keep: Iterable[str], s3: storage.S3Options | None) -> None:
    """Removes the index files of ``table`` (named as :func:`~prep.contracts.file_index.index_path` names
    them; nothing else in the folder is prep's) that ``keep`` (the paths its history names) does not list."""
    fs, path = storage.filesystem(storage.join(table, INDEX_DIR), s3)
    if not fs.exists(path):
        return
    wanted = {p.rsplit("/", 1)[-1] for p in keep}
    for found in fs.ls(path, detail=False):
        name = found.rstrip("/").rsplit("/", 1)[-1]
        if INDEX_NAME.fullmatch(name) and name not in wanted:
            fs.rm(found)
