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

This module holds the row (:class:`IndexRow`), the file's columns and its name; reading and
writing the files is :mod:`prep.io.file_index`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from prep.contracts.source import SourceEntry
from prep.errors import PrepError

__all__ = ["INDEX_DIR", "INDEX_NAME", "SCHEMA", "ADDED_LATER", "IndexRow", "index_path", "check_schema"]

INDEX_DIR = "_prep_files"
INDEX_NAME = re.compile(r"v[0-9]+\.parquet")  # index_path's names

SCHEMA = pa.schema([("uri", pa.string()), ("key", pa.string()), ("size", pa.int64()), ("mtime", pa.string()), ("etag", pa.string()),
                    ("stamp", pa.string()), ("digest", pa.string()), ("removed", pa.bool_())])
# Columns an index written before them lacks: read as "" (not known) and False.
ADDED_LATER = ("stamp", "digest", "removed")


@dataclass(frozen=True, kw_only=True)
class IndexRow:
    """One file a step read (or, with ``removed``, whose rows it removed).

    Args:
        uri, key, size, mtime, etag, stamp, digest: the file's identity, as
            :class:`~prep.contracts.source.SourceEntry` has it ("": not known).
        removed: the step removed the file's rows (moved, or gone with ``--remove-missing``).
    """

    uri: str
    key: str
    size: int
    mtime: str
    etag: str = ""
    stamp: str = ""
    digest: str = ""
    removed: bool = False

    @classmethod
    def of(cls, entry: SourceEntry) -> IndexRow:
        """The row of a listed file (:meth:`prep.prepare.listing.ListedFile.describe`).

        >>> IndexRow.of(SourceEntry(uri="/d/a.jpg", key="a.jpg", size=3, mtime="1.5")).key
        'a.jpg'
        """
        if entry.key is None or entry.size is None or entry.mtime is None:
            raise PrepError(f"file index: {entry.uri} has no id key, size or mtime: only a listed file is indexed")
        return cls(uri=entry.uri, key=entry.key, size=entry.size, mtime=entry.mtime, etag=entry.etag,
                   stamp=entry.stamp, digest=entry.digest)

    @classmethod
    def gone(cls, uri: str) -> IndexRow:
        """The row saying a step removed the rows of ``uri``."""
        return cls(uri=uri, key="", size=0, mtime="", removed=True)

    def entry(self) -> SourceEntry:
        """The file as a table's source entry (what growth compares a listing against)."""
        return SourceEntry(uri=self.uri, key=self.key, size=self.size, mtime=self.mtime, etag=self.etag,
                           stamp=self.stamp, digest=self.digest)


def index_path(version: int) -> str:
    """The index of the step that commits ``version``, relative to the table folder.

    >>> index_path(3)
    '_prep_files/v3.parquet'
    """
    return f"{INDEX_DIR}/v{version}.parquet"


def check_schema(schema: pa.Schema, nulls: dict[str, int], where: str) -> None:
    """Refuses an index whose columns are not :data:`SCHEMA`'s (one missing that was always written, an
    unknown one, one of another type, or nulls): one error naming the file and the column.

    >>> check_schema(pa.schema([("uri", pa.string())]), {}, "v1.parquet")
    Traceback (most recent call last):
    prep.errors.PrepError: v1.parquet: file index column key is missing (columns: uri); it is not an index prep wrote
    """
    for f in SCHEMA:
        if f.name not in schema.names:
            if f.name not in ADDED_LATER:
                raise PrepError(f"{where}: file index column {f.name} is missing (columns: {', '.join(schema.names)}); "
                                "it is not an index prep wrote")
        elif schema.field(f.name).type != f.type:
            raise PrepError(f"{where}: file index column {f.name} is {schema.field(f.name).type}, not {f.type}; "
                            "it is not an index prep wrote")
        elif nulls.get(f.name):
            raise PrepError(f"{where}: file index column {f.name} has {nulls[f.name]} null(s); it is not an index prep wrote")
    unknown = [n for n in schema.names if n not in SCHEMA.names]
    if unknown:
        raise PrepError(f"{where}: file index column {unknown[0]} is not one prep writes ({', '.join(SCHEMA.names)})")
