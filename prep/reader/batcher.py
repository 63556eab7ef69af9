"""Stage: cut read chunks into local batches, a group of steps at a time.

Batches are built for a group of steps at once (about :data:`GROUP_BYTES` of
input), which keeps the per-batch Python down to a handful of calls (see
:mod:`prep.reader.collate`). Its state is the position after the last batch it
returned; resetting it seeks its source to that same position, so a chunk never
has to be replayed.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from prep.reader.batch import Batch
from prep.reader.collate import collate_steps
from prep.reader.schedule import Schedule
from prep.reader.source import EPOCH_KEY, STEP_KEY, RawChunk
from prep.reader.spec import CollateSpec

__all__ = ["Batcher", "GROUP_BYTES"]

GROUP_BYTES = 1 << 20  # input bytes per collate group: enough to amortize the Python, outputs stay in cache


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
        self._built: deque[Batch] = deque()
        self._next = 0
        self.pending_rows = 0

    def next(self) -> Batch:
        """The next local batch. Raises StopIteration after the last."""
        if not self._built:
            self._build_group()
        batch = self._built.popleft()
        self.pending_rows -= batch.num_rows
        epoch, step = self._schedule.position(self._schedule.index(batch.epoch, batch.step) + 1)
        self._state = {EPOCH_KEY: epoch, STEP_KEY: step}
        return batch

    def get_state(self) -> dict[str, int]:
        return self._state

    def shutdown(self) -> None:
        self._chunk = None
        self._built.clear()
        self._source.shutdown()

    def _build_group(self) -> None:
        if self._chunk is None or self._next == len(self._chunk.steps):
            self._chunk, self._next = self._source.next(), 0
            self.pending_rows = self._chunk.num_rows
        chunk = self._chunk
        started = time.perf_counter()
        per_step = max(1, chunk.nbytes // len(chunk.steps))
        stop = min(len(chunk.steps), self._next + max(1, GROUP_BYTES // per_step))
        b = self._schedule.rows_per_split_step
        for j, (tensors, ids, num_tokens) in enumerate(collate_steps(chunk.parts, self._next, stop, b, self._spec),
                                                        start=self._next):
            batch = Batch.make(tensors, epoch=chunk.epoch, step=int(chunk.steps[j]), ids=ids, num_tokens=num_tokens)
            self._built.append(batch.pin_memory() if self._pin else batch)
        self._next = stop
        if self._next == len(chunk.steps):
            self._chunk = None  # the built batches keep what they need; drop the rest of the chunk
        self.collate_s += time.perf_counter() - started
