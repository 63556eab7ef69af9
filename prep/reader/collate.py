"""Build whole batches from a chunk with vectorized NumPy: no per-row Python.

A local batch is ``b`` consecutive rows of each split the rank owns, in split
order. Per batch the work is one slice per split (``S/W`` of them, each ``b``
rows) and a handful of whole-array operations:

* fixed-length rows (packed text, images) are a reshape of one buffer: zero-copy
  from Arrow when the rank reads one split and no dtype change is asked for;
* variable-length rows are padded from the Arrow offsets with one boolean-mask
  scatter (``ids[mask] = values``), optionally to a multiple of ``pad_to_multiple_of``
  so batch shapes fall into a few buckets;
* ``labels`` are ``input_ids`` with -100 where ``loss_mask`` is 0 or on padding.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from prep.reader.source import Ragged
from prep.reader.spec import CollateSpec

__all__ = ["collate", "IGNORE_INDEX"]

IGNORE_INDEX = -100
# Arrow buffers are read-only and torch warns (once per process) when a tensor shares one. The
# reader never writes them, so spend that one warning here, silenced, instead of in a user's log.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _readonly = np.zeros(1)
    _readonly.flags.writeable = False
    torch.from_numpy(_readonly)


def collate(parts: list[dict[str, Any]], start: int, stop: int, spec: CollateSpec) -> tuple[dict[str, torch.Tensor], np.ndarray, int]:
    """Rows ``[start, stop)`` of every part, concatenated in part order, as tensors.

    Args:
        parts: one dict of NumPy columns per split (see :func:`prep.reader.source.columns_to_numpy`).
        start: first row of each part.
        stop: end row of each part.
        spec: how to build the tensors.

    Returns:
        ``(tensors, ids, num_tokens)``.
    """
    ids = _rows([p["id"] for p in parts], start, stop)
    build = {"images": _images, "packed": _packed}.get(spec.kind, _padded)
    tensors, num_tokens = build(parts, start, stop, spec)
    return tensors, ids, num_tokens


def _rows(arrays: list[np.ndarray], start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of each array, concatenated: a view when there is one array."""
    if len(arrays) == 1:
        return arrays[0][start:stop]
    return np.concatenate([a[start:stop] for a in arrays])


def _ragged(cols: list[Ragged], start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths and concatenated values of rows ``[start, stop)`` of each ragged column."""
    lens, values = [], []
    for col in cols:
        offsets = col.offsets[start:stop + 1]
        lens.append(np.diff(offsets))
        values.append(col.values[offsets[0]:offsets[-1]])
    if len(cols) == 1:
        return lens[0], values[0]
    return np.concatenate(lens), np.concatenate(values)


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


def _padded(parts: list[dict[str, Any]], start: int, stop: int, spec: CollateSpec) -> tuple[dict[str, torch.Tensor], int]:
    lens, tokens = _ragged([p["input_ids"] for p in parts], start, stop)
    m = spec.pad_to_multiple_of
    width = max(1, -(-int(lens.max(initial=0)) // m) * m)
    mask = np.arange(width, dtype=lens.dtype) < lens[:, None]
    input_ids = np.full(mask.shape, spec.pad_id, dtype=_np_dtype(spec.token_dtype))
    input_ids[mask] = tokens
    trained = np.zeros(mask.shape, dtype=np.bool_)
    if "loss_mask" in parts[0]:
        trained[mask] = _ragged([p["loss_mask"] for p in parts], start, stop)[1]
    else:
        trained = mask
    out = {
        "input_ids": torch.from_numpy(input_ids),
        "labels": torch.from_numpy(np.where(trained, input_ids, np.int64(IGNORE_INDEX))),
        "attention_mask": torch.from_numpy(mask.view(np.uint8)).to(torch.int64),
    }
    if spec.return_loss_mask:
        out["loss_mask"] = torch.from_numpy(trained.view(np.uint8))
    return out, int(tokens.size)


def _packed(parts: list[dict[str, Any]], start: int, stop: int, spec: CollateSpec) -> tuple[dict[str, torch.Tensor], int]:
    tokens = _rows([p["input_ids"] for p in parts], start, stop)
    loss_mask = _rows([p["loss_mask"] for p in parts], start, stop)
    length = _rows([p["length"] for p in parts], start, stop)
    dtype = _np_dtype(spec.token_dtype)
    input_ids = tokens.astype(dtype, copy=False)
    out = {
        "input_ids": torch.from_numpy(input_ids),
        "labels": torch.from_numpy(np.where(loss_mask, input_ids, np.int64(IGNORE_INDEX))),
        "attention_mask": torch.from_numpy(np.arange(tokens.shape[1]) < length[:, None]).to(torch.int64),
        "position_ids": torch.from_numpy(_rows([p["position_ids"] for p in parts], start, stop).astype(dtype, copy=False)),
    }
    if spec.return_loss_mask:
        out["loss_mask"] = torch.from_numpy(loss_mask.astype(np.uint8, copy=False))
    return out, int(length.sum())


def _images(parts: list[dict[str, Any]], start: int, stop: int, spec: CollateSpec) -> tuple[dict[str, torch.Tensor], int]:
    h, w, c = spec.image_shape  # type: ignore[misc]
    pixels = torch.from_numpy(_rows([p["image"] for p in parts], start, stop).reshape(-1, h, w, c))
    if spec.image_layout == "NCHW":
        pixels = pixels.permute(0, 3, 1, 2)  # a channels_last-strided NCHW view of the same buffer
    return {"image": pixels, "label": torch.from_numpy(_rows([p["label"] for p in parts], start, stop).astype(np.int64))}, 0
