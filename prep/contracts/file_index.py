"""A step's file index: the identity of every input file it read, kept beside the table, not in its metadata.

An ImageFolder table holds one row per image file, and an append must know which image
files it holds and whether each changed since (size, mtime, ETag): 1.28 million of them
for ImageNet. The Lance schema metadata is copied into every version's manifest, so the
identities do not go there. Each step writes the files it read as one Parquet file inside
the table folder (``_prep_files/v<version>.parquet``, zstd; measured with ImageNet-like
paths: 24 bytes per image for 10,000 images, 13 for 1.28 million, before the inode:ctime stamp and
the content digest were added), and its :class:`~prep.contracts.table.Step` names it. What the table
holds is one scan of those files, a later step's entry winning (``--update``); a step that removed a
file's rows (it moved, or went with ``--remove-missing``) lists it with ``removed`` set. No data file is
ever rewritten, Lance's own cleanup leaves the folder alone, and an ``--overwrite`` drops the
files its new history no longer names.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from prep.contracts.source import SourceEntry
from prep.io import storage

__all__ = ["INDEX_DIR", "index_path", "write_index", "read_index", "drop_unreferenced"]

INDEX_DIR = "_prep_files"
_INDEX_NAME = re.compile(r"v[0-9]+\.parquet")  # index_path's names

_SCHEMA = pa.schema([("uri", pa.string()), ("key", pa.string()), ("size", pa.int64()), ("mtime", pa.string()), ("etag", pa.string()),
                     ("stamp", pa.string()), ("digest", pa.string()), ("removed", pa.bool_())])
_TEXT = ("etag", "stamp", "digest")  # optional identity fields: "" in the file, left out of the entry


def index_path(version: int) -> str:
    """The index of the step that commits ``version``, relative to the table folder.

    >>> index_path(3)
    '_prep_files/v3.parquet'
    """
    return f"{INDEX_DIR}/v{version}.parquet"


def write_index(table: str, version: int, files: Sequence[SourceEntry], s3: storage.S3Options | None,
                removed: Sequence[str] = ()) -> str:
    """Writes ``files`` (as :meth:`prep.prepare.listing.ListedFile.describe` gives them) and the URIs whose rows
    the step ``removed`` as the index of the step committing ``version`` of ``table``; returns its path
    relative to the table. A step killed before its commit left the same path: the rerun replaces it."""
    rel = index_path(version)
    entries = list(files) + [SourceEntry(uri=u, key="", size=0, mtime="") for u in removed]
    columns: dict[str, list[Any]] = {name: [getattr(f, name) or ("" if name in _TEXT else None) for f in entries] for name in _SCHEMA.names[:-1]}
    columns["removed"] = [False] * len(files) + [True] * len(removed)
    fs, path = storage.filesystem(storage.join(table, rel), s3)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "wb") as out:
        pq.write_table(pa.table(columns, schema=_SCHEMA), out, compression="zstd")
    return rel


def read_index(table: str, paths: Iterable[str], s3: storage.S3Options | None) -> dict[str, SourceEntry]:
    """The files the indexes at ``paths`` (oldest first) list, by URI; a later index's entry wins, and a
    file a later step removed is not held. An index written before stamps and digests reads without them."""
    held: dict[str, SourceEntry] = {}
    for rel in paths:
        fs, path = storage.filesystem(storage.join(table, rel), s3)
        with fs.open(path, "rb") as f:
            t = pq.read_table(f)
        n = t.num_rows
        cols: dict[str, list[Any]] = {name: t.column(name).to_pylist() if name in t.column_names else [None] * n for name in _SCHEMA.names}
        for i, uri in enumerate(cols["uri"]):
            if cols["removed"][i]:
                held.pop(uri, None)
                continue
            held[uri] = SourceEntry(uri=uri, key=cols["key"][i], size=cols["size"][i], mtime=cols["mtime"][i],
                                    **{k: cols[k][i] for k in _TEXT if cols[k][i]})
    return held


def drop_unreferenced(table: str, keep: Iterable[str], s3: storage.S3Options | None) -> None:
    """Removes the index files of ``table`` (named as :func:`index_path` names them; nothing else in the
    folder is prep's) that ``keep`` (the paths its history names) does not list."""
    fs, path = storage.filesystem(storage.join(table, INDEX_DIR), s3)
    if not fs.exists(path):
        return
    wanted = {p.rsplit("/", 1)[-1] for p in keep}
    for found in fs.ls(path, detail=False):
        name = found.rstrip("/").rsplit("/", 1)[-1]
        if _INDEX_NAME.fullmatch(name) and name not in wanted:
            fs.rm(found)
