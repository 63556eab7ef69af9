"""Batches out of DataLoader worker processes in shipments: many steps, one shared buffer, one message.

A worker that hands each batch to the main process pays, per batch, a shared-memory
file descriptor sent over a socket, a pickle and a queue round trip (about 1 ms on a
loaded machine): at G = 32 on GSM8K rows that is more than building the batch, and it
held workers to a tenth of the in-process tokens/s. A :class:`Shipment` packs a worker's
next few steps (growing 1, 2, 4, ... to :data:`SHIPMENT_BYTES`) into ONE shared-memory
buffer, row ids included, with a small layout (offsets, dtypes, shapes, origin) beside it;
the main process cuts it back into batches that are views of that buffer.

Fresh shared memory costs more than the copy into it (``share_memory_`` copies, and every
page faults on both sides: 0.4 ms a batch at G = 32, against 0.006 ms to rewrite mapped
pages). So each worker keeps :data:`SLOTS` buffers and reuses one once the main process
has let go of it: a shared flag per (worker, slot), set by a finalizer when the last
batch viewing that shipment dies in the main process.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from prep.reader.batch import ORIGIN_FIELDS, Batch
from prep.reader.prefetch import ReaderError

__all__ = ["Shipment", "WorkerShipments", "in_step_order", "SHIPMENT_BYTES"]

SHIPMENT_BYTES = 8 << 20  # about how much one shipment carries once it has ramped up
SLOTS = 6  # reusable buffers per worker: the DataLoader's prefetch, the one being read and a few the consumer holds
_IDS = "\0ids"  # the rows' ids travel in the buffer under a key no tensor has


@dataclass(frozen=True)
class Shipment:
    """Consecutive steps of one worker: a shared uint8 buffer and, per batch, where its tensors lie in it.

    Attributes:
        buffer: one shared-memory storage (pickled as a file descriptor).
        layouts: per batch, ``{key: (offset, dtype, shape)}`` (the ids under a reserved key).
        origins: per batch, the origin fields other than ``ids``.
        worker: the worker that packed it.
        slot: the worker's buffer slot it lies in (-1: a buffer of its own, not reused).
    """

    buffer: torch.Tensor
    layouts: tuple[dict[str, tuple[int, torch.dtype, tuple[int, ...]]], ...]
    origins: tuple[dict[str, Any], ...]
    worker: int = 0
    slot: int = -1

    @classmethod
    def pack(cls, batches: list[Batch], pool: "_Pool | None" = None) -> "Shipment":
        """Copies ``batches`` (tensors and ids) into one shared buffer (from ``pool`` if given), 8-byte aligned."""
        layouts, size = [], 0
        for batch in batches:
            layout = {}
            for key, value in [*batch.items(), (_IDS, torch.from_numpy(np.ascontiguousarray(batch.ids)))]:
                layout[key] = (size, value.dtype, tuple(value.shape))
                size += -(-value.numel() * value.element_size() // 8) * 8
            layouts.append(layout)
        buffer, worker, slot = pool.take(size) if pool is not None else (_shared(size), 0, -1)
        raw = buffer.numpy()
        for batch, layout in zip(batches, layouts):
            for key, (offset, _, _) in layout.items():
                data = batch.ids if key == _IDS else batch[key].numpy()
                flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
                raw[offset:offset + len(flat)] = flat
        origins = tuple({k: getattr(b, k) for k in ORIGIN_FIELDS if k != "ids"} for b in batches)
        return cls(buffer, tuple(layouts), origins, worker, slot)

    def unpack(self) -> list[Batch]:
        """The batches again, their tensors and ids views of the shared buffer."""
        out = []
        for layout, origin in zip(self.layouts, self.origins):
            tensors = {}
            for key, (offset, dtype, shape) in layout.items():
                n = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
                tensors[key] = self.buffer[offset:offset + n].view(dtype).view(shape)
            ids = tensors.pop(_IDS).numpy().view(np.uint64)
            out.append(Batch.make(tensors, ids=ids, **origin))
        return out


class WorkerShipments(IterableDataset):
    """What :class:`~prep.reader.Loader` gives its DataLoader workers: the reader, shipped in :class:`Shipment` s.

    Worker ``k`` of ``K`` builds steps ``k, k+K, ...``; its shipments grow from one step (a fast
    first batch) by x2 until one carries :data:`SHIPMENT_BYTES`. Shipments of different workers
    cover interleaved steps, so the receiver puts batches back in step order (:func:`in_step_order`).
    Tensors arrive C-contiguous (a channels-last image view arrives as a dense NCHW tensor).

    Args:
        dataset: the reader.
        num_workers: the DataLoader's worker processes.
    """

    def __init__(self, dataset: Any, num_workers: int) -> None:
        super().__init__()
        self.dataset = dataset
        self.released = torch.ones(num_workers, SLOTS, dtype=torch.int32).share_memory_()  # 1: free to reuse

    def __iter__(self) -> Iterator[Shipment]:
        info = get_worker_info()
        pool = _Pool(self.released, 0 if info is None else info.id)
        group: list[Batch] = []
        size, nbytes = 1, 0
        for batch in self.dataset.batches(share=False):
            group.append(batch)
            nbytes += sum(v.numel() * v.element_size() for v in batch.values())
            if len(group) == size:
                yield Shipment.pack(group, pool)
                if nbytes < SHIPMENT_BYTES:
                    size *= 2
                group, nbytes = [], 0
        if group:
            yield Shipment.pack(group, pool)


class _Pool:
    """One worker's reusable shared buffers; a slot is taken when the main process has let go of it."""

    def __init__(self, released: torch.Tensor, worker: int) -> None:
        self.flags, self.worker = released[worker].numpy(), worker
        self.buffers: list[torch.Tensor | None] = [None] * len(self.flags)

    def take(self, nbytes: int) -> tuple[torch.Tensor, int, int]:
        """``(buffer of at least nbytes, worker, slot)``; a fresh unpooled buffer (slot -1) when all are in use."""
        for slot, buffer in enumerate(self.buffers):
            if self.flags[slot] == 1:
                if buffer is None or buffer.numel() < nbytes:
                    buffer = self.buffers[slot] = _shared(nbytes + nbytes // 4)  # headroom: shipments vary
                self.flags[slot] = 0
                return buffer, self.worker, slot
        return _shared(nbytes), self.worker, -1


def _shared(nbytes: int) -> torch.Tensor:
    return torch.empty(max(nbytes, 8), dtype=torch.uint8).share_memory_()


def in_step_order(shipments: Iterator[Shipment], schedule: Any, start: tuple[int, int],
                  released: torch.Tensor) -> Iterator[Batch]:
    """The shipped batches one by one in step order from ``start`` (holding those that arrived early).

    Each pooled shipment's slot is flagged free in ``released`` once its buffer (which every
    tensor and ids array of its batches views) is garbage in this process.
    """
    early: dict[int, Batch] = {}
    expected = schedule.index(*start)
    flags = released.numpy()
    for shipment in shipments:
        if shipment.slot >= 0:
            weakref.finalize(shipment.buffer, flags.__setitem__, (shipment.worker, shipment.slot), 1)
        for batch in shipment.unpack():
            early[schedule.index(batch.epoch, batch.step)] = batch
        while expected in early:
            yield early.pop(expected)
            expected += 1
    if early:
        raise ReaderError(f"worker processes delivered steps {sorted(early)[:3]}... but never step {expected}")
