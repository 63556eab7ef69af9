"""How processes share one reader cache: ``flock`` on files under ``CACHE/_locks``, which die with their process.

- A split: a fetch holds its lock exclusively (the split's one writer); a reader holds it
  shared while the copy is open (:class:`ReadLease`); eviction takes it only without
  waiting, so nothing in use by any process is ever evicted or replaced.
- Room: a fetch reserves the bytes it will write before it lets go of the eviction lock;
  a reservation counts only while its fetch holds the split's lock (:func:`reserved_bytes`).
- The whole cache (:class:`CacheUse`): every process using it (prewarm, the reader) holds
  it shared, with a record naming it (:class:`prep.contracts.ownership.Holder`); replacing
  the cache's materialization (``--overwrite``) needs it exclusively, so it never pulls
  copies from under a running process; a second run is refused at once, naming who uses it.
"""

from __future__ import annotations

import fcntl
import glob
import os
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

from prep.cache.records import CacheLayout
from prep.contracts.ownership import Holder
from prep.io.lease import this_process
from prep.io.transfer import remove_tree

__all__ = ["ReadLease", "exclusive", "try_exclusive", "shared_now", "reserve", "reserved_bytes", "CacheUse"]


class ReadLease:
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


def _open(path: str) -> int:
    return os.open(path, os.O_RDONLY if os.path.isdir(path) else os.O_RDWR | os.O_CREAT, 0o644)


@contextmanager
def exclusive(path: str) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``path`` (a lock file or a directory), waiting for it."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def try_exclusive(path: str) -> int | None:
    """An fd holding ``path``'s exclusive lock, or None when another holder has it (never waits)."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def shared_now(path: str) -> int | None:
    """An fd holding ``path``'s shared lock, or None when a writer has it (never waits)."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def reserve(layout: CacheLayout, key: tuple[int, int], need: int) -> None:
    """Claims ``need`` bytes for the fetch of ``key`` (the caller holds its lock and the eviction lock)."""
    with open(layout.reservation(key), "w") as f:
        f.write(str(need))


def reserved_bytes(layout: CacheLayout) -> int:
    """Bytes claimed by fetches in flight, in any process; a killed fetch's claim no longer counts."""
    total = 0
    for path, lock in layout.reservations():
        fd = shared_now(lock)
        if fd is not None:  # nobody fetches that split: a dead fetch's claim
            os.close(fd)
            continue
        try:
            with open(path) as f:
                total += int(f.read() or 0)
        except (OSError, ValueError):
            continue
    return total


def _age(path: str) -> float:
    try:
        return time.time() - os.path.getmtime(path)
    except OSError:
        return 0.0


class CacheUse:
    """This process's use of the cache at ``layout``: shared with other users, or exclusive to replace it.

    Args:
        layout: the cache.
        job: who uses it, as the record names it (e.g. ``prep prewarm``).
    """

    def __init__(self, layout: CacheLayout, job: str) -> None:
        self._layout = layout
        self.holder = this_process(job)
        self._record = os.path.join(layout.locks, f"user-{self.holder.token}.json")
        tmp = f"{self._record}.tmp-{uuid.uuid4().hex[:12]}"
        self._record_fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._record_fd, fcntl.LOCK_EX)  # locked before it has its name: a sweep never takes a live one
        os.write(self._record_fd, self.holder.encode())
        os.replace(tmp, self._record)
        self._fd = _open(os.path.join(layout.locks, "cache.lock"))
        self._released = False
        self._pid = os.getpid()

    def try_exclusive(self) -> bool:
        """Whether this process now uses the cache alone (no other process uses it); never waits."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def share(self) -> None:
        """Uses the cache alongside others (waits while a process replaces it; turns an exclusive use into a shared one)."""
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def others(self) -> list[Holder]:
        """The other live processes using the cache (their records' locks are held)."""
        found = []
        for path in sorted(glob.glob(os.path.join(glob.escape(self._layout.locks), "user-*.json"))):
            if path == self._record:
                continue
            fd = shared_now(path)
            if fd is not None:  # its process is gone
                os.close(fd)
                continue
            with open(path, "rb") as f:
                holder = Holder.decode(f.read())
            if holder is not None:
                found.append(holder)
        return found

    def sweep(self) -> None:
        """Removes the records of processes that are gone (call it under the cache's directory lock)."""
        for path in glob.glob(os.path.join(glob.escape(self._layout.locks), "user-*.json*")):
            if not path.endswith(".json") and _age(path) < 60:  # a record still being made (locked only once it is open)
                continue
            fd = try_exclusive(path)
            if fd is not None:
                remove_tree(path)
                os.close(fd)

    def release(self) -> None:
        if self._released:
            return
        if os.getpid() == self._pid:  # a forked child closes its copies only: the record is its parent's
            remove_tree(self._record)
        os.close(self._record_fd)
        os.close(self._fd)
        self._released = True

    def __del__(self) -> None:
        self.release()
