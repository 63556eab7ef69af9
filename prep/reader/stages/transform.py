"""Stage: apply an optional user ``transform`` to batches on a thread pool, in order.

Up to ``max_inflight`` batches are being transformed at once; results come back in
the order their batches arrived. The state handed on with each result is the
source's state snapshotted when that batch was taken, so it describes what the
consumer received. A failure is raised in the consumer naming the batch it hit.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from prep.errors import PrepError
from prep.reader.batch import Batch
from prep.reader.stage import ReaderError, Stage

__all__ = ["Transformer"]


class Transformer:
    """Runs ``fn(batch) -> batch`` on ``num_threads`` threads.

    NumPy and torch release the GIL in their kernels, so threads (not processes) are
    enough for tensor transforms and share memory with the reader for free.

    Args:
        source: a stage yielding :class:`~prep.reader.batch.Batch` items.
        fn: the transform; it returns a dict of tensors (a plain dict is wrapped back
            into a :class:`Batch` carrying the input's epoch/step/ids).
        num_threads: pool size.
        max_inflight: batches submitted ahead of the consumer (default ``2 * num_threads``).
    """

    def __init__(self, source: Stage[Batch], fn: Callable[[Batch], dict[str, Any]], *, num_threads: int = 2, max_inflight: int | None = None) -> None:
        if num_threads < 1:
            raise PrepError(f"transform: {num_threads=} must be >= 1")
        self._source, self._fn, self._num_threads = source, fn, num_threads
        self._max_inflight = max_inflight or 2 * num_threads
        self._pool: ThreadPoolExecutor | None = None
        self.transform_s = 0.0
        self._lock = threading.Lock()
        self.reset(None)

    @property
    def inflight_rows(self) -> int:
        return sum(rows for _, _, rows in self._inflight)

    def reset(self, initial_state: dict[str, Any] | None) -> None:
        self._drop_inflight()
        self._source.reset(initial_state)
        self._state = self._source.get_state()
        self._exhausted = False

    def next(self) -> Batch:
        """The next transformed batch. Raises StopIteration after the last."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._num_threads, thread_name_prefix="reader-transform")
        while not self._exhausted and len(self._inflight) < self._max_inflight:
            try:
                batch = self._source.next()
            except StopIteration:
                self._exhausted = True
                break
            self._inflight.append((self._pool.submit(self._apply, batch), self._source.get_state(), batch.num_rows))
        if not self._inflight:
            raise StopIteration
        future, state, _ = self._inflight.popleft()
        result = future.result()
        self._state = state
        return result

    def get_state(self) -> dict[str, Any]:
        return self._state

    def shutdown(self) -> None:
        self._drop_inflight()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._source.shutdown()

    def _drop_inflight(self) -> None:
        for future, _, _ in getattr(self, "_inflight", ()):
            future.cancel()
        self._inflight: collections.deque[tuple[Future[Batch], dict[str, Any], int]] = collections.deque()

    def _apply(self, batch: Batch) -> Batch:
        started = time.perf_counter()
        try:
            out = self._fn(batch)
        except Exception as exc:
            raise ReaderError(f"transform failed on epoch {batch.epoch} step {batch.step}: "
                              f"{type(exc).__name__}: {exc}") from exc
        finally:
            with self._lock:
                self.transform_s += time.perf_counter() - started
        if isinstance(out, Batch):
            return out
        if not isinstance(out, dict):
            raise ReaderError(f"transform returned {type(out).__name__} on epoch {batch.epoch} step {batch.step}; "
                              "it must return a dict of tensors")
        return Batch.make(out, epoch=batch.epoch, step=batch.step, ids=batch.ids, num_tokens=batch.num_tokens,
                          source_rows=batch.source_rows, source_tokens=batch.source_tokens)
