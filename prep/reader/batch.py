"""The batch type: a dict of tensors that also says where it came from.

``model(**batch)`` sees only the tensors; the attributes (``epoch``, ``step``,
``ids``, ...) travel with the batch through DataLoader worker processes, pinning
and device copies, so the consumer knows exactly which step it has consumed.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

__all__ = ["Batch"]


class Batch(dict):
    """Tensors of one local batch, keyed by name, plus where they came from.

    Attributes:
        epoch: the epoch of this batch.
        step: the global step within the epoch.
        ids: the rows' ``id`` values (uint64 NumPy array, in batch order).
        num_tokens: real (non-padding) tokens in the batch; 0 for images.
        stats: a snapshot of the producing pipeline's counters (see :mod:`prep.reader.stats`).
        worker: the DataLoader worker that built it (0 without workers).
        source_rows: in a mixture, rows of each source in the batch (int64 array), else None.
        source_tokens: in a mixture, real tokens of each source in the batch, else None.
    """

    epoch: int
    step: int
    ids: np.ndarray
    num_tokens: int
    stats: dict[str, Any] | None
    worker: int
    source_rows: np.ndarray | None
    source_tokens: np.ndarray | None

    @classmethod
    def make(cls, tensors: dict[str, torch.Tensor], *, epoch: int, step: int, ids: np.ndarray, num_tokens: int,
             source_rows: np.ndarray | None = None, source_tokens: np.ndarray | None = None) -> "Batch":
        batch = cls(tensors)
        batch.epoch, batch.step, batch.ids, batch.num_tokens = epoch, step, ids, num_tokens
        batch.source_rows, batch.source_tokens = source_rows, source_tokens
        batch.stats, batch.worker = None, 0
        return batch

    @property
    def num_rows(self) -> int:
        return len(self.ids)

    def _with(self, tensors: dict[str, torch.Tensor]) -> "Batch":
        clone = copy.copy(self)
        clone.update(tensors)
        return clone

    def pin_memory(self, device: Any = None) -> "Batch":
        """A copy whose tensors are in pinned host memory (DataLoader's pin thread calls this)."""
        return self._with({k: v.pin_memory() for k, v in self.items()})

    def shared(self) -> "Batch":
        """A copy whose contiguous tensors are views of ONE shared-memory buffer.

        A DataLoader worker hands each storage to the main process separately (a file
        descriptor and a socket round trip each, ~1 ms); one storage per batch halves
        the cost of the worker path. Made with NumPy copies (no torch kernels).
        """
        dense = {k: v for k, v in self.items() if v.is_contiguous()}
        offsets, size = {}, 0
        for k, v in dense.items():
            offsets[k] = size
            size += -(-v.numel() * v.element_size() // 8) * 8  # keep every tensor 8-byte aligned
        buffer = torch.empty(max(size, 8), dtype=torch.uint8).share_memory_()
        raw = buffer.numpy()
        out = {}
        for k, v in dense.items():
            n = v.numel() * v.element_size()
            raw[offsets[k]:offsets[k] + n] = v.numpy().reshape(-1).view(np.uint8)
            out[k] = buffer[offsets[k]:offsets[k] + n].view(v.dtype).view(v.shape)
        return self._with(out)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        """A copy with every tensor on ``device``."""
        return self._with({k: v.to(device, non_blocking=non_blocking) for k, v in self.items()})

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}" for k, v in self.items())
        return f"Batch(epoch={self.epoch}, step={self.step}, rows={self.num_rows}, {shapes})"
