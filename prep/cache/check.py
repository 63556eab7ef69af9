"""Whether a cached copy is complete and verified, hashing each file's content once per process.

A copy counts only with a record that matches the manifest and files that match the
record: sizes on every look, CRC-32 of the content once per process and again whenever a
file's inode, mtime or ctime moved since, so a truncated or flipped file (also one flipped
while this process uses the cache) is fetched again, never used.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable

from prep.cache.records import CacheLayout, CopyRecord, Key, crc32
from prep.contracts.manifest import SplitFile

__all__ = ["CopyCheck"]

log = logging.getLogger(__name__)

_Token = tuple[Key, str, tuple[tuple[int, int, int], ...]]  # (split, record digest, files' inode/mtime/ctime)


class CopyCheck:
    """Checks the copies at ``layout`` against ``splits`` of the materialization ``fingerprint``.

    Args:
        layout: the cache.
        fingerprint: the materialization the copies must be of.
        splits: what the manifest says of each (epoch, split).
        on_damaged: called once per damaged copy found (until it is fetched again).
    """

    def __init__(self, layout: CacheLayout, fingerprint: str, splits: dict[Key, SplitFile],
                 on_damaged: Callable[[], None]) -> None:
        self.layout, self.fingerprint, self.splits = layout, fingerprint, splits
        self._on_damaged = on_damaged
        self._lock = threading.Lock()
        self._checked: set[_Token] = set()  # the copies whose content this process hashed
        self._hashing: dict[Key, threading.Lock] = {}
        self._reported: set[Key] = set()  # damaged copies already counted and warned about

    def valid(self, key: Key) -> bool:
        """Whether a complete, verified copy of ``key`` is there (the caller holds its lock)."""
        rec = CopyRecord.read(self.layout.record(key))
        if rec is None or not rec.matches(self.fingerprint, self.splits[key]):
            return False
        base = self.layout.path(key)
        stats = []
        for rel, (size, _) in rec.files.items():
            try:
                st = os.stat(os.path.join(base, rel))
            except OSError:
                return self._damaged(key, f"{rel} is missing")
            if st.st_size != size:
                return self._damaged(key, f"{rel} is {st.st_size} bytes, not {size}")
            stats.append((st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
        token = (key, rec.digest, tuple(stats))  # a file written since it was hashed (its ctime moves) is hashed again
        with self._lock:
            hashing = self._hashing.setdefault(key, threading.Lock())
        with hashing:  # threads asking about one split at once hash it once
            if token not in self._checked:
                for rel, (_, digest) in rec.files.items():
                    if crc32(os.path.join(base, rel)) != digest:
                        return self._damaged(key, f"{rel} does not match its checksum")
                self._checked.add(token)
        return True

    def fetched(self, key: Key) -> None:
        """A fresh copy of ``key`` is there: damage found later is reported again."""
        with self._lock:
            self._reported.discard(key)

    def _damaged(self, key: Key, why: str) -> bool:
        with self._lock:
            first = key not in self._reported  # checked again under the fetch lock: one warning per copy
            self._reported.add(key)
        if first:
            log.warning("cached copy %s is damaged (%s): it will be fetched again", self.layout.path(key), why)
            self._on_damaged()
        return False
