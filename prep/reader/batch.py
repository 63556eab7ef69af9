"""The batch type: a dict of tensors that also says where it came from.

``model(**batch)`` sees only the tensors. The origin (``epoch``, ``step``, ``ids``,
``state``, ...) lives on the batch's *type*: every batch is an instance of its own
small subclass of :class:`Batch`. Frameworks rebuild dicts as ``type(batch)({k: f(v)})``
(Accelerate's ``send_to_device``, HF Trainer's ``_prepare_inputs``, Lightning's
``apply_to_collection``), which keeps the type and so the origin: whatever a framework
did to the batch, ``batch.state`` still says where to resume after it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data._utils.collate import default_collate_fn_map

from prep.errors import PrepError

__all__ = ["Batch", "ORIGIN_FIELDS", "refuse_collate"]

ORIGIN_FIELDS = ("epoch", "step", "ids", "num_tokens", "state", "stats", "worker", "source_rows", "source_tokens")


class Batch(dict[str, torch.Tensor]):
    """Tensors of one local batch, keyed by name, plus where they came from.

    Attributes:
        epoch: the epoch of this batch (0-based, as in the manifest and the reader state).
        step: the global step within the epoch (0-based).
        ids: the rows' ``id`` values (uint64 NumPy array, in batch order).
        num_tokens: real (non-padding) tokens in the batch; 0 for images.
        state: the reader state that resumes right after this batch (set by the reader).
        stats: a snapshot of the producing pipeline's counters (see :mod:`prep.reader.stats`).
        worker: the DataLoader worker that built it (0 without workers).
        source_rows: in a mixture, rows of each source in the batch (int64 array), else None.
        source_tokens: in a mixture, real tokens of each source in the batch, else None.

    Example:
        >>> b = Batch.make({"x": torch.zeros(2)}, epoch=0, step=3, ids=np.zeros(2, np.uint64), num_tokens=0)
        >>> rebuilt = type(b)({k: v + 1 for k, v in b.items()})   # what frameworks do
        >>> rebuilt.step, isinstance(rebuilt, Batch), dict(rebuilt)
        (3, True, {'x': tensor([1., 1.])})
    """

    epoch: int
    step: int
    ids: np.ndarray
    num_tokens: int
    state: dict[str, Any] | None
    stats: Any
    worker: int
    source_rows: np.ndarray | None
    source_tokens: np.ndarray | None

    @staticmethod
    def make(tensors: dict[str, torch.Tensor], *, epoch: int, step: int, ids: np.ndarray, num_tokens: int,
             state: dict[str, Any] | None = None, stats: Any = None, worker: int = 0,
             source_rows: np.ndarray | None = None, source_tokens: np.ndarray | None = None) -> "Batch":
        """A batch of its own type, which holds the origin (see the module docstring)."""
        origin = {"epoch": epoch, "step": step, "ids": ids, "num_tokens": num_tokens, "state": state, "stats": stats,
                  "worker": worker, "source_rows": source_rows, "source_tokens": source_tokens}
        own: type[Batch] = type("Batch", (Batch,), {**origin, "__module__": __name__, "__qualname__": "Batch"})
        return own(tensors)

    def set_origin(self, **fields: Any) -> None:
        """Updates origin fields (``state``, ``stats``, ``worker``) for this batch and every rebuild of it."""
        unknown = set(fields) - set(ORIGIN_FIELDS)
        if unknown or type(self) is Batch:
            raise TypeError(f"set_origin: unknown fields {sorted(unknown)} or a batch not made by Batch.make")
        for name, value in fields.items():
            setattr(type(self), name, value)

    @property
    def num_rows(self) -> int:
        return len(self.ids)

    def __reduce__(self) -> tuple[Any, ...]:
        # a per-batch type does not pickle by name: DataLoader workers ship the tensors and the origin
        return _restore, (dict(self), {name: getattr(self, name) for name in ORIGIN_FIELDS})

    def __copy__(self) -> "Batch":
        # copy.copy keeps the type, so the origin: without this it went through __reduce__ and made a new
        # type per copy, and DataLoader(ds, batch_size=None) copies every batch (torch's default_convert)
        return type(self)(self)

    def _with(self, tensors: dict[str, torch.Tensor]) -> "Batch":
        return type(self)({**self, **tensors})

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
        buffer = torch.empty(max(size, 8), dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]  # torch leaves it untyped
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


def _restore(tensors: dict[str, torch.Tensor], origin: dict[str, Any]) -> Batch:
    return Batch.make(tensors, **origin)


def refuse_collate(batch: list[Any], *, collate_fn_map: Any = None) -> None:
    """What ``DataLoader(ds, batch_size=N)`` meets: N whole local batches to stack. One line instead of
    torch's ``stack expects each tensor to be equal size`` (batches differ in padded length)."""
    raise PrepError(f"the reader yields whole local batches: DataLoader got batch_size={len(batch)} and tried to stack "
                    "them; use DataLoader(ds, batch_size=None) (the rows per batch come from global_batch_size / world size)")


default_collate_fn_map[Batch] = refuse_collate  # torch's documented way to extend default_collate with a type
