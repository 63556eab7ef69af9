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

import os
import queue
import threading
from collections import deque
from typing import Any

__all__ = ["Retiring"]

_QUEUE: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
_THREAD: threading.Thread | None = None
_PID = 0  # the process whose thread _THREAD is: a forked child has none (only the forking thread survives)
_START = threading.Lock()
_ORPHANED: list[Any] = []  # a forked child's inherited queue, kept: the parent's thread waited on its lock


def _drop_forever() -> None:
    while True:
        _QUEUE.get()  # dropped at once, the last reference in most loops: the batch's memory is freed here


def _drop_later(item: Any) -> None:
    """Hands ``item`` to this process's thread that drops references (started on first use, and again in a
    forked child that uses it: nothing is done at fork time, so a child that never does pays nothing)."""
    global _QUEUE, _THREAD, _PID
    if _PID != os.getpid():
        with _START:
            if _PID != os.getpid():
                if _THREAD is not None:  # inherited from the parent, without its thread
                    _ORPHANED.append(_QUEUE)
                    _QUEUE = queue.SimpleQueue()
                _THREAD = threading.Thread(target=_drop_forever, name="reader release", daemon=True)
                _THREAD.start()
                _PID = os.getpid()
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
