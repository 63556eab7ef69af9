"""Finding input files and cutting them into deterministic chunks (reading them: :mod:`prep.prepare.text.readers`).

A *chunk* is a byte range of a JSONL/text file (lines belong to the chunk their
first byte falls in, as in Hadoop's TextInputFormat), a row-group range of a
Parquet file, or a whole JSON/CSV file. A compressed text file (``.gz``, ``.zst``,
``.bz2`` after the format's extension, e.g. ``part-0.jsonl.zst``) is read decompressed, as
one chunk (a compressed stream cannot be entered in the middle); its row positions are
offsets in the decompressed bytes. Chunks are planned by the driver from
file sizes (and Parquet footers) only, so the same inputs always give the same
chunks, whatever the cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np

from prep.io import storage
from prep.errors import PrepError
from prep.prepare.listing import IdRoot, ListedFile, list_inputs, row_group_ranges
from prep.prepare.rejects import Reject

__all__ = ["SourceFile", "Chunk", "Records", "list_sources", "plan_chunks", "InputFormat", "TextUnit"]

InputFormat = Literal["auto", "jsonl", "json", "parquet", "csv", "text"]
TextUnit = Literal["line", "paragraph", "file"]

_EXTENSIONS = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
    ".csv": "csv", ".txt": "text", ".text": "text", ".md": "text",
}
_BYTE_RANGED = {"jsonl", "text-line"}
# Compressed text is read through fsspec's codecs; Parquet compresses itself and needs seeks.
_COMPRESSION = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}
_COMPRESSIBLE = {"jsonl", "json", "csv", "text"}


@dataclass(frozen=True)
class SourceFile(ListedFile):
    """A listed input file, the text format it is read as and its compression (None: plain)."""

    format: str = ""
    compression: str | None = None


@dataclass(frozen=True)
class Chunk:
    """A unit of work: ``[start, end)`` bytes, or row groups for Parquet, of one file."""

    source: SourceFile
    start: int
    end: int
    unit: str = "bytes"
    first_row: int = 0

    def __str__(self) -> str:
        return f"{self.source.uri} [{self.unit} {self.start}-{self.end})"

    @property
    def whole_file(self) -> bool:
        """True when this chunk is all of its file (then an empty result means an empty file)."""
        if self.unit == "row groups":  # a Parquet file without rows is planned as row groups [0, 0)
            return self.start == self.end == 0
        return self.start == 0 and (self.end >= self.source.size or self.source.compression is not None)


@dataclass
class Records:
    """Rows read from a chunk: ``rows[i]`` sits at stable ``positions[i]`` of the source."""

    rows: list[Any]
    positions: np.ndarray
    rejects: list[Reject] = field(default_factory=list)
    blank_lines: int = 0
    where: list[str] | None = None  # human positions ("line 17"), only computed when asked

    def position_label(self, i: int) -> str:
        return self.where[i] if self.where is not None else f"row {int(self.positions[i])}"


def _compression_of(path: str) -> str | None:
    return _COMPRESSION.get(os.path.splitext(path)[1].lower())


def _format_of(path: str, input_format: InputFormat) -> str | None:
    """The format ``path`` is read as (None: not an input); a compression suffix is looked through.

    >>> _format_of("s3://b/part-0.jsonl.zst", "auto"), _format_of("x.parquet.gz", "auto"), _format_of("a.txt", "auto")
    ('jsonl', None, 'text')
    """
    compressed = _compression_of(path) is not None
    if compressed:
        path = os.path.splitext(path)[0]
    fmt = input_format if input_format != "auto" else _EXTENSIONS.get(os.path.splitext(path)[1].lower())
    return None if compressed and fmt not in _COMPRESSIBLE else fmt


def list_sources(inputs: list[str], input_format: InputFormat = "auto", s3: storage.S3Options | None = None,
                 id_root: IdRoot | None = None) -> list[SourceFile]:
    """Expands files, folders (recursive) and globs into sorted :class:`SourceFile` s
    (the rules of :func:`prep.prepare.listing.list_inputs`, ids under ``id_root`` when given),
    keeping the readable formats.

    Raises:
        PrepError: a path does not exist, or a folder/glob matches no readable file.
    """
    want = input_format if input_format != "auto" else "/".join(sorted(_EXTENSIONS))
    want += " (also .gz/.zst/.bz2)"
    listings = list_inputs(inputs, s3, accept=lambda p: _format_of(p, input_format) is not None, what=f"{want} files",
                           id_root=id_root)
    return [SourceFile(**{k: getattr(f, k) for k in _LISTED}, format=_format_of(f.uri, input_format) or "", compression=_compression_of(f.uri))
            for listing in listings for f in listing.files]


_LISTED = tuple(f.name for f in fields(ListedFile))


def plan_chunks(sources: list[SourceFile], chunk_bytes: int, text_unit: TextUnit = "paragraph", s3: storage.S3Options | None = None) -> list[Chunk]:
    """Cuts sources into chunks of about ``chunk_bytes`` (pure given sizes and footers)."""
    chunks: list[Chunk] = []
    for src in sources:
        kind = f"text-{text_unit}" if src.format == "text" else src.format
        if kind in _BYTE_RANGED and src.size > chunk_bytes and src.compression is None:
            chunks += [Chunk(src, s, min(s + chunk_bytes, src.size)) for s in range(0, src.size, chunk_bytes)]
        elif kind == "parquet" and src.size > 0:  # 0 bytes (or a dangling symlink): a file-level reject, no footer to read
            chunks += _parquet_chunks(src, chunk_bytes, s3)
        else:
            chunks.append(Chunk(src, 0, src.size))
    return chunks


def _parquet_chunks(src: SourceFile, chunk_bytes: int, s3: storage.S3Options | None) -> list[Chunk]:
    import pyarrow.parquet as pq

    fs, path = storage.filesystem(src.uri, s3)
    try:
        with fs.open(path, "rb") as f:
            meta = pq.ParquetFile(f).metadata
    except Exception as exc:
        raise PrepError(f"{src.uri}: not a readable Parquet file ({exc})") from None
    if meta.num_rows == 0:  # no row group to read: one chunk that reports the empty file
        return [Chunk(src, 0, 0, "row groups", 0)]
    return [Chunk(src, start, end, "row groups", first) for start, end, first in row_group_ranges(meta, chunk_bytes)]
