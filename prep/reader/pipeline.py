"""One iteration's chain of stages, and the counters the status line is made of.

    [FetchStage: remote -> local cache, background threads]
    ChunkSource --(I/O thread, raw queue)--> Batcher (batch-building threads) --> [Transformer] --> consumer
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from prep.reader.batch import Batch
from prep.reader.batcher import Batcher
from prep.reader.cached import CachedLayout, FetchStage, cache_counters
from prep.reader.prefetch import Prefetcher
from prep.reader.schedule import Schedule
from prep.reader.source import EPOCH_KEY, STEP_KEY, ChunkSource
from prep.reader.spec import CollateSpec
from prep.reader.stats import StatsSnapshot
from prep.reader.transform import Transformer

__all__ = ["Pipeline"]


class Pipeline:
    """Builds the stages for one pass from ``start`` and counts what the consumer takes.

    Args:
        layout: the materialized output (or on-the-fly plan).
        schedule: the steps being read.
        splits: the rank's splits.
        spec: how rows become tensors.
        start: ``(epoch, step)`` to start at.
        worker: this DataLoader worker (0 without workers).
        num_workers: DataLoader workers (1 without workers).
        max_steps: steps per read once reads have ramped up.
        raw_chunks: reads queued ahead of batching.
        prefetch_batches: batches built ahead of the consumer, at least.
        pin_memory: build batches in pinned memory.
        batch_threads: threads building batches.
        transform: optional ``fn(batch) -> dict``, on ``transform_threads`` threads.
        transform_threads: pool size for ``transform``.
        fetch: the reader cache's fetch stage (reads go through the cache), or None.
    """

    def __init__(self, *, layout: Any, schedule: Schedule, splits: range, spec: CollateSpec, start: tuple[int, int],
                 worker: int, num_workers: int, max_steps: int, raw_chunks: int, prefetch_batches: int,
                 pin_memory: bool, batch_threads: int, transform: Callable[[Batch], dict] | None, transform_threads: int,
                 fetch: FetchStage | None = None) -> None:
        self.fetch = fetch
        if fetch is not None:
            layout = CachedLayout(layout, fetch)
        self.source = ChunkSource(layout=layout, schedule=schedule, splits=splits, columns=spec.columns,
                                  worker=worker, num_workers=num_workers, max_steps=max_steps)
        self.io = Prefetcher(self.source, depth=raw_chunks, name="reader I/O", size=lambda c: c.num_rows)
        self.batcher = Batcher(self.io, schedule=schedule, spec=spec, pin_memory=pin_memory, threads=batch_threads,
                               ahead=prefetch_batches)
        self.transformer = None if transform is None else Transformer(self.batcher, transform, num_threads=transform_threads)
        self.last: Any = self.transformer or self.batcher
        self.last.reset({EPOCH_KEY: start[0], STEP_KEY: start[1]})
        local_rows = schedule.rows_per_split_step * len(splits)
        self._to_read = len(range(schedule.index(*start) + worker, schedule.total, num_workers)) * local_rows
        self._started = time.perf_counter()
        self._first: float | None = None
        self._wait, self._rows, self._tokens, self._batches = 0.0, 0, 0, 0
        self._source_rows, self._source_tokens = np.zeros(spec.sources, np.int64), np.zeros(spec.sources, np.int64)

    def next(self) -> Batch:
        """The next batch (StopIteration at the end), timing how long the consumer waited."""
        waited = time.perf_counter()
        batch = self.last.next()
        now = time.perf_counter()
        self._wait += now - waited
        if self._first is None:
            self._first = now - self._started
        self._rows += batch.num_rows
        self._tokens += batch.num_tokens
        self._batches += 1
        if batch.source_rows is not None:
            self._source_rows += batch.source_rows
            self._source_tokens += batch.source_tokens
        return batch

    def snapshot(self) -> StatsSnapshot:
        """The counters now."""
        t = self.transformer
        return StatsSnapshot(
            wall_s=time.perf_counter() - self._started, first_batch_s=self._first, fetch_s=self.source.fetch_s,
            collate_s=self.batcher.collate_s, transform_s=t.transform_s if t else 0.0, wait_s=self._wait,
            bytes_read=self.source.bytes_read, rows_read=self.source.rows_read,
            unscanned_rows=max(0, self._to_read - self.source.rows_read),
            raw_rows=self.io.queued_rows + self.batcher.pending_rows,
            prefetched_rows=self.batcher.ready_rows + (t.inflight_rows if t else 0),
            consumed_rows=self._rows, consumed_tokens=self._tokens, consumed_batches=self._batches,
            source_rows=tuple(self._source_rows.tolist()), source_tokens=tuple(self._source_tokens.tolist()),
            **(cache_counters(self.fetch) if self.fetch is not None else {}))

    def shutdown(self) -> None:
        self.last.shutdown()
        if self.fetch is not None:
            self.fetch.shutdown()
