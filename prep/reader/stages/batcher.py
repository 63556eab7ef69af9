"""Stage: cut read chunks into local batches, groups of steps at a time, on a small thread pool.

Batches are built for a group of steps at once (about :data:`GROUP_BYTES` of
input), which keeps the per-batch Python down to a handful of calls (see
:mod:`prep.reader.collate`). Groups are built by ``threads`` threads at once (NumPy
releases the GIL in its kernels) and handed on in step order, straight to the
consumer's thread: a queue hop per batch (another thread, its locks and wake-ups)
cost more CPU than building a small batch. The state is the position after the last
batch returned; resetting seeks the source to that same position, so a chunk never
has to be replayed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from prep.errors import PrepError
from prep.reader.batch import Batch
from prep.reader.collate import collate_steps, source_counts
from prep.reader.schedule import Schedule
from prep.reader.stages.source import RawChunk
from prep.reader.stage import EPOCH_KEY, STEP_KEY, ReaderError, Stage
from prep.reader.spec import CollateSpec

__all__ = ["Batcher", "GROUP_BYTES"]

GROUP_BYTES = 1 << 20  # input bytes per collate group: enough to amortize the Python, outputs stay in cache


class Batcher:
    """Turns :class:`~prep.reader.stages.source.RawChunk` items into :class:`~prep.reader.batch.Batch` items.

    Args:
        source: a stage yielding raw chunks (normally the I/O :class:`~prep.reader.stages.prefetch.Prefetcher`).
        schedule: the steps being read (to name the position after a batch).
        spec: how rows become tensors.
        pin_memory: copy each batch into pinned host memory (for fast, asynchronous GPU copies).
        threads: groups built at once (default 2).
        ahead: batches built or being built ahead of the consumer, at least (default 4).
    """

    def __init__(self, source: Stage[RawChunk], *, schedule: Schedule, spec: CollateSpec, pin_memory: bool = False,
                 threads: int = 2, ahead: int = 4) -> None:
        if threads < 1 or ahead < 1:
            raise PrepError(f"batch building: {threads=} and {ahead=} must be >= 1")
        self._source, self._schedule, self._spec, self._pin = source, schedule, spec, pin_memory
        self._threads, self._ahead = threads, ahead
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.collate_s = 0.0
        self.pending_rows = 0
        self.reset(None)

    def reset(self, initial_state: dict[str, int] | None) -> None:
        """Seeks the source to ``initial_state`` and drops the chunk and groups in hand."""
        self._drop()
        self._source.reset(initial_state)
        self._state: dict[str, int] = self._source.get_state()

    def next(self) -> Batch:
        """The next local batch. Raises StopIteration after the last."""
        while not self._ready:
            self._submit(wait=not self._inflight)
            if not self._inflight:
                raise StopIteration
            future, steps = self._inflight.popleft()
            self._steps_inflight -= steps
            try:
                built = future.result()
            except Exception as exc:
                raise ReaderError(f"building batches failed: {type(exc).__name__}: {exc}") from exc
            self._ready.extend(built)
            self.ready_rows += sum(batch.num_rows for batch in built)
        batch = self._ready.popleft()
        self.pending_rows -= batch.num_rows
        self.ready_rows -= batch.num_rows
        epoch, step = self._schedule.position(self._schedule.index(batch.epoch, batch.step) + 1)
        self._state = {EPOCH_KEY: epoch, STEP_KEY: step}
        self._submit(wait=False)  # keep the pool busy while the consumer works, never waiting on I/O
        return batch

    def get_state(self) -> dict[str, int]:
        return self._state

    def shutdown(self) -> None:
        self._drop()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._source.shutdown()

    def _drop(self) -> None:
        for future, _ in getattr(self, "_inflight", ()):
            future.cancel()
        self._inflight: deque[tuple[Future[list[Batch]], int]] = deque()
        self._ready: deque[Batch] = deque()
        self._chunk: RawChunk | None = None
        self._next, self._exhausted, self.pending_rows, self.ready_rows, self._steps_inflight = 0, False, 0, 0, 0

    def _submit(self, wait: bool) -> None:
        """Starts building groups until ``threads`` groups and ``ahead`` batches are in the works
        (or the source is exhausted). Waits for a read only when ``wait`` (nothing else to hand
        out), and for one at most, so a consumer with a batch ready never waits on I/O."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="reader-batch")
        pool = self._pool
        while (len(self._inflight) < self._threads or self._steps_inflight + len(self._ready) < self._ahead) \
                and not self._exhausted:
            if self._chunk is None or self._next == len(self._chunk.steps):
                if not wait and not getattr(self._source, "has_next", lambda: True)():
                    return
                wait = False
                try:
                    self._chunk, self._next = self._source.next(), 0
                except StopIteration:
                    self._exhausted, self._chunk = True, None
                    return
                self.pending_rows += self._chunk.num_rows
            chunk, start = self._chunk, self._next
            per_step = max(1, chunk.nbytes // len(chunk.steps))
            self._next = min(len(chunk.steps), start + max(1, GROUP_BYTES // per_step))
            self._inflight.append((pool.submit(self._build, chunk, start, self._next), self._next - start))
            self._steps_inflight += self._next - start

    def _build(self, chunk: RawChunk, start: int, stop: int) -> list[Batch]:
        started = time.perf_counter()
        out = []
        rows, tokens = source_counts(chunk.rows, start, stop, self._spec) if self._spec.sources else (None, None)
        for j, (tensors, ids, num_tokens) in enumerate(collate_steps(chunk.rows, start, stop, self._spec), start=start):
            mix = {} if rows is None or tokens is None else {"source_rows": rows[j - start], "source_tokens": tokens[j - start]}
            batch = Batch.make(tensors, epoch=chunk.epoch, step=int(chunk.steps[j]), ids=ids, num_tokens=num_tokens, **mix)
            out.append(batch.pin_memory() if self._pin else batch)
        with self._lock:
            self.collate_s += time.perf_counter() - started
        return out
