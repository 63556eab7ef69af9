"""Build whole batches from a chunk with vectorized NumPy: no per-row Python.

A local batch is ``b`` consecutive rows of each split the rank owns, in split
order. Batches are built a *group* of steps at a time, so the Python work is a few
calls per split per group, whatever ``b`` is, and each batch is a view:

* fixed-length rows (packed text, images): one strided copy per split puts the
  group's rows in batch order (none at all when the rank reads one split and the
  dtype is kept: then a batch is a reshape of the Arrow buffer, zero-copy);
* variable-length rows: every token's place in the padded output is computed from
  the Arrow offsets (a cumulative sum of per-row jumps) and the tokens are scattered
  there in one operation per output, each batch padded to its own longest row (rounded up to
  ``pad_to_multiple_of``, so shapes fall into a few buckets);
* ``labels`` are ``input_ids`` with -100 where ``loss_mask`` is 0 or on padding.

Only NumPy computes here; torch merely wraps the results (``torch.from_numpy``). A
torch kernel would enter its OpenMP pool, whose idle threads spin: on a 2-core
machine that burned 4x the CPU of the whole reader in our benchmark. And only NumPy
kernels that release the GIL are used on whole groups (``np.repeat`` does not: it
serialized the reader's threads), so reading and batch building overlap.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from prep.reader.spec import CollateSpec

__all__ = ["collate_steps", "IGNORE_INDEX"]

IGNORE_INDEX = -100
Built = tuple[dict[str, torch.Tensor], np.ndarray, int]  # (tensors, row ids, real tokens)

# Arrow buffers are read-only and torch warns (once per process) when a tensor shares one. The
# reader never writes them, so spend that one warning here, silenced, instead of in a user's log.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _readonly = np.zeros(1)
    _readonly.flags.writeable = False
    torch.from_numpy(_readonly)


def collate_steps(parts: list[dict[str, Any]], start: int, stop: int, b: int, spec: CollateSpec) -> list[Built]:
    """Batches for steps ``[start, stop)`` of a chunk (step ``j`` is rows ``[j*b, (j+1)*b)`` of every part).

    Args:
        parts: one dict of NumPy columns per split, in split order (see
            :func:`prep.reader.source.columns_to_numpy`).
        start: first step, relative to the chunk.
        stop: end step, relative to the chunk.
        b: rows each split gives a step.
        spec: how rows become tensors.

    Returns:
        One ``(tensors, ids, num_tokens)`` per step.
    """
    ids = _stack([p["id"] for p in parts], start, stop, b).reshape(stop - start, -1)
    if spec.kind == "images":
        built = _images(parts, start, stop, b, spec)
    elif spec.kind == "packed":
        built = _packed(parts, start, stop, b, spec)
    else:
        built = _padded(parts, start, stop, b, spec)
    return [(tensors, ids[j], tokens) for j, (tensors, tokens) in enumerate(built)]


def _stack(cols: list[np.ndarray], start: int, stop: int, b: int, dtype: Any = None) -> np.ndarray:
    """Rows of steps ``[start, stop)`` of each column, in batch order: shape ``(steps, splits, b, ...)``.

    A view when there is one column and no dtype change; else one strided copy per column.
    """
    steps, rows = stop - start, slice(start * b, stop * b)
    first = cols[0][rows]
    if len(cols) == 1 and (dtype is None or first.dtype == dtype):
        return first.reshape(steps, 1, b, *first.shape[1:])
    out = np.empty((steps, len(cols), b, *first.shape[1:]), dtype=dtype or first.dtype)
    for s, col in enumerate(cols):
        out[:, s] = col[rows].reshape(steps, b, *first.shape[1:])
    return out


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


def _padded(parts: list[dict[str, Any]], start: int, stop: int, b: int, spec: CollateSpec) -> list[tuple[dict, int]]:
    steps, k = stop - start, len(parts)
    offsets = [p["input_ids"].offsets[start * b:stop * b + 1] for p in parts]
    lens = np.stack([np.diff(o) for o in offsets]).astype(np.int64).reshape(k, steps, b)  # source order
    tokens = np.concatenate([p["input_ids"].values[o[0]:o[-1]] for p, o in zip(parts, offsets)])
    m = spec.pad_to_multiple_of
    width = np.maximum(-(-lens.max(axis=(0, 2), initial=0) // m) * m, 1)  # per step
    size = k * b * width
    base = np.concatenate([[0], np.cumsum(size)])
    # where each row starts in the flat output: batch base + (split, row) slot * batch width
    slot = (np.arange(k)[:, None, None] * b + np.arange(b)[None, None, :])
    row_start = (base[:-1][None, :, None] + slot * width[None, :, None]).ravel()
    flat_lens = lens.ravel()
    token_start = np.concatenate([[0], np.cumsum(flat_lens)[:-1]])
    # dest[t] = t + (row_start - token_start) of t's row, as a cumulative sum of per-row jumps
    # (np.repeat would hold the GIL for the whole group; these kernels release it)
    nonempty = flat_lens > 0
    jumps = np.zeros(tokens.size, dtype=np.int64)
    jumps[token_start[nonempty]] = np.diff((row_start - token_start)[nonempty], prepend=0)
    dest = np.cumsum(jumps, out=jumps)
    dest += np.arange(tokens.size)
    input_ids = np.full(int(base[-1]), spec.pad_id, dtype=_np_dtype(spec.token_dtype))
    input_ids[dest] = tokens
    labels = np.full(int(base[-1]), IGNORE_INDEX, dtype=np.int64)
    attention = np.zeros(int(base[-1]), dtype=np.int64)
    attention[dest] = 1
    trained = None
    if "loss_mask" in parts[0]:
        trained = np.concatenate([p["loss_mask"].values[o[0]:o[-1]] for p, o in zip(parts, offsets)]).astype(bool, copy=False)
        labels[dest] = np.where(trained, tokens, IGNORE_INDEX)
    else:
        labels[dest] = tokens
    if spec.return_loss_mask:
        loss_mask = np.zeros(int(base[-1]), dtype=np.uint8)
        loss_mask[dest] = 1 if trained is None else trained
    per_step = lens.sum(axis=(0, 2))
    out = []
    for j in range(steps):
        view = slice(int(base[j]), int(base[j + 1]))
        shape = (k * b, int(width[j]))
        tensors = {"input_ids": torch.from_numpy(input_ids[view].reshape(shape)),
                   "labels": torch.from_numpy(labels[view].reshape(shape)),
                   "attention_mask": torch.from_numpy(attention[view].reshape(shape))}
        if spec.return_loss_mask:
            tensors["loss_mask"] = torch.from_numpy(loss_mask[view].reshape(shape))
        out.append((tensors, int(per_step[j])))
    return out


def _packed(parts: list[dict[str, Any]], start: int, stop: int, b: int, spec: CollateSpec) -> list[tuple[dict, int]]:
    steps, dtype = stop - start, _np_dtype(spec.token_dtype)
    grab = lambda name, dt=None: _stack([p[name] for p in parts], start, stop, b, dt).reshape(steps, len(parts) * b, -1)  # noqa: E731
    input_ids, position_ids = grab("input_ids", dtype), grab("position_ids", dtype)
    loss_mask = grab("loss_mask")
    length = _stack([p["length"] for p in parts], start, stop, b).reshape(steps, -1)
    labels = np.where(loss_mask != 0, input_ids, np.int64(IGNORE_INDEX))
    attention = (np.arange(input_ids.shape[2]) < length[:, :, None]).astype(np.int64)
    out = []
    for j in range(steps):
        tensors = {"input_ids": torch.from_numpy(input_ids[j]), "labels": torch.from_numpy(labels[j]),
                   "attention_mask": torch.from_numpy(attention[j]), "position_ids": torch.from_numpy(position_ids[j])}
        if spec.return_loss_mask:
            tensors["loss_mask"] = torch.from_numpy(loss_mask[j].astype(np.uint8, copy=False))
        out.append((tensors, int(length[j].sum())))
    return out


def _images(parts: list[dict[str, Any]], start: int, stop: int, b: int, spec: CollateSpec) -> list[tuple[dict, int]]:
    h, w, c = spec.image_shape  # type: ignore[misc]
    steps = stop - start
    pixels = _stack([p["image"] for p in parts], start, stop, b).reshape(steps, -1, h, w, c)
    labels = _stack([p["label"] for p in parts], start, stop, b, np.dtype(np.int64)).reshape(steps, -1)
    out = []
    for j in range(steps):
        image = torch.from_numpy(pixels[j])
        if spec.image_layout == "NCHW":
            image = image.permute(0, 3, 1, 2)  # a channels_last-strided NCHW view of the same buffer
        out.append(({"image": image, "label": torch.from_numpy(labels[j])}, 0))
    return out
