"""One iteration's chain of stages, and the counters the status line is made of.

    [CacheFiller: remote -> local cache, background threads]
    ChunkSource --(I/O thread, raw queue)--> Batcher (batch-building threads) --> [Transformer] --> consumer
"""

from __future__ import annotations

import atexit
import time
import weakref
from typing import Any

import numpy as np
import torch

from prep.errors import PrepError
from prep.reader.batch import Batch
from prep.reader.layouts.materialized import Materialized
from prep.reader.options import ReaderOptions
from prep.reader.stages.batcher import Batcher
from prep.reader.stages.cached import CachedLayout, CacheFiller, cache_counters
from prep.reader.stages.prefetch import Prefetcher
from prep.reader.schedule import Schedule
from prep.reader.stages.source import ChunkSource
from prep.reader.stage import EPOCH_KEY, STEP_KEY, Layout, SplitOpener, Stage
from prep.reader.spec import CollateSpec
from prep.reader.stats import StatsSnapshot
from prep.reader.stages.transform import Transformer
from prep.plan.order import Share

__all__ = ["Pipeline"]

_OPEN: "weakref.WeakSet[Pipeline]" = weakref.WeakSet()


@atexit.register
def _shut_open() -> None:
    """Shuts down the pipelines still open at interpreter exit, while every module is whole.

    An iterator left open (a trainer that exits mid-epoch) is otherwise closed when the interpreter
    wipes the globals of the module holding it, which can come after the globals of the modules its
    shutdown runs (``concurrent.futures``, this package) were set to None: Python 3.12 printed
    ``AttributeError: 'NoneType' object has no attribute 'Empty'`` from the batcher's thread pool.
    That later close finds the pipeline shut and returns at once.
    """
    for pipeline in list(_OPEN):
        pipeline.shutdown()


class Pipeline:
    """Builds the stages for one pass from ``start`` and counts what the consumer takes.

    A :class:`~prep.reader.stage.Stage` itself: its state is its last stage's (the position
    after the last batch returned).

    Args:
        layout: the materialized output (or on-the-fly plan).
        schedule: the steps being read.
        share: the rank's rows of each step.
        spec: how rows become tensors.
        options: the reader's knobs (threads, queue depths, transform, pinning).
        start: ``(epoch, step)`` to start at.
        worker: this DataLoader worker (0 without workers).
        num_workers: DataLoader workers (1 without workers).
        max_steps: steps per read once reads have ramped up.
        fetch: the reader cache's fetch stage (reads go through the cache), or None.
    """

    def __init__(self, *, layout: Layout, schedule: Schedule, share: Share, spec: CollateSpec, options: ReaderOptions,
                 start: tuple[int, int], worker: int = 0, num_workers: int = 1, max_steps: int = 64,
                 fetch: CacheFiller | None = None) -> None:
        self.fetch = fetch
        opener: SplitOpener = layout
        if fetch is not None:
            if not isinstance(layout, Materialized):  # the dataset refuses cache_dir for a plan over a table first
                raise PrepError(f"the reader cache holds a materialized output's splits, and {layout.uri} is not one")
            opener = CachedLayout(layout, fetch)
        self.source = ChunkSource(layout=opener, schedule=schedule, share=share, columns=spec.columns,
                                  worker=worker, num_workers=num_workers, max_steps=max_steps)
        self.io = Prefetcher(self.source, depth=options.raw_chunks, name="reader I/O", size=lambda c: c.num_rows)
        self.batcher = Batcher(self.io, schedule=schedule, spec=spec, threads=options.batch_threads,
                               pin_memory=options.pin_memory and torch.cuda.is_available(),
                               ahead=options.prefetch_batches)
        self.transformer = None if options.transform is None else \
            Transformer(self.batcher, options.transform, num_threads=options.transform_threads)
        self.last: Stage[Batch] = self.transformer or self.batcher
        self._schedule, self._local_rows, self._worker, self._num_workers = \
            schedule, share.local_batch_size, worker, num_workers
        self._source_rows, self._source_tokens = np.zeros(spec.sources, np.int64), np.zeros(spec.sources, np.int64)
        self._shut = False
        _OPEN.add(self)
        self.reset({EPOCH_KEY: start[0], STEP_KEY: start[1]})

    def reset(self, initial_state: dict[str, int] | None) -> None:
        """Seeks every stage to ``initial_state`` (None: the first step) and restarts the counters."""
        self.last.reset(initial_state)
        start = 0 if initial_state is None else self._schedule.index(initial_state[EPOCH_KEY], initial_state[STEP_KEY])
        self._to_read = len(range(start + self._worker, self._schedule.total, self._num_workers)) * self._local_rows \
            + self.source.rows_read
        self._started = time.perf_counter()
        self._first: float | None = None
        self._wait, self._rows, self._tokens, self._batches = 0.0, 0, 0, 0
        self._source_rows[:] = 0
        self._source_tokens[:] = 0

    def get_state(self) -> dict[str, Any]:
        return self.last.get_state()

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
        if batch.source_rows is not None and batch.source_tokens is not None:
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
        """Stops every stage's threads; again, a no-op that reads no module global (:func:`_shut_open`)."""
        if self._shut:
            return
        self._shut = True
        _OPEN.discard(self)
        self.last.shutdown()
        if self.fetch is not None:
            self.fetch.shutdown()
