"""Where a reader cache keeps what: the paths, the copy record, and which files are the cache's own.

Layout (the materialized output's, so the directory also opens as an output)::

    CACHE/_prep_cache.json                   whose cache this is (source, fingerprint): the marker, written first
    CACHE/manifest.json                      the source's manifest
    CACHE/epoch-EEEEE/split-SSSSS.lance/     a copy, complete (renamed into place whole)
    CACHE/epoch-EEEEE/split-SSSSS.copy.json  its :class:`CopyRecord`, written last
    CACHE/_locks/                            split locks, fetch reservations, the processes using the cache

A copy's record is not materialize's done record (:mod:`prep.contracts.materialized`): it
holds the size and CRC-32 of every file of the copy, so it has its own name.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import zlib
from dataclasses import dataclass
from typing import Any, Iterator

from prep.contracts.done import DONE_SUFFIX
from prep.contracts.manifest import MANIFEST, SplitFile, split_path

__all__ = ["Key", "CopyRecord", "CacheLayout", "crc32"]

Key = tuple[int, int]  # (epoch, split)
RECORD = ".copy.json"
_LEGACY_RECORD = DONE_SUFFIX  # caches written before the copy record had its own name used the done record's
_RECORD_PATH = re.compile(r"epoch-(\d{5})/split-(\d{5})\.copy\.json$")
_EPOCH_DIR = re.compile(r"^epoch-\d{5}$")
_SPLIT_ENTRY = re.compile(r"^split-\d{5}(\.lance|\.copy\.json|\.done\.json)(\.tmp-[0-9a-f]+)?$")


@dataclass(frozen=True)
class CopyRecord:
    """A verified copy of one split: what the manifest says of it, and the size and CRC-32 of each of its files."""

    fingerprint: str
    epoch: int
    split: int
    num_rows: int
    checksum: str
    bytes: int
    files: dict[str, tuple[int, str]]  # relative path -> (size, CRC-32)
    digest: str  # sha256 of ``files``: which content a process already hashed

    @classmethod
    def of(cls, fingerprint: str, key: Key, expected: SplitFile, files: dict[str, tuple[int, str]]) -> "CopyRecord":
        digest = hashlib.sha256(json.dumps({k: list(v) for k, v in files.items()}, sort_keys=True).encode()).hexdigest()
        return cls(fingerprint=fingerprint, epoch=key[0], split=key[1], num_rows=expected.num_rows,
                   checksum=expected.checksum, bytes=sum(size for size, _ in files.values()), files=files, digest=digest)

    def matches(self, fingerprint: str, expected: SplitFile) -> bool:
        """Whether this records a copy of ``expected`` of the materialization ``fingerprint``."""
        return (self.fingerprint, self.num_rows, self.checksum) == (fingerprint, expected.num_rows, expected.checksum)

    def to_json(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "epoch": self.epoch, "split": self.split, "num_rows": self.num_rows,
                "checksum": self.checksum, "bytes": self.bytes, "files": {k: list(v) for k, v in self.files.items()},
                "digest": self.digest}

    @classmethod
    def read(cls, path: str) -> "CopyRecord | None":
        """The record at ``path``; None when it is missing, being replaced or damaged (the copy is then fetched again)."""
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read())
            files = {str(k): (int(v[0]), str(v[1])) for k, v in doc["files"].items()}
            return cls(fingerprint=str(doc["fingerprint"]), epoch=int(doc["epoch"]), split=int(doc["split"]),
                       num_rows=int(doc["num_rows"]), checksum=str(doc["checksum"]), bytes=int(doc["bytes"]),
                       files=files, digest=str(doc["digest"]))
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            return None


class CacheLayout:
    """The paths of the cache at ``root``."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.locks = os.path.join(self.root, "_locks")

    def path(self, key: Key) -> str:
        """Where the copy of (epoch, split) lives."""
        return os.path.join(self.root, split_path(*key))

    def record(self, key: Key) -> str:
        return self.path(key)[: -len(".lance")] + RECORD

    def lock(self, key: Key) -> str:
        return os.path.join(self.locks, f"epoch-{key[0]:05d}-split-{key[1]:05d}.lock")

    def reservation(self, key: Key) -> str:
        """Bytes a fetch in flight has claimed (counts only while that fetch holds the split's lock)."""
        return self.lock(key)[: -len(".lock")] + ".reserved"

    def reservations(self) -> Iterator[tuple[str, str]]:
        """(reservation file, its split's lock file) of every reservation there."""
        for path in glob.glob(os.path.join(glob.escape(self.locks), "*.reserved")):
            yield path, path[: -len(".reserved")] + ".lock"

    def leftovers(self, key: Key) -> list[str]:
        """What a killed or failed fetch of ``key`` may have left: temp copies and records, a legacy record."""
        base = glob.escape(self.path(key)[: -len(".lance")])
        return glob.glob(base + ".lance.tmp-*") + glob.glob(base + RECORD + ".tmp-*") + glob.glob(base + _LEGACY_RECORD + "*")

    def leftover_keys(self) -> set[Key]:
        """Splits with something :meth:`leftovers` would remove."""
        found = glob.glob(os.path.join(glob.escape(self.root), "epoch-*", "split-*.tmp-*"))
        found += glob.glob(os.path.join(glob.escape(self.root), "epoch-*", "split-*" + _LEGACY_RECORD + "*"))
        keys = set()
        for path in found:
            m = re.search(r"epoch-(\d{5})/split-(\d{5})\.", path)
            if m:
                keys.add((int(m.group(1)), int(m.group(2))))
        return keys

    def records(self) -> Iterator[tuple[Key, str]]:
        """(key, record path) of every copy record there."""
        for path in glob.glob(os.path.join(glob.escape(self.root), "epoch-*", "split-*" + RECORD)):
            m = _RECORD_PATH.search(path)
            if m:
                yield (int(m.group(1)), int(m.group(2))), path

    def copies(self) -> dict[Key, tuple[int, float]]:
        """``{(epoch, split): (bytes, last used)}`` of the copies with a record (least recently used is the record's mtime)."""
        out: dict[Key, tuple[int, float]] = {}
        for key, path in self.records():
            rec = CopyRecord.read(path)
            try:
                if rec is not None:
                    out[key] = (rec.bytes, os.path.getmtime(path))
            except OSError:
                continue  # a record being replaced: not counted, not a candidate
        return out

    def owned(self) -> list[str]:
        """The entries (relative to the root) the cache layout wrote, out of what is there: the manifest and the copies."""
        top = os.listdir(self.root)
        out = [n for n in top if n == MANIFEST]
        for d in top:
            if _EPOCH_DIR.match(d) and os.path.isdir(os.path.join(self.root, d)):
                out += [f"{d}/{n}" for n in os.listdir(os.path.join(self.root, d)) if _SPLIT_ENTRY.match(n)]
        return out


def crc32(path: str) -> str:
    """A file's CRC-32 (bit rot and torn writes, not tampering: ~5x faster than sha256 here)."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"

