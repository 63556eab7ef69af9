"""The reader's two-stage I/O: a fetch stage fills a local cache while batches are served.

``ReaderDataset(..., cache_dir=DIR)`` wraps the materialized output in a :class:`CachedLayout`:

* a split whose verified copy is in the cache (:class:`prep.cache.store.SplitCache`) is read from
  local disk, under a lease that keeps every process from evicting it;
* any other split is read from the remote at first, while the fetch stage, :class:`CacheFiller`
  (background threads, large whole-object GETs; it runs beside the item stages, not as one),
  copies it; the next read after the copy is verified switches to local disk, so training starts at once and the epoch becomes local as it goes;
* the stage fetches in reading order, this epoch's splits first, then the next epochs'
  (look-ahead), as far as ``cache_max_bytes`` allows: to make room it evicts copies of
  consumed epochs and copies nobody reads now (least recently used first), then copies
  needed later than the one it fetches (farthest first), never one in use.

``prep prewarm`` is the same fetch, run ahead of time for a rank.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from prep.cache.locks import ReadLease
from prep.cache.store import Key, Priority, SplitCache
from prep.errors import PrepError, one_line
from prep.reader.layouts.materialized import Materialized
from prep.reader.workers import forksafe
from prep.reader.stages.source import SplitTable

__all__ = ["CacheFiller", "CachedLayout", "CachedSplit", "cache_counters"]

log = logging.getLogger(__name__)


class CacheFiller:
    """Background threads copying the rank's splits into the cache, in the order they will be read.

    Args:
        cache: the cache to fill.
        epochs: the epochs still to read, in reading order (the first is the current one).
        splits: the rank's splits.
        threads: splits fetched at once.
    """

    def __init__(self, cache: SplitCache, epochs: tuple[int, ...], splits: range, threads: int = 2) -> None:
        self.cache = cache
        self._order: list[Key] = [(e, s) for e in epochs for s in splits]
        self._epoch_pos = {e: i for i, e in enumerate(epochs)}
        self._index = {k: i for i, k in enumerate(self._order)}
        self._state: dict[Key, str] = {k: "pending" for k in self._order}  # pending, taken, done, failed
        self._current = 0  # position of the epoch being read in ``epochs``
        self._blocked_at: int | None = None  # the current position when the cache last had no room
        self._cond = threading.Condition()
        self._stopped = False
        self.failures = 0
        self._threads = [threading.Thread(target=self._run, name=f"reader-fetch-{i}", daemon=True)
                         for i in range(max(1, threads))]
        for t in self._threads:
            t.start()

    def advance(self, epoch: int) -> None:
        """The reader opened ``epoch``: earlier epochs are consumed, their copies evict first."""
        with self._cond:
            pos = self._epoch_pos.get(epoch, self._current)
            if pos != self._current:
                self._current = pos
                self._cond.notify_all()

    def ready(self, key: Key) -> bool:
        """Whether the stage has copied ``key`` (in this process)."""
        with self._cond:
            return self._state.get(key) == "done"

    def _take(self) -> Key | None:
        with self._cond:
            while not self._stopped:
                if self._blocked_at is None or self._blocked_at != self._current:
                    self._blocked_at = None
                    for k in self._order[self._first_of_current():]:
                        if self._state[k] == "pending":
                            self._state[k] = "taken"
                            return k
                    if all(v in ("done", "failed") for v in self._state.values()):
                        return None
                self._cond.wait(timeout=1.0)
            return None

    def _first_of_current(self) -> int:
        return next((i for i, (e, _) in enumerate(self._order) if self._epoch_pos[e] >= self._current), len(self._order))

    def _priority(self, fetching: Key) -> Priority:
        at = self._index[fetching]

        def rank(key: Key, used: float) -> tuple[float, float] | None:
            idx = self._index.get(key)
            if idx is None or self._epoch_pos[key[0]] < self._current:
                return (0, used)  # not read in this run, or its epoch is consumed: least recently used first
            if idx > at and self._epoch_pos[key[0]] > self._current:
                return (1, -idx)  # needed, but later than the split being fetched: farthest first
            return None  # the current epoch, or needed sooner: never

        return rank

    def _run(self) -> None:
        while (key := self._take()) is not None:
            try:
                ok = self.cache.fetch(key, self._priority(key))
            except PrepError as exc:  # the reader reads this split from the remote and reports there
                log.warning("reader cache: %s", one_line(exc))
                ok, state = False, "failed"
                self.failures += 1
            else:
                state = "done" if ok else "pending"
            with self._cond:
                self._state[key] = state
                if not ok and state == "pending":
                    self._blocked_at = self._current  # no room until the reader moves on
                self._cond.notify_all()

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        self.cache.fetcher.shutdown()
        self.cache.close()


class CachedSplit:
    """One split of one epoch: local when its copy is in the cache, remote until the fetch stage copies it."""

    @staticmethod
    def read_splits(splits: list[CachedSplit], rows: list[np.ndarray], pool: ThreadPoolExecutor) -> tuple[pa.Table, None]:
        """As :meth:`SplitTable.read_splits` (each split reads from wherever it is now)."""
        return SplitTable.read_splits(splits, rows, pool)

    def __init__(self, key: Key, stage: CacheFiller, expected_rows: int, columns: list[str],
                 open_remote: Callable[[], SplitTable]) -> None:
        self._key, self._stage, self._rows, self._columns = key, stage, expected_rows, columns
        self._open_remote = open_remote
        self._lease: ReadLease | None = None
        self._table: SplitTable | None = None
        self._local = self._try_local()

    def _try_local(self) -> bool:
        lease = self._stage.cache.acquire(self._key)
        if lease is None:
            return False
        forksafe.forget(lease.path)  # the copy may be new since this process last opened that path
        self._table = SplitTable.open(lease.path, expected_rows=self._rows, columns=self._columns)
        self._lease = lease
        return True

    def read(self, rows: np.ndarray) -> pa.Table:
        if not self._local and self._stage.ready(self._key):
            self._local = self._try_local()
        if self._table is None:
            self._table = self._open_remote()
        return self._table.read(rows)


class CachedLayout:
    """A materialized output read through the cache (the reader's :class:`~prep.reader.stages.source.Layout`)."""

    def __init__(self, layout: Materialized, stage: CacheFiller) -> None:
        self._layout, self.stage = layout, stage

    def open_split(self, epoch: int, split: int, columns: list[str]) -> CachedSplit:
        self.stage.advance(epoch)
        return CachedSplit((epoch, split), self.stage, int(self._layout.split_rows[epoch][split]), columns,
                           lambda: self._layout.open_split(epoch, split, columns))


def cache_counters(stage: CacheFiller) -> dict[str, Any]:
    """The cache's counters as :class:`~prep.reader.stats.StatsSnapshot` fields."""
    c, f = stage.cache, stage.cache.fetcher.counters()
    return {"cache_hits": c.hits, "cache_misses": c.misses, "cache_evictions": c.evictions, "cache_damaged": c.damaged,
            "fetched_bytes": f.bytes, "fetched_objects": f.objects, "fetch_retries": f.retries,
            "fetch_throttled": f.throttled, "fetch_failures": stage.failures, "fetch_object_s": f.fetch_s}
