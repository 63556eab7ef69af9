"""Finding input files, the same way for every prepare job.

One set of rules: an existing path wins over glob syntax (``photos [2020]/`` is a
folder, not a pattern); a folder is listed recursively; a glob lists what matches;
hidden files and anything under a hidden folder are skipped; files come sorted by
path, so the same inputs always give the same order. Each file carries its key (its
path relative to the input's root, which ids derive from) and its identity (size and
mtime, or ETag on object stores) for the table's provenance.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Callable

from prep.io import storage
from prep.errors import PrepError

__all__ = ["ListedFile", "Listing", "list_input", "row_group_ranges"]

_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class ListedFile:
    """One input file: its URI, its key (relative to the input root) and its identity."""

    uri: str
    key: str
    size: int
    mtime: str

    def describe(self) -> dict[str, Any]:
        return {"uri": self.uri, "size": self.size, "mtime": self.mtime}


@dataclass(frozen=True)
class Listing:
    """What one given input expanded to."""

    given: str
    root: str
    files: list[ListedFile]
    is_dir: bool


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


def _mtime(info: dict[str, Any]) -> str:
    return str(info.get("mtime") or info.get("LastModified") or info.get("ETag") or "")


def list_input(given: str, s3: storage.S3Options | None = None, accept: Callable[[str], bool] = lambda path: True,
               what: str = "files") -> Listing:
    """Expands a file, folder or glob into sorted :class:`ListedFile` s that ``accept`` keeps.

    Raises:
        PrepError: the path does not exist, or nothing under it is accepted (``what`` names
            what was looked for, e.g. "jsonl/parquet files").
    """
    fs, path = storage.filesystem(given, s3)
    if fs.isdir(path):
        root, is_dir = path, True
        found = fs.find(path, detail=True)
    elif fs.exists(path):
        root, is_dir = posixpath.dirname(path), False
        found = {path: fs.info(path)}
    elif any(c in path for c in _GLOB_CHARS):
        root, is_dir = path[: min(path.find(c) for c in _GLOB_CHARS if c in path)].rsplit("/", 1)[0], False
        found = fs.glob(path, detail=True)
    else:
        raise PrepError(f"input not found: {storage.shown(given)}")
    files = [
        ListedFile(storage.with_scheme(given, p), posixpath.relpath(p, root), int(info.get("size") or 0), _mtime(info))
        for p, info in sorted(found.items())
        if info.get("type", "file") == "file" and not _hidden(posixpath.relpath(p, root)) and accept(p)
    ]
    if not files:
        raise PrepError(f"input {given} holds no {what}")
    return Listing(given, root, files, is_dir)


def row_group_ranges(meta: Any, max_bytes: int, max_rows: int | None = None) -> list[tuple[int, int, int]]:
    """Cuts a Parquet file's row groups into ``(start, end, first_row)`` ranges of about
    ``max_bytes`` (and at most ``max_rows`` rows), one row group at least; pure given the footer.

    >>> class G:
    ...     def __init__(self, b, n): self.total_byte_size, self.num_rows = b, n
    >>> class M:
    ...     num_row_groups = 4
    ...     def row_group(self, g): return G(10, 5)
    >>> row_group_ranges(M(), max_bytes=25)
    [(0, 2, 0), (2, 4, 10)]
    """
    ranges, start, size, rows, first, row = [], 0, 0, 0, 0, 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        too_big = size + rg.total_byte_size > max_bytes or (max_rows is not None and rows + rg.num_rows > max_rows)
        if g > start and too_big:
            ranges.append((start, g, first))
            start, size, rows, first = g, 0, 0, row
        size += rg.total_byte_size
        rows += rg.num_rows
        row += rg.num_rows
    if meta.num_row_groups:
        ranges.append((start, meta.num_row_groups, first))
    return ranges
