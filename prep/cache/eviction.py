"""Making room in a bounded cache: which copies go, in what order, and never one in use.

The caller's :data:`Priority` ranks the copies it may evict (lower goes first; None: keep
it now): the reader evicts consumed epochs and copies nobody reads first, then copies
needed later than the one it fetches; prewarm only copies it was not asked for. One
process evicts at a time (the eviction lock), and a copy a reader holds or a fetch writes
is skipped (its split lock is taken only without waiting).
"""

from __future__ import annotations

import os
from typing import Callable

from prep.cache import locks
from prep.cache.records import CacheLayout, Key

__all__ = ["Priority", "make_room"]

# Eviction order for a cached (epoch, split) last used at a time: lower goes first; None: never evict it now.
Priority = Callable[[Key, float], tuple[float, float] | None]


def make_room(layout: CacheLayout, cached: Callable[[], dict[Key, tuple[int, float]]], need: int, fetching: Key,
              priority: Priority | None, max_bytes: int, clear: Callable[[Key], None]) -> tuple[bool, int]:
    """Evicts copies (in ``priority`` order, skipping any in use) until ``need`` more bytes fit under ``max_bytes``,
    then reserves them for the fetch of ``fetching``.

    Args:
        layout: the cache.
        cached: the copies there, ``{key: (bytes, last used)}``.
        need: the bytes the fetch will write.
        fetching: the split being fetched (its lock is held by the caller).
        priority: which copies may go, in what order (None: none may).
        max_bytes: the most the cache may hold.
        clear: removes one copy (called with its lock held).

    Returns:
        Whether the bytes fit (and are reserved), and how many copies were evicted.
    """
    evicted = 0
    with locks.exclusive(os.path.join(layout.locks, "evict.lock")):  # one evicting process at a time
        # claims before records: a fetch finishing meanwhile writes its record before it drops its claim,
        # so it is counted at least once (the other order could miss it and let two copies overrun max_bytes)
        reserved = locks.reserved_bytes(layout)
        entries = {k: v for k, v in cached().items() if k != fetching}
        total = sum(size for size, _ in entries.values()) + reserved
        fits = total + need <= max_bytes
        ranked = [] if fits else sorted((rank, k) for k, (_, used) in entries.items()
                                        if priority is not None and (rank := priority(k, used)) is not None)
        for _, k in ranked:
            fd = locks.try_exclusive(layout.lock(k))
            if fd is None:
                continue  # open in a reader or being fetched
            try:
                clear(k)
            finally:
                os.close(fd)
            evicted += 1
            total -= entries[k][0]
            if total + need <= max_bytes:
                fits = True
                break
        if fits:  # claimed before the lock is let go: concurrent fetches cannot overrun the limit together
            locks.reserve(layout, fetching, need)
        return fits, evicted
