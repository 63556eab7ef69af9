"""Build whole batches from a chunk with vectorized NumPy: no per-row and no per-split Python.

A local batch is a run of consecutive rows of each split the rank reads, in split
order (:class:`prep.plan.order.Share`). A chunk holds all those splits in one set
of columns (:class:`Chunk`), and batches are built a *group* of steps at a time by
index arithmetic over it, so the Python work is a handful of calls per group, whatever
the rows per split and the number of splits are, and each batch is a view of the
group's output:

* fixed-length rows (packed text, images): one gather puts the group's rows in batch
  order (none at all when the rank reads one split in order and the dtype is kept:
  then a batch is a reshape of the Arrow buffer, zero-copy);
* variable-length rows: every token's place in the source values is computed from the
  Arrow offsets (a cumulative sum of per-row jumps), its place in the padded output is a
  mask (``arange(width) < length``, one call per batch), and the tokens are gathered and
  put in place in one operation per output, each batch padded
  to its own longest row (rounded up to ``pad_to_multiple_of``, so shapes fall into a
  few buckets); outputs live on recycled memory (:mod:`prep.reader.workers.buffers`);
* ``labels`` are ``input_ids`` with -100 where ``loss_mask`` is 0 or on padding.

Only NumPy computes here; torch merely wraps the results (``torch.from_numpy``). A
torch kernel would enter its OpenMP pool, whose idle threads spin: on a 2-core
machine that burned 4x the CPU of the whole reader in our benchmark. And only NumPy
kernels that release the GIL are used on whole groups (``np.repeat`` does not: it
serialized the reader's threads), so reading and batch building overlap.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from prep.contracts.foreign import NO_ID
from prep.reader.workers import buffers
from prep.reader.spec import CollateSpec

__all__ = ["Chunk", "collate_steps", "source_counts", "ranges", "IGNORE_INDEX"]

IGNORE_INDEX = -100
Built = tuple[dict[str, torch.Tensor], np.ndarray, int]  # (tensors, row ids, real tokens)

# Arrow buffers are read-only and torch warns (once per process) when a tensor shares one. The
# reader never writes them, so spend that one warning here, silenced, instead of in a user's log.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _readonly = np.zeros(1)
    _readonly.flags.writeable = False
    torch.from_numpy(_readonly)


@dataclass(frozen=True)
class Chunk:
    """One read of the rank's splits, as ONE set of columns (so no step costs Python per split).

    The splits' rows are in ``columns`` one split after the other, each split's rows in step
    order; row ``i`` of that concatenation is row ``order[i]`` of ``columns`` (``order`` None:
    the identity, e.g. one range read per split; an on-the-fly plan reads them in one ``take``).

    Attributes:
        columns: NumPy columns (see :func:`prep.reader.stages.source.columns_to_numpy`).
        counts: ``(steps, splits)``: rows each split gives each step of the chunk (see
            :meth:`prep.plan.order.Share.rows`).
        offsets: ``(steps, splits)``: where those rows start in the concatenation.
        order: where the concatenation's rows are in ``columns``, or None.
    """

    columns: dict[str, Any]
    counts: np.ndarray
    offsets: np.ndarray
    order: np.ndarray | None = None

    @classmethod
    def of(cls, columns: dict[str, Any], counts: np.ndarray, order: np.ndarray | None = None) -> "Chunk":
        """A chunk whose splits give ``counts[step, split]`` rows a step."""
        counts = np.asarray(counts, np.int64)
        within = np.cumsum(counts, axis=0) - counts  # rows of the same split in earlier steps
        total = counts.sum(axis=0)
        return cls(columns, counts, (np.cumsum(total) - total)[None, :] + within, order)

    def rows(self, start: int, stop: int) -> np.ndarray | slice:
        """Rows of ``columns`` forming steps ``[start, stop)``, in batch order (step, split, row).

        A slice (so batches are views) when the chunk holds one split read in order.
        """
        counts, offsets = self.counts[start:stop], self.offsets[start:stop]
        if counts.shape[1] == 1 and self.order is None:
            return slice(int(offsets[0, 0]), int(offsets[-1, 0] + counts[-1, 0]))
        b = int(counts[0, 0])
        pos: np.ndarray
        if (counts == b).all():  # every split gives every step b rows: one broadcast
            pos = (offsets[:, :, None] + np.arange(b)).ravel()
        else:
            pos = ranges(offsets.ravel(), counts.ravel())
        if self.order is None:
            return pos
        ordered: np.ndarray = self.order[pos]
        return ordered


def collate_steps(chunk: Chunk, start: int, stop: int, spec: CollateSpec) -> list[Built]:
    """Batches for steps ``[start, stop)`` of a chunk (step ``j``: each split's rows of it, split after split).

    Args:
        chunk: the chunk's columns, all its splits in one (see :class:`Chunk`).
        start: first step, relative to the chunk.
        stop: end step, relative to the chunk.
        spec: how rows become tensors.

    Returns:
        One ``(tensors, ids, num_tokens)`` per step.
    """
    rows = chunk.rows(start, stop)
    if "id" in chunk.columns:
        ids = chunk.columns["id"][rows].reshape(stop - start, -1)
    else:  # a table prep did not write, without ids (prep.contracts.foreign)
        count = rows.stop - rows.start if isinstance(rows, slice) else len(rows)
        ids = np.full((stop - start, count // max(1, stop - start)), NO_ID, np.uint64)
    if spec.kind == "images":
        built = _images(chunk, rows, stop - start, spec)
    elif spec.kind == "packed":
        built = _packed(chunk, rows, stop - start, spec)
    else:
        built = _padded(chunk, rows, stop - start, spec)
    return [(tensors, ids[j], tokens) for j, (tensors, tokens) in enumerate(built)]


def source_counts(chunk: Chunk, start: int, stop: int, spec: CollateSpec) -> tuple[np.ndarray, np.ndarray]:
    """Rows and real tokens of each mixture source in steps ``[start, stop)``: two ``(steps, sources)`` arrays."""
    rows = chunk.rows(start, stop)
    if isinstance(rows, slice):
        rows = np.arange(rows.start, rows.stop)
    which = chunk.columns["source"][rows].astype(np.int64)
    if spec.kind == "packed":
        tokens = chunk.columns["length"][rows].astype(np.int64)
    elif spec.kind == "images":
        tokens = np.zeros(len(rows), np.int64)
    else:
        offsets = chunk.columns["input_ids"].offsets
        tokens = (offsets[rows + 1] - offsets[rows]).astype(np.int64)
    steps, n = stop - start, spec.sources
    key = np.repeat(np.arange(steps), len(rows) // max(steps, 1)) * n + which
    return (np.bincount(key, minlength=steps * n).reshape(steps, n),
            np.bincount(key, weights=tokens, minlength=steps * n).astype(np.int64).reshape(steps, n))


def _filled(size: int, dtype: Any, value: int) -> np.ndarray:
    """``np.full`` on recycled memory (see :mod:`prep.reader.workers.buffers`)."""
    out = buffers.empty(size, dtype)
    out.fill(value)
    return out


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


def _padded(chunk: Chunk, rows: np.ndarray | slice, steps: int, spec: CollateSpec) -> list[tuple[dict[str, torch.Tensor], int]]:
    col = chunk.columns["input_ids"]
    if isinstance(rows, slice):
        rows = np.arange(rows.start, rows.stop)
    row_src = col.offsets[rows].astype(np.int64)
    lens = col.offsets[rows + 1] - row_src  # batch order: (step, split, row)
    per_batch = lens.size // max(steps, 1)
    m = spec.pad_to_multiple_of
    width = np.maximum(-(-lens.reshape(steps, per_batch).max(axis=1, initial=0) // m) * m, 1)  # per step
    base = np.concatenate([[0], np.cumsum(per_batch * width)])
    src = ranges(row_src, lens)
    size = int(base[-1])
    real = buffers.empty(size, np.bool_)  # which output places hold a token: arange(width) < length, per batch
    places = np.arange(int(width.max(initial=1)))
    for j, batch_lens in enumerate(lens.reshape(steps, per_batch)):
        np.less(places[:width[j]], batch_lens[:, None], out=real[base[j]:base[j + 1]].reshape(per_batch, int(width[j])))
    tokens = np.take(col.values, src, out=buffers.empty(src.size, col.values.dtype))
    input_ids = _filled(size, _np_dtype(spec.token_dtype), spec.pad_id)
    input_ids[real] = tokens
    attention = buffers.empty(size, np.int64)
    np.copyto(attention, real)
    labels = _filled(size, np.int64, IGNORE_INDEX)
    trained = None
    if "loss_mask" in chunk.columns:
        lm = chunk.columns["loss_mask"].values
        trained = np.take(lm, src, out=buffers.empty(src.size, lm.dtype)).astype(bool, copy=False)
    if trained is None or trained.all():  # pretrain rows train on every token: no masking pass
        labels[real] = tokens
    else:
        labels[real] = np.where(trained, tokens, IGNORE_INDEX)
    if spec.return_loss_mask:
        loss_mask = _filled(size, np.uint8, 0)
        loss_mask[real] = 1 if trained is None else trained
    per_step = lens.reshape(steps, per_batch).sum(axis=1)
    out = []
    for j in range(steps):
        view = slice(int(base[j]), int(base[j + 1]))
        shape = (per_batch, int(width[j]))
        tensors = {"input_ids": torch.from_numpy(input_ids[view].reshape(shape)),
                   "labels": torch.from_numpy(labels[view].reshape(shape)),
                   "attention_mask": torch.from_numpy(attention[view].reshape(shape))}
        if spec.return_loss_mask:
            tensors["loss_mask"] = torch.from_numpy(loss_mask[view].reshape(shape))
        out.append((tensors, int(per_step[j])))
    return out


def ranges(row_start: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """``row_start[i] + 0..lens[i]-1``, concatenated (every token's position, row after row; every row of runs).

    A cumulative sum of per-row jumps (``np.repeat`` would hold the GIL for the whole group;
    these kernels release it, so the batch threads overlap).
    """
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    token_start = np.cumsum(lens) - lens
    nonempty = lens > 0
    jumps = _filled(total, np.int64, 1)  # +1 a token, plus each row's jump (no arange temporary)
    jumps[token_start[nonempty]] += np.diff((row_start - token_start)[nonempty], prepend=0)
    jumps[0] -= 1
    return np.cumsum(jumps, out=jumps)


def _packed(chunk: Chunk, rows: np.ndarray | slice, steps: int, spec: CollateSpec) -> list[tuple[dict[str, torch.Tensor], int]]:
    dtype, cols = _np_dtype(spec.token_dtype), chunk.columns

    def grab(name: str, dt: Any = None) -> np.ndarray:
        return _as(cols[name][rows], dt).reshape(steps, -1, cols[name].shape[1])

    input_ids, position_ids = grab("input_ids", dtype), grab("position_ids", dtype)
    loss_mask = grab("loss_mask")
    length = cols["length"][rows].reshape(steps, -1)
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


def _as(a: np.ndarray, dtype: Any) -> np.ndarray:
    """``a`` in ``dtype``: itself (a view stays a view) when it already is."""
    return a if dtype is None or a.dtype == dtype else a.astype(dtype)


def _images(chunk: Chunk, rows: np.ndarray | slice, steps: int, spec: CollateSpec) -> list[tuple[dict[str, torch.Tensor], int]]:
    h, w, c = spec.image_shape  # type: ignore[misc]
    pixels = chunk.columns["image"][rows].reshape(steps, -1, h, w, c)
    labels = chunk.columns["label"][rows].astype(np.int64).reshape(steps, -1)
    out = []
    for j in range(steps):
        image = torch.from_numpy(pixels[j])
        if spec.image_layout == "NCHW":
            image = image.permute(0, 3, 1, 2)  # a channels_last-strided NCHW view of the same buffer
        out.append(({spec.image_keys[0]: image, spec.image_keys[1]: torch.from_numpy(labels[j])}, 0))
    return out
