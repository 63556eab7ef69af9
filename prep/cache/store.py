"""A local cache of one materialized output's splits: verified copies, bounded in size, shared by processes.

The layout and the copy record are :mod:`prep.cache.records`'s; how processes share the
cache, :mod:`prep.cache.locks`'s; what is evicted to make room, :mod:`prep.cache.eviction`'s.
A copy counts only with a record that matches the manifest and files that match the
record (sizes on every open, CRC-32 of the content once per process and again whenever a
file's inode, mtime or ctime moved since), so a kill at any moment, a truncated or flipped
file (also one flipped while this process uses the cache), or a copy of another
materialization is fetched again, never used. The cache is claimed with prep's marker
(:data:`CACHE_MARKER`, written by :func:`prep.contracts.ownership.write_cache_marker`): prep writes only into an empty folder or
its own cache, and replacing another materialization's cache (``overwrite``) removes only
the cache's own files (:func:`prep.contracts.ownership.remove_owned`), only while no other
process uses it.
"""

from __future__ import annotations

import glob
import logging
import os
import threading

from prep.cache import eviction, locks
from prep.cache.eviction import Priority
from prep.cache.records import CacheLayout, CopyRecord, Key, crc32
from prep.contracts.manifest import MANIFEST, Manifest, read_manifest, split_path
from prep.contracts.ownership import CACHE_MARKER, remove_owned, write_cache_marker
from prep.errors import PrepError, one_line
from prep.io import storage
from prep.io.checksum import dataset_checksum
from prep.io.jsonfile import read_json_file
from prep.io.transfer import Fetcher, remove_tree
from prep.materialize.verify.repair import rerun_command

__all__ = ["SplitCache", "Key", "Priority", "JOB"]

log = logging.getLogger(__name__)

JOB = "prep prewarm"  # the marker's writer: prewarm and the reader share one layout
_FIX = "choose an empty or new --cache (prep never deletes what it did not write)"


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
        self._checked: set[tuple] = set()  # (split, record digest, files' inode/mtime/ctime) whose content this process hashed
        self._hashing: dict[Key, threading.Lock] = {}
        self._reported: set[Key] = set()  # damaged copies already counted and warned about
        self.hits = self.misses = self.evictions = self.damaged = 0
        self.copies = 0  # copies this object fetched (another process may have fetched the others it found there)
        self._use = self._claim(overwrite)

    # --- claiming ------------------------------------------------------------------------------
    def _claim(self, overwrite: bool) -> locks.CacheUse:
        """Makes the cache this materialization's, touching nothing prep did not write; returns this process's use of it."""
        root = self.root
        if os.path.exists(root) and not os.path.isdir(root):
            raise PrepError(f"--cache {root} is a file, not a directory: {_FIX}")
        os.makedirs(root, exist_ok=True)
        with locks.exclusive(root):  # processes starting on one directory: one looks and claims at a time
            self._marker()
            os.makedirs(self.layout.locks, exist_ok=True)
        use = locks.CacheUse(self.layout, JOB)
        try:
            replacing = overwrite and use.try_exclusive()
            if not replacing:
                use.share()
            with locks.exclusive(root):
                old = self._marker()
                if old is not None and old.get("fingerprint") != self.fingerprint:
                    self._replace(old, overwrite, replacing, use)
                if old is None or old.get("fingerprint") != self.fingerprint:
                    write_cache_marker(root, JOB, source=self.source, fingerprint=self.fingerprint)
                self._sweep(use)
                manifest_path = os.path.join(root, MANIFEST)
                if not os.path.exists(manifest_path) or storage.read_json(manifest_path) != self.manifest.to_json():
                    storage.write_json_atomic(manifest_path, self.manifest.to_json())
            if replacing:
                use.share()  # let the others in; the marker is read again: another run may have replaced it meanwhile
                with locks.exclusive(root):
                    now = self._marker()
                if now is None or now.get("fingerprint") != self.fingerprint:
                    raise PrepError(f"cache {root} was replaced by another run meanwhile (now materialization "
                                    f"{(now or {}).get('fingerprint')}): use another cache directory")
        except BaseException:
            use.release()
            raise
        return use

    def _marker(self) -> dict | None:
        """The cache's marker; None for an empty folder. Raises for a folder that is not a prep cache."""
        marker = os.path.join(self.root, CACHE_MARKER)
        if not os.path.exists(marker):
            if set(os.listdir(self.root)) - {os.path.basename(self.layout.locks)}:
                raise PrepError(f"--cache {self.root} is not empty and is not a prep prewarm cache (no {CACHE_MARKER}): {_FIX}")
            return None
        old = read_json_file(marker, None, _FIX)
        if not isinstance(old, dict) or old.get("job") != JOB:
            raise PrepError(f"{marker} was not written by {JOB}: {_FIX}")
        return old

    def _replace(self, old: dict, overwrite: bool, replacing: bool, use: locks.CacheUse) -> None:
        """Removes the cache's own files of another materialization, when allowed (the caller holds the directory lock)."""
        held = f"cache {self.root} holds materialization {old.get('fingerprint')} of {old.get('source')}, not {self.fingerprint} of {self.source}"
        if not overwrite:
            raise PrepError(f"{held}: use another cache directory, or replace it with "
                            f"`prep prewarm {self.source} --cache {self.root} --overwrite`")
        if not replacing:
            others = use.others()
            who = ", ".join(h.describe() for h in others[:3]) or "another process"
            raise PrepError(f"{held}, and it is in use by {who}: wait for it to finish or use another cache directory")
        log.warning("replacing the cache %s (materialization %s): removing only the files the cache wrote",
                    self.root, old.get("fingerprint"))
        remove_owned(self.root, self.layout.owned())

    def _sweep(self, use: locks.CacheUse) -> None:
        """Removes what killed or failed runs left: records of processes that are gone, and temp files of fetches
        nobody runs now (a split's leftovers go only under its lock)."""
        use.sweep()
        for name in (MANIFEST, CACHE_MARKER):  # written under the directory lock, which the caller holds
            for part in glob.glob(os.path.join(glob.escape(self.root), name + ".tmp-*")):
                remove_tree(part)
        for key in self.layout.leftover_keys():
            fd = locks.try_exclusive(self.layout.lock(key))
            if fd is not None:
                try:
                    for part in self.layout.leftovers(key):
                        remove_tree(part)
                finally:
                    os.close(fd)

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
        rec = CopyRecord.read(self.layout.record(key))
        if rec is None or not rec.matches(self.fingerprint, self._splits[key]):
            return False
        base = self.path(key)
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

    def _damaged(self, key: Key, why: str) -> bool:
        with self._lock:
            first = key not in self._reported  # checked again under the fetch lock: one warning per copy
            self._reported.add(key)
        if first:
            log.warning("cached copy %s is damaged (%s): it will be fetched again", self.path(key), why)
            self._count(damaged=1)
        return False

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
            with self._lock:
                self._reported.discard(key)
                self.copies += 1
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
        out: dict[Key, tuple[int, float]] = {}
        for key, path in self.layout.records():
            rec = CopyRecord.read(path)
            try:
                if rec is not None:
                    out[key] = (rec.bytes, os.path.getmtime(path))
            except OSError:
                continue  # a record being replaced: not counted, not a candidate
        return out

    def cached_bytes(self) -> int:
        return sum(size for size, _ in self.cached().values())

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, d in deltas.items():
                setattr(self, name, getattr(self, name) + d)
