"""Copying a remote directory (one split's Lance dataset) to local disk: whole objects, in parallel, retried.

Each object is one sequential GET into a file beside the destination; the copy appears
under its final name only when every object arrived whole (sizes checked against the
listing), so a kill at any moment leaves a ``.tmp-*`` directory and never a short copy.
Requests go through prep's own retry loop (:func:`prep.io.retry.call`) on a filesystem that
tries each request once, and at most :class:`~prep.io.retry.Aimd` ``limit`` objects are in
flight: halved when the store throttles, grown back by one per round of successes.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prep.io import storage
from prep.io.retry import Aimd, RetryCounter, call

__all__ = ["Fetcher", "FetchCounters", "ShortBody", "remove_tree"]


class ShortBody(ConnectionError):
    """An object arrived shorter than its listed size (retryable, like a dropped connection)."""


@dataclass(frozen=True)
class FetchCounters:
    """What a :class:`Fetcher` did so far."""

    bytes: int
    objects: int
    retries: int
    throttled: int
    fetch_s: float


class Fetcher:
    """Copies remote directories to local ones, ``concurrency`` objects at a time.

    Args:
        s3: endpoint, credentials and retry policy.
        concurrency: the most objects in flight (the AIMD limit starts here).
    """

    def __init__(self, s3: storage.S3Options | None = None, *, concurrency: int = 16) -> None:
        self.s3 = (s3 or storage.S3Options()).resolved()
        self.retries = RetryCounter()
        self.limiter = Aimd(concurrency, high=concurrency)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="prep-fetch")
        self._lock = threading.Lock()
        self._bytes = self._objects = 0
        self._fetch_s = 0.0
        self._fs: dict[str, storage.Resolved] = {}

    def counters(self) -> FetchCounters:
        with self._lock:
            return FetchCounters(self._bytes, self._objects, self.retries.retries, self.retries.throttled, self._fetch_s)

    def _resolve(self, uri: str) -> storage.Resolved:
        scheme = uri.partition("://")[0] if storage.is_remote(uri) else "file"
        with self._lock:
            if scheme not in self._fs:
                self._fs[scheme] = storage.resolve(uri, self.s3, retries=False)
        return storage.Resolved(self._fs[scheme].fs, storage.fs_path(uri), None)

    def list_tree(self, src: str) -> dict[str, int]:
        """``{relative path: size}`` of every object under ``src``."""
        r = self._resolve(src)
        root = r.path.rstrip("/")
        found = call(lambda: r.fs.find(root, detail=True), what=f"cannot list {src}", policy=self.s3.retry,
                     counter=self.retries, limiter=self.limiter)
        return {path[len(root):].lstrip("/"): int(info["size"]) for path, info in found.items()
                if info.get("type", "file") == "file"}

    def fetch_tree(self, src: str, dest: str, listing: dict[str, int] | None = None) -> int:
        """Copies every object under ``src`` into ``dest`` (replaced whole); returns the bytes copied.

        Raises:
            PrepError: naming the object that stayed unreadable after the retries.
        """
        listing = self.list_tree(src) if listing is None else listing
        tmp = f"{dest}.tmp-{uuid.uuid4().hex[:12]}"  # the layout's leftover pattern: cleared by the next fetch
        try:
            list(self._pool.map(lambda rel: self._get(storage.join(src, rel), os.path.join(tmp, rel), listing[rel]),
                                sorted(listing, key=lambda rel: -listing[rel])))
            if os.path.exists(dest):
                remove_tree(dest)
            os.makedirs(tmp, exist_ok=True)  # an empty listing still makes a directory
            os.replace(tmp, dest)
        finally:
            remove_tree(tmp)
        return sum(listing.values())

    def _get(self, uri: str, local: str, size: int) -> None:
        os.makedirs(os.path.dirname(local), exist_ok=True)
        r = self._resolve(uri)

        def attempt() -> None:
            with self.limiter:
                r.fs.get_file(r.path, local)
            got = os.path.getsize(local)
            if got != size:
                raise ShortBody(f"{uri}: got {got} of {size} bytes")

        started = time.perf_counter()
        call(attempt, what=f"cannot fetch {uri}", policy=self.s3.retry, counter=self.retries, limiter=self.limiter)
        with self._lock:
            self._bytes += size
            self._objects += 1
            self._fetch_s += time.perf_counter() - started

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def remove_tree(path: str) -> None:
    """Removes a file or directory tree if it is there."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)
