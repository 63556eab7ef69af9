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
    """

    epoch: int
    step: int
    ids: np.ndarray
    num_tokens: int
    stats: dict[str, Any] | None
    worker: int

    @classmethod
    def make(cls, tensors: dict[str, torch.Tensor], *, epoch: int, step: int, ids: np.ndarray, num_tokens: int) -> "Batch":
        batch = cls(tensors)
        batch.epoch, batch.step, batch.ids, batch.num_tokens = epoch, step, ids, num_tokens
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

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        """A copy with every tensor on ``device``."""
        return self._with({k: v.to(device, non_blocking=non_blocking) for k, v in self.items()})

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}" for k, v in self.items())
        return f"Batch(epoch={self.epoch}, step={self.step}, rows={self.num_rows}, {shapes})"
