"""Recycled output memory for batch building: arrays whose pages are already mapped.

Batches are built a group of steps at a time into arrays of a few MiB. glibc serves
blocks that large with fresh ``mmap`` pages (or trims them back to the OS when they are
freed), so every group paid a page fault per 4 KiB it wrote: on issue 9's workload that
was a third of the reader's CPU (0.4 of 1.15 CPU-s an epoch), and a per-batch loader
whose small arrays stay on the heap does not pay it. :func:`empty` hands out views of
blocks that return to a small pool when the last array (or tensor) viewing them dies.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["empty", "pool", "POOL_BYTES"]

POOL_BYTES = 256 << 20  # free blocks kept for reuse, at most (about what a few groups in flight use)


class _Block(np.ndarray):
    """A view of a pooled block; arrays built on it keep it alive (NumPy stops collapsing
    a view's ``base`` at a change of type), so its death means the block is free."""


class _Pool:
    """Free raw uint8 blocks, mapped and not in use, and their total size (kept, not summed:
    a release runs for every array a batch frees)."""

    def __init__(self) -> None:
        # Re-entrant: any allocation under the lock (in take) may run the garbage collector, whose
        # finalizers call release on this same thread (a plain Lock deadlocked the reader's I/O thread).
        self.lock = threading.RLock()
        self.free: list[np.ndarray] = []
        self.nbytes = 0

    def release(self, raw: np.ndarray) -> None:
        with self.lock:
            if self.nbytes + raw.nbytes <= POOL_BYTES:
                self.free.append(raw)
                self.nbytes += raw.nbytes

    def take(self, nbytes: int) -> np.ndarray:
        with self.lock:
            fits = [i for i, b in enumerate(self.free) if nbytes <= b.nbytes <= 4 * nbytes + (1 << 20)]
            if fits:
                raw = self.free.pop(min(fits, key=lambda i: self.free[i].nbytes))
                self.nbytes -= raw.nbytes
                return raw
        return np.empty(nbytes + nbytes // 4, dtype=np.uint8)  # headroom: the next group's widths differ

    def clear(self) -> None:
        with self.lock:
            self.free, self.nbytes = [], 0


pool = _Pool()


def empty(shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array on recycled memory (like ``np.empty``).

    Example:
        >>> a = empty((2, 3), np.int64)
        >>> a.fill(7); a.sum(), a.flags.c_contiguous
        (np.int64(42), True)
    """
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = pool.take(max(count * dtype.itemsize, 1))
    block = raw.view(_Block)
    weakref.finalize(block, pool.release, raw)
    out: np.ndarray = block[: count * dtype.itemsize].view(np.ndarray).view(dtype).reshape(shape)
    return out
