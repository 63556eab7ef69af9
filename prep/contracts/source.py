"""One input a prepared table records (an entry of its metadata's ``sources``, or of a step's file index).

A file entry carries the file's identity (size, mtime; the ETag on object stores; locally the
inode:ctime ``stamp`` and the content ``digest``), the ``key`` its rows' ids derive from, and,
when no chunk mixed files, the ``counts`` and data files of its rows and of its rejects (what
``--update`` removes). A folder entry (an ImageFolder input) carries ``files`` and ``bytes``; its
files are entries of the steps' file indexes (:mod:`prep.contracts.file_index`). The listing
makes entries (:meth:`prep.prepare.listing.ListedFile.describe`), the driver adds the rows, the
growth reads them back: all through this type and its one parser, :meth:`SourceEntry.from_json`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from prep.contracts.counts import Counts
from prep.errors import PrepError

__all__ = ["SourceEntry"]


@dataclass(frozen=True, kw_only=True)
class SourceEntry:
    """An input file or folder a table was made from.

    Args:
        uri: the file or folder.
        key: the id key (its path under the root its table's ids are relative to); None in a
            table made before ``--append`` existed, and for folders.
        size, mtime: the file's size in bytes and its modification time as listed.
        etag: the object store's content tag ("" locally).
        stamp: a local file's ``inode:ctime`` ("" on object stores): any write or move changes it.
        digest: ``sha256:<hex>`` (its first 128 bits) of a local file's bytes ("" on object stores, or before digests).
        rows: a manifest's rows.
        files, bytes: a folder's files and their bytes.
        counts: the counts of the file's rows, when no chunk mixed files.
        data_files, reject_files: the data files of its rows and of its rejects, then too.
    """

    uri: str
    key: str | None = None
    size: int | None = None
    mtime: str | None = None
    etag: str = ""
    stamp: str = ""
    digest: str = ""
    rows: int | None = None
    files: int | None = None
    bytes: int | None = None
    counts: Counts | None = None
    data_files: tuple[str, ...] | None = None
    reject_files: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, raw: Any, where: str) -> SourceEntry:
        """The entry ``raw`` describes; one error naming ``where``, the entry and the field otherwise.

        >>> SourceEntry.from_json({"uri": "/d/a.jsonl", "key": "a.jsonl", "size": 3, "mtime": "1.5"}, "t").size
        3
        >>> SourceEntry.from_json({"uri": "/d/a.jsonl", "size": "3"}, "t")
        Traceback (most recent call last):
        prep.errors.PrepError: t: prep table metadata sources entry /d/a.jsonl: size='3' must be an integer >= 0
        """
        if not isinstance(raw, Mapping) or not isinstance(raw.get("uri"), str):
            raise PrepError(f"{where}: prep table metadata sources entry {raw!r} must be an object with a uri")
        uri = raw["uri"]

        def fail(name: str, value: Any, what: str) -> PrepError:
            return PrepError(f"{where}: prep table metadata sources entry {uri}: {name}={value!r} must be {what}")

        unknown = sorted(set(raw) - _NAMES)
        if unknown:
            raise fail(unknown[0], raw[unknown[0]], f"one of the known fields {sorted(_NAMES)}")
        out: dict[str, Any] = {"uri": uri}
        for name in ("key", "etag", "stamp", "digest"):  # "" is not set, as to_json writes it
            if raw.get(name) not in (None, ""):
                if not isinstance(raw[name], str):
                    raise fail(name, raw[name], "a string")
                out[name] = raw[name]
        if raw.get("mtime") not in (None, ""):
            if isinstance(raw["mtime"], bool) or not isinstance(raw["mtime"], (str, int, float)):
                raise fail("mtime", raw["mtime"], "a time")
            out["mtime"] = str(raw["mtime"])
        for name in ("size", "rows", "files", "bytes"):
            if raw.get(name) is not None:
                if not _is_count(raw[name]):
                    raise fail(name, raw[name], "an integer >= 0")
                out[name] = raw[name]
        if raw.get("counts") is not None:
            out["counts"] = Counts.from_json(raw["counts"], f"{where}: prep table metadata sources entry {uri}:")
        for name in ("data_files", "reject_files"):
            if raw.get(name) is not None:
                if not isinstance(raw[name], list) or not all(isinstance(p, str) for p in raw[name]):
                    raise fail(name, raw[name], "a list of paths")
                out[name] = tuple(raw[name])
        return cls(**out)

    def to_json(self) -> dict[str, Any]:
        """The JSON form :meth:`from_json` reads: fields not set are left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == "":
                continue
            out[f.name] = value.to_json() if isinstance(value, Counts) else list(value) if isinstance(value, tuple) else value
        return out


_NAMES = frozenset(f.name for f in fields(SourceEntry))


def _is_count(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 0
