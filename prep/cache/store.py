"""A local cache of one materialized output's splits: verified copies, bounded in size, shared by processes.

Layout (the materialized output's, so the directory also opens as an output)::

    CACHE/_prep_cache.json                   whose cache this is (source, fingerprint); written first
    CACHE/manifest.json                      the source's manifest
    CACHE/epoch-EEEEE/split-SSSSS.lance/     a copy, complete (renamed into place whole)
    CACHE/epoch-EEEEE/split-SSSSS.done.json  its record: rows + checksum (as the manifest says),
                                             and the size + CRC-32 of every file; written last
    CACHE/_locks/epoch-EEEEE-split-SSSSS.lock

A copy counts only with a record that matches the manifest and files that match the
record (sizes on every open, CRC-32 of the content once per process), so a kill at any moment, a truncated
or flipped file, or a copy of another materialization is fetched again, never used.
Processes coordinate with ``flock``: a fetch holds its split's lock exclusively, a reader
holds it shared while the split is open (:class:`Lease`), and eviction takes it only
without waiting, so nothing in use by any process is ever evicted. Locks die with their
process, SIGKILL included.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import logging
import os
import re
import threading
import zlib
from contextlib import contextmanager
from typing import Callable, Iterator

from prep.io import storage
from prep.io.checksum import dataset_checksum
from prep.errors import PrepError, one_line
from prep.io.jsonfile import read_json_file
from prep.contracts.manifest import MANIFEST, Manifest, read_manifest, split_path, write_manifest
from prep.contracts.materialized import owned_entries
from prep.io.transfer import Fetcher, remove_tree

__all__ = ["SplitCache", "Lease", "Key", "MARKER", "Priority"]

log = logging.getLogger(__name__)

MARKER = "_prep_cache.json"
LOCKS = "_locks"
_JOB = "prep prewarm"  # the marker's writer: prewarm and the reader share one layout
_FIX = "choose an empty or new --cache (prep never deletes what it did not write)"
_RECORD = re.compile(r"epoch-(\d{5})/split-(\d{5})\.done\.json$")
Key = tuple[int, int]
# Eviction order for a cached (epoch, split): lower goes first; None: never evict it now.
Priority = Callable[[Key, float], tuple | None]


class Lease:
    """A shared lock on one cached split: while it is held, no process evicts or replaces the copy."""

    def __init__(self, fd: int, path: str) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __del__(self) -> None:
        self.release()


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
        PrepError: ``root`` is a file, holds files prep did not write, or caches another
            materialization (without ``overwrite``).
    """

    def __init__(self, root: str, *, source: str, manifest: Manifest | None = None, max_bytes: int | None = None,
                 overwrite: bool = False, s3: storage.S3Options | None = None, fetcher: Fetcher | None = None) -> None:
        self.root, self.source, self.max_bytes = os.path.abspath(root), source, max_bytes
        self.manifest = manifest if manifest is not None else read_manifest(source, s3)
        self.fingerprint = self.manifest.fingerprint
        self.fetcher = fetcher or Fetcher(s3)
        self._splits = {(e.epoch, s.split): s for e in self.manifest.epochs for s in e.splits}
        self._lock = threading.Lock()
        self._checked: set[tuple[Key, str]] = set()  # (split, record digest) whose content this process hashed
        self._hashing: dict[Key, threading.Lock] = {}
        self._reported: set[Key] = set()  # damaged copies already counted and warned about
        self.hits = self.misses = self.evictions = self.damaged = 0
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise PrepError(f"--cache {self.root} is a file, not a directory: {_FIX}")
        os.makedirs(self.root, exist_ok=True)
        with _exclusive(self.root):  # processes starting on one new directory: one writes the marker
            _claim(self.root, source, self.fingerprint, overwrite)
            os.makedirs(os.path.join(self.root, LOCKS), exist_ok=True)
        manifest_path = os.path.join(self.root, MANIFEST)
        if not os.path.exists(manifest_path) or storage.read_json(manifest_path) != self.manifest.to_json():
            write_manifest(self.root, self.manifest)

    # --- paths ---------------------------------------------------------------------------------
    def path(self, key: Key) -> str:
        """Where the copy of (epoch, split) lives."""
        return os.path.join(self.root, split_path(*key))

    def _record(self, key: Key) -> str:
        return self.path(key)[: -len(".lance")] + ".done.json"

    def _lock_file(self, key: Key) -> str:
        return os.path.join(self.root, LOCKS, f"epoch-{key[0]:05d}-split-{key[1]:05d}.lock")

    def _reservation(self, key: Key) -> str:
        """Bytes a fetch in flight has claimed (counts only while that fetch holds the split's lock)."""
        return self._lock_file(key)[: -len(".lock")] + ".reserved"

    def _reserved(self) -> int:
        """Bytes claimed by fetches in flight, in any process; a killed fetch's claim no longer counts."""
        total = 0
        for path in glob.glob(os.path.join(glob.escape(os.path.join(self.root, LOCKS)), "*.reserved")):
            fd = os.open(path[: -len(".reserved")] + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # its fetch is running (in this or another process)
                try:
                    with open(path) as f:
                        total += int(f.read() or 0)
                except (OSError, ValueError):
                    continue
            finally:
                os.close(fd)
        return total

    # --- reading -------------------------------------------------------------------------------
    def acquire(self, key: Key) -> Lease | None:
        """A lease on the verified copy of ``key``, or None (not there, being fetched, or damaged).

        Never waits: a split another thread or process is fetching right now is a miss.
        """
        lease = self._shared(key)
        self._count(hits=1) if lease is not None else self._count(misses=1)
        return lease

    def _shared(self, key: Key) -> Lease | None:
        fd = os.open(self._lock_file(key), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if not self.valid(key):
            os.close(fd)
            return None
        os.utime(self._record(key))  # least recently used is measured on the records
        return Lease(fd, self.path(key))

    def _shared_valid(self, key: Key) -> bool:
        lease = self._shared(key)
        if lease is None:
            return False
        lease.release()
        return True

    def valid(self, key: Key) -> bool:
        """Whether a complete, verified copy of ``key`` is there (the caller holds its lock)."""
        rec = self._read_record(key)
        expected = self._splits[key]
        if rec is None or rec.get("fingerprint") != self.fingerprint or rec.get("checksum") != expected.checksum \
                or rec.get("num_rows") != expected.num_rows or not isinstance(rec.get("files"), dict):
            return False
        base = self.path(key)
        files: dict[str, list] = rec["files"]
        for rel, (size, _) in files.items():
            try:
                if os.path.getsize(os.path.join(base, rel)) != size:
                    return self._damaged(key, f"{rel} is {os.path.getsize(os.path.join(base, rel))} bytes, not {size}")
            except OSError:
                return self._damaged(key, f"{rel} is missing")
        token = (key, rec.get("digest", ""))
        with self._lock:
            hashing = self._hashing.setdefault(key, threading.Lock())
        with hashing:  # threads asking about one split at once hash it once
            if token not in self._checked:
                for rel, (_, digest) in files.items():
                    if _crc32(os.path.join(base, rel)) != digest:
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

    def _read_record(self, key: Key) -> dict | None:
        try:
            with open(self._record(key), "rb") as f:
                rec = json.loads(f.read())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    # --- fetching ------------------------------------------------------------------------------
    def fetch(self, key: Key, priority: Priority | None = None) -> bool:
        """Makes sure a verified copy of ``key`` is there, fetching it if not.

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
        with _exclusive(self._lock_file(key)):
            if self.valid(key):
                return True
            src = storage.join(self.source, split_path(*key))
            listing = self.fetcher.list_tree(src)
            if not listing:
                raise PrepError(f"{src} is missing: run `prep verify {self.source}`")
            need = sum(listing.values())
            if self.max_bytes is not None and not self._make_room(need, key, priority):
                return False
            try:
                self._clear(key)
                dest = self.path(key)
                self.fetcher.fetch_tree(src, dest, listing)
                self._verify_copy(key, src)
                files = {rel: [size, _crc32(os.path.join(dest, rel))] for rel, size in listing.items()}
                digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
                expected = self._splits[key]
                storage.write_json_atomic(self._record(key), {
                    "fingerprint": self.fingerprint, "epoch": key[0], "split": key[1], "num_rows": expected.num_rows,
                    "checksum": expected.checksum, "bytes": need, "files": files, "digest": digest})
            finally:
                remove_tree(self._reservation(key))
            with self._lock:
                self._checked.add((key, digest))
                self._reported.discard(key)
            return True

    def _verify_copy(self, key: Key, src: str) -> None:
        expected = self._splits[key]
        try:
            rows, checksum = dataset_checksum(self.path(key))
        except (OSError, ValueError, PrepError) as exc:
            self._clear(key)
            raise PrepError(f"the copy of {src} cannot be read ({one_line(exc)}): run `prep verify {self.source}`") from None
        if rows != expected.num_rows or checksum != expected.checksum:
            self._clear(key)
            raise PrepError(
                f"the copy of {src} does not match the manifest ({rows} rows, checksum {checksum[:12]}...; expected "
                f"{expected.num_rows} rows, {expected.checksum[:12]}...): run `prep verify {self.source}`")

    def _clear(self, key: Key) -> None:
        """Removes a copy, its record first (so a half-removed copy is never taken), and leftovers of killed fetches."""
        remove_tree(self._record(key))
        remove_tree(self.path(key))
        for part in glob.glob(glob.escape(self.path(key)) + ".tmp-*"):
            remove_tree(part)

    # --- eviction ------------------------------------------------------------------------------
    def cached(self) -> dict[Key, tuple[int, float]]:
        """``{(epoch, split): (bytes, last used)}`` of the copies with a record, in any process."""
        out: dict[Key, tuple[int, float]] = {}
        for path in glob.glob(os.path.join(glob.escape(self.root), "epoch-*", "split-*.done.json")):
            m = _RECORD.search(path)
            try:
                with open(path, "rb") as f:
                    size = int(json.loads(f.read())["bytes"])
                out[(int(m.group(1)), int(m.group(2)))] = (size, os.path.getmtime(path))
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue  # a record being replaced or damaged: not counted, not a candidate
        return out

    def cached_bytes(self) -> int:
        return sum(size for size, _ in self.cached().values())

    def _make_room(self, need: int, fetching: Key, priority: Priority | None) -> bool:
        """Evicts copies (in ``priority`` order, skipping any in use) until ``need`` more bytes fit."""
        with _exclusive(os.path.join(self.root, LOCKS, "evict.lock")):  # one evicting process at a time
            # claims before records: a fetch finishing meanwhile writes its record before it drops its claim,
            # so it is counted at least once (the other order could miss it and let two copies overrun max_bytes)
            reserved = self._reserved()
            entries = {k: v for k, v in self.cached().items() if k != fetching}
            total = sum(size for size, _ in entries.values()) + reserved
            fits = total + need <= self.max_bytes
            ranked = [] if fits else sorted((rank, k) for k, (_, used) in entries.items()
                                            if priority is not None and (rank := priority(k, used)) is not None)
            for _, k in ranked:
                if self._evict(k):
                    total -= entries[k][0]
                    if total + need <= self.max_bytes:
                        fits = True
                        break
            if fits:  # claimed before the lock is let go: concurrent fetches cannot overrun the limit together
                with open(self._reservation(fetching), "w") as f:
                    f.write(str(need))
            return fits

    def _evict(self, key: Key) -> bool:
        fd = os.open(self._lock_file(key), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # open in a reader or being fetched
        else:
            self._clear(key)
            self._count(evictions=1)
            return True
        finally:
            os.close(fd)

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, d in deltas.items():
                setattr(self, name, getattr(self, name) + d)


@contextmanager
def _exclusive(path: str) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``path`` (a lock file or a directory), waiting for it."""
    fd = os.open(path, os.O_RDONLY if os.path.isdir(path) else os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _crc32(path: str) -> str:
    """A file's CRC-32 (bit rot and torn writes, not tampering: ~5x faster than sha256 here)."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def _claim(cache: str, source: str, fingerprint: str, overwrite: bool) -> None:
    """Makes ``cache`` prep's for this materialization, touching nothing prep did not write.

    Raises:
        PrepError: ``cache`` is a non-empty directory without the marker, or the cache of another materialization (without ``overwrite``).
    """
    fix = _FIX
    marker = os.path.join(cache, MARKER)
    if os.path.isdir(cache) and os.listdir(cache):
        if not os.path.exists(marker):
            raise PrepError(f"--cache {cache} is not empty and is not a prep prewarm cache (no {MARKER}): {fix}")
        old = read_json_file(marker, None, fix)
        if not isinstance(old, dict) or old.get("job") != _JOB:
            raise PrepError(f"{marker} was not written by {_JOB}: {fix}")
        if old.get("fingerprint") == fingerprint:
            return
        if not overwrite:
            raise PrepError(f"cache {cache} holds materialization {old.get('fingerprint')}, not {fingerprint} "
                            f"of {source}; pass --overwrite or use another --cache")
        _remove_owned(cache)
    storage.write_json_atomic(marker, {"job": _JOB, "source": source, "fingerprint": fingerprint})


def _remove_owned(cache: str) -> None:
    """Removes the cache's copies and manifest (the materialized layout) from ``cache``; anything else stays."""
    top = os.listdir(cache)
    inside = {d: os.listdir(os.path.join(cache, d)) for d in top if os.path.isdir(os.path.join(cache, d))}
    for rel in owned_entries(top, inside, names=(MANIFEST,)):
        remove_tree(os.path.join(cache, rel))
    for d in inside:
        if os.path.isdir(os.path.join(cache, d)) and not os.listdir(os.path.join(cache, d)):
            os.rmdir(os.path.join(cache, d))
