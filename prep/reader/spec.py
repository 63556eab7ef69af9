"""What a table's rows are and how they become tensors: the collate spec.

Derived from the prepared table's ``prep`` metadata (``docs/architecture.md``):
the kind picks the columns and the batch layout, the tokenizer gives the pad id,
image metadata gives the pixel shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import torch

from prep.contracts.table import TEXT_KINDS, TableMetadata
from prep.errors import PrepError

__all__ = ["CollateSpec", "TEXT_KINDS", "COLUMNS", "OPTIONAL", "HF_IMAGE_KEYS", "spec_from_metadata", "row_bytes"]

# The keys HF image models (``AutoModelForImageClassification``...) take: ``model(pixel_values=, labels=)``.
HF_IMAGE_KEYS = ("pixel_values", "labels")



@dataclass(frozen=True, kw_only=True)
class CollateSpec:
    """How rows become tensors.

    Args:
        kind: ``sft``, ``pretrain``, ``packed`` or ``images`` (from the table metadata).
        pad_id: the token that fills padding (the tokenizer's pad id, else its eos id).
        token_dtype: dtype of ``input_ids`` and ``position_ids`` (default int64; int32 halves
            host-to-device bytes and keeps packed rows zero-copy).
        pad_to_multiple_of: round each batch's padded length up to a multiple (shape buckets).
        image_shape: ``(H, W, C)`` of image rows.
        image_layout: ``NCHW`` (a channels-last view, no copy) or ``NHWC``.
        image_keys: the batch keys of the pixels and the labels of image rows: ``("image", "label")``
            (default) or the names HF image models take, :data:`HF_IMAGE_KEYS` (``pixel_values``, ``labels``).
        return_loss_mask: also return ``loss_mask`` (uint8).
        sources: tables of a mixture (its rows carry a ``source`` column, counted per batch); 0 otherwise.
        absent: optional columns the rows lack (:data:`OPTIONAL`: ``id``, and ``loss_mask`` of unpacked
            text), left out of :attr:`columns`: ids are then :data:`~prep.contracts.foreign.NO_ID` and every
            token is trained on.
    """

    kind: Literal["sft", "pretrain", "packed", "images"]
    pad_id: int = 0
    token_dtype: torch.dtype = torch.int64
    pad_to_multiple_of: int = 1
    image_shape: tuple[int, int, int] | None = None
    image_layout: Literal["NCHW", "NHWC"] = "NCHW"
    image_keys: tuple[str, str] = ("image", "label")
    return_loss_mask: bool = False
    sources: int = 0
    absent: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in (*TEXT_KINDS, "images"):
            raise PrepError(f"kind={self.kind!r} must be one of {[*TEXT_KINDS, 'images']}")
        if self.pad_to_multiple_of < 1:
            raise PrepError(f"pad_to_multiple_of={self.pad_to_multiple_of} must be >= 1")
        if self.image_layout not in ("NCHW", "NHWC"):
            raise PrepError(f"image_layout={self.image_layout!r} must be 'NCHW' or 'NHWC'")
        if len(self.image_keys) != 2 or len(set(self.image_keys)) != 2 or not all(isinstance(k, str) and k for k in self.image_keys):
            raise PrepError(f"image_keys={self.image_keys!r} must be two different names: (pixels, labels), e.g. "
                            f"{HF_IMAGE_KEYS}")
        if self.kind == "images" and (self.image_shape is None or len(self.image_shape) != 3):
            raise PrepError(f"image_shape={self.image_shape!r} must be (H, W, C) for image tables")

    @property
    def columns(self) -> list[str]:
        """The columns to read for this kind (and ``source`` in a mixture)."""
        return [*(c for c in COLUMNS[self.kind] if c not in self.absent), *(["source"] if self.sources else [])]


COLUMNS = {  # what each kind reads
    "sft": ("id", "input_ids", "loss_mask"),
    "pretrain": ("id", "input_ids", "loss_mask"),
    "packed": ("id", "input_ids", "loss_mask", "position_ids", "length"),
    "images": ("id", "image", "label"),
}
OPTIONAL = {"sft": ("id", "loss_mask"), "pretrain": ("id", "loss_mask"), "packed": ("id",), "images": ("id",)}



def spec_from_metadata(meta: TableMetadata, *, pad_id: int | None = None,
                       token_dtype: torch.dtype = torch.int64, pad_to_multiple_of: int = 1,
                       image_layout: Literal["NCHW", "NHWC"] = "NCHW", image_keys: tuple[str, str] = ("image", "label"),
                       return_loss_mask: bool = False, sources: int = 0, columns: Sequence[str] | None = None) -> CollateSpec:
    """The collate spec for a table described by its ``prep`` metadata (kind, tokenizer, image shape).

    A table prep did not write (``meta.inferred``) may lack optional columns: those of ``columns`` (the
    columns its rows have) that it lacks are left out (:attr:`CollateSpec.absent`), and with no tokenizer it
    pads with id 0 unless ``pad_id`` is given. A prepared table's rows must have every column of its kind
    (a split without one is an error when it is opened: an SFT table read without its ``loss_mask`` would
    silently train on the prompts).

    Raises:
        PrepError: no pad id can be found for a text table, an image table stores no pixels, or the rows
            lack a column the kind needs (naming it and the columns there are).
    """
    kind = meta.kind
    absent: tuple[str, ...] = ()
    if columns is not None and meta.inferred is not None:
        lacking = [c for c in COLUMNS[kind] if c not in columns]
        needed = [c for c in lacking if c not in OPTIONAL[kind]]
        if needed:
            raise PrepError(f"the rows lack the columns {needed} that {kind} rows need (they have {list(columns)}); "
                            "materialize them with those columns (--columns)")
        absent = tuple(lacking)
    if meta.inferred is not None and meta.tokenizer is None and pad_id is None and kind != "images":
        pad_id = 0
    image_shape = None
    if kind == "images":
        if meta.image is None:
            raise PrepError("the image table stores no decoded pixels (it was prepared with store_pixels: false); "
                            "prepare it with pixels to read it with prep.reader")
        image_shape = meta.image.shape
    elif pad_id is None:
        pad_id = meta.tokenizer.pad_or_eos if meta.tokenizer else None
        if pad_id is None:
            raise PrepError("the table metadata names no tokenizer pad_id or eos_id: pass pad_id=")
    return CollateSpec(kind=kind, pad_id=int(pad_id or 0), token_dtype=token_dtype, pad_to_multiple_of=pad_to_multiple_of,
                       image_shape=image_shape, image_layout=image_layout, image_keys=image_keys,
                       return_loss_mask=return_loss_mask, sources=sources, absent=absent)


def row_bytes(meta: TableMetadata, spec: CollateSpec) -> int:
    """Roughly how many bytes one row reads (to size reads)."""
    if spec.kind == "images" and spec.image_shape is not None:  # always set for images (spec_from_metadata)
        return int(np.prod(spec.image_shape)) + 16
    if spec.kind == "packed" and meta.seq_len:
        return meta.seq_len * 9 + 16
    counts = meta.counts
    if counts.tokens and counts.rows_written:
        return int(counts.tokens / counts.rows_written * 5) + 24
    return 2048
