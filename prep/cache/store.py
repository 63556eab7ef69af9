"""A local cache of one materialized output's splits: verified copies, bounded in size, shared by processes.

The layout and the copy record are :mod:`prep.cache.records`'s; claiming the cache for one
materialization, :mod:`prep.cache.claim`'s; whether a copy is verified,
:mod:`prep.cache.check`'s; how processes share the cache, :mod:`prep.cache.locks`'s; what is
evicted to make room, :mod:`prep.cache.eviction`'s. This class reads and fetches: a kill at
any moment, a damaged copy or a copy of another materialization is fetched again, never used.
"""

from __future__ import annotations

import os
import threading

from prep.cache import eviction, locks
from prep.cache.check import CopyCheck
from prep.cache.claim import claim
from prep.cache.eviction import Priority
from prep.cache.records import CacheLayout, CopyRecord, Key, crc32
from prep.contracts.manifest import Manifest, split_path
from prep.contracts.materialized import rerun_command
from prep.errors import PrepError, one_line
from prep.io.materialized import read_manifest
from prep.io import storage
from prep.io.checksum import dataset_checksum
from prep.io.transfer import Fetcher, remove_tree

__all__ = ["SplitCache", "Key", "Priority"]


class SplitCache:
    """Verified local copies of ``source``'s splits under ``root``, at most ``max_bytes`` of them.

    Args:
        root: the cache directory (created; refused when it holds files prep did not write).
        source: the materialized output (local path or URI).
        manifest: its manifest (default: read from ``source``).
        max_bytes: the most bytes of copies kept (None: no limit).
        overwrite: replace a cache of another materialization (otherwise that is an error).
        s3: endpoint, credentials and retry policy for ``source``.
        fetcher: the object copier (default: a new one with 16 requests in flight).

    Raises:
        PrepError: ``root`` is a file, holds files prep did not write, caches another
            materialization (without ``overwrite``), or another process uses the cache of
            another materialization (with ``overwrite``; naming it).
    """

    def __init__(self, root: str, *, source: str, manifest: Manifest | None = None, max_bytes: int | None = None,
                 overwrite: bool = False, s3: storage.S3Options | None = None, fetcher: Fetcher | None = None) -> None:
        self.layout = CacheLayout(root)
        self.root, self.source, self.max_bytes = self.layout.root, source, max_bytes
        self.manifest = manifest if manifest is not None else read_manifest(source, s3)
        self.fingerprint = self.manifest.fingerprint
        self.fetcher = fetcher or Fetcher(s3)
        self._splits = {(e.epoch, s.split): s for e in self.manifest.epochs for s in e.splits}
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = self.damaged = 0
        self.copies = 0  # copies this object fetched (another process may have fetched the others it found there)
        self._check = CopyCheck(self.layout, self.fingerprint, self._splits, lambda: self._count(damaged=1))
        self._use = claim(self.layout, source=source, manifest=self.manifest, overwrite=overwrite)

    def close(self) -> None:
        """Stops using the cache (another run may then replace it); leases already given stay valid."""
        self._use.release()

    # --- paths ---------------------------------------------------------------------------------
    def path(self, key: Key) -> str:
        """Where the copy of (epoch, split) lives."""
        return self.layout.path(key)

    # --- reading -------------------------------------------------------------------------------
    def acquire(self, key: Key) -> locks.ReadLease | None:
        """A lease on the verified copy of ``key``, or None (not there, being fetched, or damaged).

        Never waits: a split another thread or process is fetching right now is a miss.
        """
        lease = self._shared(key)
        self._count(hits=1) if lease is not None else self._count(misses=1)
        return lease

    def _shared(self, key: Key) -> locks.ReadLease | None:
        fd = locks.shared_now(self.layout.lock(key))
        if fd is None:
            return None
        if not self.valid(key):
            os.close(fd)
            return None
        os.utime(self.layout.record(key))  # least recently used is measured on the records
        return locks.ReadLease(fd, self.path(key))

    def _shared_valid(self, key: Key) -> bool:
        lease = self._shared(key)
        if lease is None:
            return False
        lease.release()
        return True

    def valid(self, key: Key) -> bool:
        """Whether a complete, verified copy of ``key`` is there (the caller holds its lock)."""
        return self._check.valid(key)

    # --- fetching ------------------------------------------------------------------------------
    def fetch(self, key: Key, priority: Priority | None = None) -> bool:
        """Makes sure a verified copy of ``key`` is there, fetching it if not (the split's one writer: its lock).

        Args:
            key: (epoch, split).
            priority: which other copies may be evicted to make room, in what order
                (default: none may; see :data:`Priority`).

        Returns:
            True when the copy is there; False when it does not fit under ``max_bytes``
            without evicting a copy ``priority`` protects or another process is using.

        Raises:
            PrepError: the source's split stays unreadable (naming it) or its copy does
                not match the manifest.
        """
        if self._shared_valid(key):  # the common case, and it never waits on a reader's lease
            return True
        with locks.exclusive(self.layout.lock(key)):
            if self.valid(key):
                return True
            src = storage.join(self.source, split_path(*key))
            listing = self.fetcher.list_tree(src)
            if not listing:
                raise PrepError(f"{src} is missing: {self._repair()}")
            if self.max_bytes is not None:
                fits, evicted = eviction.make_room(self.layout, self.cached, sum(listing.values()), key, priority,
                                                   self.max_bytes, self._clear)
                self._count(evictions=evicted)
                if not fits:
                    return False
            try:
                self._clear(key)
                dest = self.path(key)
                self.fetcher.fetch_tree(src, dest, listing)
                self._verify_copy(key, src)
                rec = CopyRecord.of(self.fingerprint, key, self._splits[key],
                                    {rel: (size, crc32(os.path.join(dest, rel))) for rel, size in listing.items()})
                storage.write_json_atomic(self.layout.record(key), rec.to_json())
            finally:
                remove_tree(self.layout.reservation(key))
            self._check.fetched(key)
            self._count(copies=1)
            return True

    def _verify_copy(self, key: Key, src: str) -> None:
        expected = self._splits[key]
        try:
            rows, checksum = dataset_checksum(self.path(key))
        except (OSError, ValueError, PrepError) as exc:
            self._clear(key)
            raise PrepError(f"the copy of {src} cannot be read ({one_line(exc)}): {self._repair()}") from None
        if rows != expected.num_rows or checksum != expected.checksum:
            self._clear(key)
            raise PrepError(
                f"the copy of {src} does not match the manifest ({rows} rows, checksum {checksum[:12]}...; expected "
                f"{expected.num_rows} rows, {expected.checksum[:12]}...): {self._repair()}")

    def _repair(self) -> str:
        """What to do about a split that is damaged at the source: the rerun that rewrites it, not another check."""
        return f"the split is damaged at the source; rewrite it with the plain rerun `{rerun_command(self.manifest, self.source)}`"

    def _clear(self, key: Key) -> None:
        """Removes a copy, its record first (so a half-removed copy is never taken), and what failed fetches left."""
        remove_tree(self.layout.record(key))
        remove_tree(self.path(key))
        for part in self.layout.leftovers(key):
            remove_tree(part)

    # --- size ----------------------------------------------------------------------------------
    def cached(self) -> dict[Key, tuple[int, float]]:
        """``{(epoch, split): (bytes, last used)}`` of the copies with a record, in any process."""
        return self.layout.copies()

    def cached_bytes(self) -> int:
        """The bytes of the copies with a record, in any process."""
        return sum(size for size, _ in self.cached().values())

    def _count(self, *, hits: int = 0, misses: int = 0, evictions: int = 0, damaged: int = 0, copies: int = 0) -> None:
        with self._lock:
            self.hits += hits
            self.misses += misses
            self.evictions += evictions
            self.damaged += damaged
            self.copies += copies
