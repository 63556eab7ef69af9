"""Batches out of DataLoader worker processes in shipments: many steps, one shared buffer, one message.

A worker that hands each batch to the main process pays, per batch, a shared-memory
file descriptor sent over a socket, a pickle and a queue round trip (about 1 ms on a
loaded machine): at G = 32 on GSM8K rows that is more than building the batch, and it
held workers to a tenth of the in-process tokens/s. A :class:`Shipment` packs a worker's
next few steps (growing 1, 2, 4, ... to :data:`SHIPMENT_BYTES`) into ONE shared-memory
buffer, row ids included, with a small layout (offsets, dtypes, shapes, origin) beside it.

Fresh shared memory costs more than the copy into it (every page faults in both processes:
~0.4 ms a batch at G = 32, against ~0.006 ms to rewrite mapped pages), so each worker
writes into a ring of :data:`SLOTS` buffers it keeps, sending a buffer's file descriptor
only when the buffer is new. A buffer is rewritten only after the main process has COPIED
the shipment out of it into its own memory and released it (one semaphore per worker
counts its free buffers, :class:`Receiver`): no batch the consumer holds is a view of
memory a worker can rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generator, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from prep.reader.workers import lifeline
from prep.reader.batch import ORIGIN_FIELDS, Batch
from prep.reader.stages.prefetch import Prefetcher
from prep.errors import PrepError
from prep.reader.schedule import Schedule
from prep.reader.stage import ReaderError

if TYPE_CHECKING:  # both import this module
    from prep.reader.dataset import ReaderDataset
    from prep.reader.workers.handoff import Handoff

__all__ = ["Receiver", "Shipment", "Up", "WorkerShipments", "in_step_order", "ReceivedAhead", "SHIPMENT_BYTES", "SLOTS"]

SHIPMENT_BYTES = 8 << 20  # about how much one shipment carries once it has ramped up
SLOTS = 4  # shared buffers per worker: its prefetched shipments, the one it writes, one spare
_IDS = "\0ids"  # the rows' ids travel in the buffer under a key no tensor has


@dataclass(frozen=True)
class Shipment:
    """Consecutive steps of one worker: where they lie in one of its shared buffers.

    Attributes:
        worker: the DataLoader worker that sent it.
        slot: which of the worker's buffers (:data:`SLOTS` by default) holds it.
        buffer: that buffer (a shared uint8 storage, pickled as a file descriptor) when the
            receiver has not seen it yet, else None: the receiver keeps the ones it has seen.
        layouts: per batch, ``{key: (offset, nbytes, dtype, shape)}`` (the ids under a reserved key).
        origins: per batch, the origin fields other than ``ids``.
    """

    worker: int
    slot: int
    buffer: torch.Tensor | None
    layouts: tuple[dict[str, tuple[int, int, torch.dtype, tuple[int, ...]]], ...]
    origins: tuple[dict[str, Any], ...]

    def unpack(self, buffer: torch.Tensor) -> list[Batch]:
        """The batches again, each tensor and the ids a copy out of ``buffer`` into memory of this process.

        Copies, not views: ``buffer`` is rewritten by the worker. One copy per tensor (not one per
        shipment) keeps each allocation small enough for the allocator to reuse freed memory.
        """
        out, raw = [], buffer.numpy()
        for layout, origin in zip(self.layouts, self.origins):  # NumPy copies: a torch clone costs ~20 us more
            tensors = {key: torch.from_numpy(raw[offset:offset + n].copy()).view(dtype).view(shape)
                       for key, (offset, n, dtype, shape) in layout.items()}
            ids = tensors.pop(_IDS).numpy().view(np.uint64)
            out.append(Batch.make(tensors, ids=ids, **origin))
        return out


def _layouts(batches: list[Batch]) -> tuple[list[dict[str, tuple[int, int, torch.dtype, tuple[int, ...]]]], int]:
    """Where each batch's tensors (and ids) go in a buffer, 8-byte aligned, and the bytes in all."""
    layouts, size = [], 0
    for batch in batches:
        layout = {}
        for key, value in [*batch.items(), (_IDS, torch.from_numpy(np.ascontiguousarray(batch.ids)))]:
            n = value.numel() * value.element_size()
            layout[key] = (size, n, value.dtype, tuple(value.shape))
            size += -(-n // 8) * 8
        layouts.append(layout)
    return layouts, size


@dataclass(frozen=True)
class Up:
    """A worker's first item when it is to take over from the main process (:mod:`prep.reader.workers.handoff`)."""

    worker: int


class WorkerShipments(IterableDataset["Shipment | Up"]):
    """What :class:`~prep.reader.Loader` gives its DataLoader workers: the reader, shipped in :class:`Shipment` s.

    Worker ``k`` of ``K`` builds steps ``k, k+K, ...``; its shipments grow from one step (a fast
    first batch) by x2 until one carries :data:`SHIPMENT_BYTES`. Shipments of different workers
    cover interleaved steps, so the receiver puts batches back in step order (:func:`in_step_order`).
    Tensors arrive C-contiguous (a channels-last image view arrives as a dense NCHW tensor).

    Args:
        dataset: the reader.
        receiver: the main process's :class:`Receiver` (its semaphores travel to the workers).
        handoff: when given, the workers start where the main process hands off to them
            (:mod:`prep.reader.workers.handoff`), not at the dataset's position.
    """

    def __init__(self, dataset: ReaderDataset, receiver: "Receiver", handoff: Handoff | None = None) -> None:
        super().__init__()
        self.dataset, self.slots, self.free, self.closed = dataset, receiver.slots, receiver.free, receiver.closed
        self.handoff = handoff

    def __iter__(self) -> Iterator[Shipment | Up]:
        info = get_worker_info()
        if info is None:
            raise PrepError("WorkerShipments is iterated by DataLoader workers (Loader(num_workers>0)), not in the main process")
        worker = info.id
        if self.handoff is not None:
            lifeline.watch()  # a worker waiting for the handoff still ends with its trainer
            yield Up(worker)
            index = self.handoff.wait(self.closed)
            if index is None:  # the main process read to the end (or stopped) without handing off
                return
            self.dataset.start_at(index)
        buffers: list[torch.Tensor | None] = [None] * self.slots
        group: list[Batch] = []
        size, nbytes, sent = 1, 0, 0
        for batch in self.dataset.batches(share=False):
            group.append(batch)
            nbytes += sum(v.numel() * v.element_size() for v in batch.values())
            if len(group) == size:
                yield self._pack(group, worker, sent % self.slots, buffers)
                sent += 1
                if nbytes < SHIPMENT_BYTES:
                    size *= 2
                group, nbytes = [], 0
        if group:
            yield self._pack(group, worker, sent % self.slots, buffers)

    def _pack(self, batches: list[Batch], worker: int, slot: int, buffers: list[torch.Tensor | None]) -> Shipment:
        """Copies ``batches`` into buffer ``slot`` once the receiver has released it (a bigger new one if needed)."""
        while not self.free[worker].acquire(timeout=0.1):
            if self.closed.is_set():  # the receiver is gone and reads nothing more
                break
        layouts, size = _layouts(batches)
        buffer = buffers[slot]
        fresh = buffer is None or buffer.numel() < size
        if buffer is None or fresh:
            # pages never written cost nothing: room for a ramped-up shipment from the start, so the ramp reuses it
            buffer = buffers[slot] = torch.empty(max(size, SHIPMENT_BYTES * 2), dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        raw = buffer.numpy()
        for batch, layout in zip(batches, layouts):
            for key, (offset, _, _, _) in layout.items():
                data = batch.ids if key == _IDS else batch[key].numpy()
                flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
                raw[offset:offset + len(flat)] = flat
        origins = tuple({k: getattr(b, k) for k in ORIGIN_FIELDS if k != "ids"} for b in batches)
        return Shipment(worker, slot, buffer if fresh else None, tuple(layouts), origins)


class Receiver:
    """The main process's end: copies each shipment out of its worker's buffer, then frees the buffer.

    A worker fills its buffers in turn and gets them back in the order it sent them (one
    result queue, read as it arrives, copied out at once), so a semaphore that counts its
    free buffers is enough: the ``n``-th acquire returns once shipment ``n - slots`` is copied.

    Args:
        context: the workers' multiprocessing context (for the semaphores).
        num_workers: DataLoader worker processes.
        slots: shared buffers per worker (default :data:`SLOTS`).
    """

    def __init__(self, context: Any, num_workers: int, slots: int = SLOTS) -> None:
        self.slots = slots
        self.free = [context.Semaphore(slots) for _ in range(num_workers)]  # worker k's buffers it may rewrite
        self.closed = context.Event()
        self._buffers: dict[tuple[int, int], torch.Tensor] = {}

    def batches(self, shipment: Shipment) -> list[Batch]:
        """The shipment's batches in memory of this process (never a view of a worker's buffer)."""
        key = (shipment.worker, shipment.slot)
        if shipment.buffer is not None:
            self._buffers[key] = shipment.buffer
        batches = shipment.unpack(self._buffers[key])
        self.free[shipment.worker].release()
        return batches

    def close(self) -> None:
        """Workers stop waiting for buffers (the receiver reads nothing more)."""
        self.closed.set()


class _Iterated:
    """An iterator as a :class:`~prep.reader.stage.Stage`, for :class:`~prep.reader.stages.prefetch.Prefetcher` to run."""

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items

    def reset(self, initial_state: dict[str, Any] | None) -> None:
        pass

    def next(self) -> Any:
        return next(self._items)

    def get_state(self) -> dict[str, Any]:
        return {}

    def shutdown(self) -> None:
        pass


class ReceivedAhead:
    """``batches`` (:func:`in_step_order`) taken on a thread, up to ``depth`` ahead of the consumer.

    Copying a shipment out of its buffer costs milliseconds (G = 256: ~3 MB a step, a shipment
    every few steps): on the trainer's thread that was a wait every few steps (2% of a 100 ms
    step). On this thread it runs while the trainer's step does, as the reader's own threads do.

    Args:
        batches: the workers' batches in step order.
        receiver: their receiver (closed with this).
        schedule: the steps being read (a batch's global step index).
        depth: batches taken ahead at most.
    """

    def __init__(self, batches: Generator[Batch, None, None], receiver: Receiver, schedule: Schedule, depth: int) -> None:
        self._batches, self._receiver, self._schedule = batches, receiver, schedule
        self._ahead = Prefetcher(_Iterated(batches), depth=depth, name="reader receive",
                                 size=lambda batch: batch.num_rows)
        self._head: Batch | None = None  # taken by has(), yielded first

    def has(self, index: int) -> bool:
        """Whether global step ``index`` is in hand, never waiting; drops the batches before it."""
        while self._head is None or self._schedule.index(self._head.epoch, self._head.step) < index:
            if not self._ahead.has_next():
                return False
            try:
                self._head = self._ahead.next()
            except StopIteration:  # the workers ended before that step
                self._head = None
                return False
        return self._schedule.index(self._head.epoch, self._head.step) == index

    def start(self) -> "ReceivedAhead":
        """Takes batches from now on, before the first is asked for."""
        self._ahead.start()
        return self

    def __iter__(self) -> Iterator[Batch]:
        try:
            if self._head is not None:
                head, self._head = self._head, None
                yield head
            while True:
                try:
                    yield self._ahead.next()
                except StopIteration:
                    return
        finally:
            self.close()

    def close(self) -> None:
        """Stops the thread; workers waiting for a buffer stop waiting, so its last take returns."""
        self._receiver.close()
        self._ahead.shutdown()
        self._batches.close()


def in_step_order(shipments: Iterator[Shipment], receiver: Receiver, schedule: Schedule,
                  start: tuple[int, int]) -> Generator[Batch, None, None]:
    """The shipped batches one by one in step order from ``start`` (holding those that arrived early)."""
    early: dict[int, Batch] = {}
    expected = schedule.index(*start)
    try:
        for shipment in shipments:
            for batch in receiver.batches(shipment):
                early[schedule.index(batch.epoch, batch.step)] = batch
            while expected in early:
                yield early.pop(expected)
                expected += 1
    finally:
        receiver.close()
    if early:
        raise ReaderError(f"worker processes delivered steps {sorted(early)[:3]}... but never step {expected}")
