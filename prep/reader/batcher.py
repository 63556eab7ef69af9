"""Stage: cut read chunks into local batches (one :func:`~prep.reader.collate.collate` each).

Its state is the position after the last batch it returned; resetting it seeks
its source to that same position, so a chunk never has to be replayed.
"""

from __future__ import annotations

import time
from typing import Any

from prep.reader.batch import Batch
from prep.reader.collate import CollateSpec, collate
from prep.reader.schedule import Schedule
from prep.reader.source import EPOCH_KEY, STEP_KEY, RawChunk

__all__ = ["Batcher"]


class Batcher:
    """Turns :class:`~prep.reader.source.RawChunk` items into :class:`~prep.reader.batch.Batch` items.

    Args:
        source: a stage yielding raw chunks (normally the I/O :class:`~prep.reader.prefetch.Prefetcher`).
        schedule: the steps being read (to name the position after a batch).
        spec: how rows become tensors.
        pin_memory: copy each batch into pinned host memory (for fast, asynchronous GPU copies).
    """

    def __init__(self, source: Any, *, schedule: Schedule, spec: CollateSpec, pin_memory: bool = False) -> None:
        self._source, self._schedule, self._spec, self._pin = source, schedule, spec, pin_memory
        self.collate_s = 0.0
        self.pending_rows = 0
        self.reset(None)

    def reset(self, initial_state: dict[str, int] | None) -> None:
        """Seeks the source to ``initial_state`` and drops the chunk in hand."""
        self._source.reset(initial_state)
        self._state = self._source.get_state()
        self._chunk: RawChunk | None = None
        self._next = 0
        self.pending_rows = 0

    def next(self) -> Batch:
        """The next local batch. Raises StopIteration after the last."""
        if self._chunk is None or self._next == len(self._chunk.steps):
            self._chunk, self._next = self._source.next(), 0
            self.pending_rows = self._chunk.num_rows
        chunk, j = self._chunk, self._next
        started = time.perf_counter()
        b = self._schedule.rows_per_split_step
        tensors, ids, num_tokens = collate(chunk.parts, j * b, (j + 1) * b, self._spec)
        step = int(chunk.steps[j])
        batch = Batch.make(tensors, epoch=chunk.epoch, step=step, ids=ids, num_tokens=num_tokens)
        if self._pin:
            batch = batch.pin_memory()
        self.collate_s += time.perf_counter() - started
        self._next += 1
        self.pending_rows -= len(ids)
        epoch, nxt = self._schedule.position(self._schedule.index(chunk.epoch, step) + 1)
        self._state = {EPOCH_KEY: epoch, STEP_KEY: nxt}
        if self._next == len(chunk.steps):
            self._chunk = None  # release the chunk's buffers as soon as its last batch is out
        return batch

    def get_state(self) -> dict[str, int]:
        return self._state

    def shutdown(self) -> None:
        self._chunk = None
        self._source.shutdown()
