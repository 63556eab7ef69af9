"""Device feed: batch N+1 is copied to the GPU on a side stream while batch N trains.

On CUDA each batch's tensors (pinned by the reader's batch-building threads when
``pin_memory=True``) are copied with ``non_blocking=True`` on a dedicated stream;
the consumer's stream waits for that copy only when it takes the batch, and
``record_stream`` keeps the caching allocator from reusing the memory early. On
CPU (or any non-CUDA device) batches pass through (or are moved synchronously).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import torch

from prep.reader.batch import Batch

__all__ = ["DeviceFeed"]


class DeviceFeed:
    """Yields the batches of ``batches`` on ``device``, one copy ahead.

    Args:
        batches: the batches (host memory).
        device: target device; ``cpu`` passes batches through unchanged.
        pin_memory: pin a batch first if it is not pinned yet (CUDA only; default True).

    Example:
        >>> b = Batch.make({"x": torch.zeros(2)}, epoch=0, step=0, ids=torch.zeros(2).numpy(), num_tokens=0)
        >>> [x.step for x in DeviceFeed([b], "cpu")]
        [0]
    """

    def __init__(self, batches: Iterable[Batch], device: torch.device | str, *, pin_memory: bool = True) -> None:
        self._batches, self.device, self._pin = batches, torch.device(device), pin_memory

    def __iter__(self) -> Iterator[Batch]:
        if self.device.type != "cuda":
            for batch in self._batches:
                yield batch if self.device.type == "cpu" else batch.to(self.device)
            return
        stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]  # torch leaves it untyped
        it = iter(self._batches)

        def stage() -> Batch | None:
            try:
                batch = next(it)
            except StopIteration:
                return None
            if self._pin and not all(t.is_pinned() for t in batch.values()):
                batch = batch.pin_memory()
            with torch.cuda.stream(stream):
                return batch.to(self.device, non_blocking=True)

        ahead = stage()
        while ahead is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(stream)
            for tensor in ahead.values():
                tensor.record_stream(current)
            batch, ahead = ahead, stage()
            yield batch
