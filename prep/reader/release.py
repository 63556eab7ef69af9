"""Freeing the batches a trainer is done with, off the trainer's thread.

A batch's tensors wrap NumPy memory; a 256-image batch is 38 MB, allocated with
``mmap`` and returned with ``munmap`` when its last reference goes. In a training
loop that last reference goes at ``batch = next(batches)``: the trainer's thread
frees the previous batch, a few milliseconds each step in which it competes for
the GIL with the reader's threads building the next one (1 % of an image step,
``benchmarks/feed.py``). :class:`Retiring` keeps the loader's own reference to the
last two batches it yielded and drops the older one on a daemon thread when the
next is asked for, by which time the training loop has let go of it: the free
happens while the step's kernels run. A loop that keeps a batch longer still
holds it; that batch is then freed where the loop drops it, as before.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any

__all__ = ["Retiring"]

_QUEUE: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
_THREAD: threading.Thread | None = None
_START = threading.Lock()


def _drop_forever() -> None:
    while True:
        _QUEUE.get()  # dropped at once, the last reference in most loops: the batch's memory is freed here


def _drop_later(item: Any) -> None:
    """Hands ``item`` to the one process-wide thread that drops references (started on first use)."""
    global _THREAD
    if _THREAD is None:
        with _START:
            if _THREAD is None:
                _THREAD = threading.Thread(target=_drop_forever, name="reader release", daemon=True)
                _THREAD.start()
    _QUEUE.put(item)


class Retiring:
    """The batches a loader yielded in its last two steps; older ones are dropped on the release thread.

    One more batch stays alive than the loop itself holds (the one it let go of at its last
    ``next()``), until the loop asks for the next batch.
    """

    def __init__(self, keep: int = 2) -> None:
        self._kept: deque[Any] = deque()
        self._keep = keep

    def yielded(self, batch: Any) -> None:
        """Keeps ``batch``; hands the oldest kept one to the release thread once more than ``keep`` are kept."""
        self._kept.append(batch)
        while len(self._kept) > self._keep:
            _drop_later(self._kept.popleft())

    def clear(self) -> None:
        """Lets go of the kept batches here (the iteration ended: once, not every step; and
        no thread is started then, which could be at interpreter exit)."""
        self._kept.clear()
