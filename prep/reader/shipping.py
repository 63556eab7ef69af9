"""Batches out of DataLoader worker processes in shipments: many steps, one shared buffer, one message.

A worker that hands each batch to the main process pays, per batch, a shared-memory
file descriptor sent over a socket, a pickle and a queue round trip (about 1 ms on a
loaded machine): at G = 32 on GSM8K rows that is more than building the batch, and it
held workers to a tenth of the in-process tokens/s. A :class:`Shipment` packs a worker's
next few steps (growing 1, 2, 4, ... to :data:`SHIPMENT_BYTES`) into ONE shared-memory
buffer, row ids included, with a small layout (offsets, dtypes, shapes, origin) beside it;
the main process cuts it back into batches that are views of that buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset

from prep.reader.batch import ORIGIN_FIELDS, Batch
from prep.reader.prefetch import ReaderError

__all__ = ["Shipment", "WorkerShipments", "in_step_order", "SHIPMENT_BYTES"]

SHIPMENT_BYTES = 8 << 20  # about how much one shipment carries once it has ramped up
_IDS = "\0ids"  # the rows' ids travel in the buffer under a key no tensor has


@dataclass(frozen=True)
class Shipment:
    """Consecutive steps of one worker: a shared uint8 buffer and, per batch, where its tensors lie in it.

    Attributes:
        buffer: one shared-memory storage (pickled as a file descriptor).
        layouts: per batch, ``{key: (offset, dtype, shape)}`` (the ids under a reserved key).
        origins: per batch, the origin fields other than ``ids``.
    """

    buffer: torch.Tensor
    layouts: tuple[dict[str, tuple[int, torch.dtype, tuple[int, ...]]], ...]
    origins: tuple[dict[str, Any], ...]

    @classmethod
    def pack(cls, batches: list[Batch]) -> "Shipment":
        """Copies ``batches`` (tensors and ids) into one new shared buffer, 8-byte aligned."""
        layouts, size = [], 0
        for batch in batches:
            layout = {}
            for key, value in [*batch.items(), (_IDS, torch.from_numpy(np.ascontiguousarray(batch.ids)))]:
                layout[key] = (size, value.dtype, tuple(value.shape))
                size += -(-value.numel() * value.element_size() // 8) * 8
            layouts.append(layout)
        buffer = torch.empty(max(size, 8), dtype=torch.uint8).share_memory_()
        raw = buffer.numpy()
        for batch, layout in zip(batches, layouts):
            for key, (offset, _, _) in layout.items():
                data = batch.ids if key == _IDS else batch[key].numpy()
                flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
                raw[offset:offset + len(flat)] = flat
        origins = tuple({k: getattr(b, k) for k in ORIGIN_FIELDS if k != "ids"} for b in batches)
        return cls(buffer, tuple(layouts), origins)

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
    """

    def __init__(self, dataset: Any) -> None:
        super().__init__()
        self.dataset = dataset

    def __iter__(self) -> Iterator[Shipment]:
        group: list[Batch] = []
        size, nbytes = 1, 0
        for batch in self.dataset.batches(share=False):
            group.append(batch)
            nbytes += sum(v.numel() * v.element_size() for v in batch.values())
            if len(group) == size:
                yield Shipment.pack(group)
                if nbytes < SHIPMENT_BYTES:
                    size *= 2
                group, nbytes = [], 0
        if group:
            yield Shipment.pack(group)


def in_step_order(shipments: Iterator[Shipment], schedule: Any, start: tuple[int, int]) -> Iterator[Batch]:
    """The shipped batches one by one in step order from ``start`` (holding those that arrived early)."""
    early: dict[int, Batch] = {}
    expected = schedule.index(*start)
    for shipment in shipments:
        for batch in shipment.unpack():
            early[schedule.index(batch.epoch, batch.step)] = batch
        while expected in early:
            yield early.pop(expected)
            expected += 1
    if early:
        raise ReaderError(f"worker processes delivered steps {sorted(early)[:3]}... but never step {expected}")
