"""How the reader builds and delivers batches: one typed, frozen set of knobs.

:class:`~prep.reader.dataset.ReaderDataset` takes these options, or any of their fields
as keywords (:meth:`ReaderOptions.of`); the pipeline and the collate spec take them from
here, so a knob is named, typed, defaulted and documented in one place: this class.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Literal, Mapping, Sequence

import torch

from prep.reader.batch import Batch
from prep.contracts.table import TableMetadata
from prep.reader.spec import CollateSpec, spec_from_metadata

__all__ = ["ReaderOptions"]


@dataclass(frozen=True, kw_only=True)
class ReaderOptions:
    """The reader's knobs (what is read, by which rank, is the dataset's business).

    Args:
        transform: ``fn(batch) -> dict of tensors``, run on ``transform_threads`` threads.
        transform_threads: threads for ``transform``.
        pad_id: padding token (None: the table's tokenizer pad id, else its eos id).
        token_dtype: dtype of ``input_ids``/``position_ids``.
        pad_to_multiple_of: round padded lengths up to a multiple.
        image_layout: ``NCHW`` or ``NHWC``.
        image_keys: batch keys of an image table's pixels and labels (``HF_IMAGE_KEYS`` for HF models).
        return_loss_mask: also return ``loss_mask``.
        pin_memory: build batches in pinned host memory (ignored without CUDA).
        batch_threads: threads building batches.
        read_bytes: about how many bytes one read covers, all the rank's splits together.
        raw_chunks: reads queued ahead of batching.
        prefetch_batches: batches built ahead of the consumer, at least.
        fetch_threads: splits the cache's fetch stage copies at once.
    """

    transform: Callable[[Batch], dict[str, Any]] | None = None
    transform_threads: int = 2
    pad_id: int | None = None
    token_dtype: torch.dtype = torch.int64
    pad_to_multiple_of: int = 1
    image_layout: Literal["NCHW", "NHWC"] = "NCHW"
    image_keys: tuple[str, str] = ("image", "label")
    return_loss_mask: bool = False
    pin_memory: bool = False
    batch_threads: int = 2
    read_bytes: int = 64 << 20
    raw_chunks: int = 2
    prefetch_batches: int = 4
    fetch_threads: int = 8

    @classmethod
    def of(cls, options: ReaderOptions | None, knobs: Mapping[str, Any]) -> ReaderOptions:
        """``options`` (default: the defaults) with the fields in ``knobs`` replaced: the dataset's keywords.

        Raises:
            TypeError: a keyword that is no field of this class (naming it and the fields).
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(knobs) - known)
        if unknown:
            raise TypeError(f"ReaderDataset() got unexpected keyword arguments {unknown}: "
                            f"its keywords are the dataset's and ReaderOptions' {sorted(known)}")
        return replace(options if options is not None else cls(), **knobs)

    def collate_spec(self, metadata: TableMetadata, *, sources: int = 0, columns: Sequence[str] | None = None) -> CollateSpec:
        """The collate spec for a table with this ``prep`` metadata whose rows have ``columns``."""
        return spec_from_metadata(metadata, pad_id=self.pad_id, token_dtype=self.token_dtype,
                                  pad_to_multiple_of=self.pad_to_multiple_of, image_layout=self.image_layout,
                                  image_keys=self.image_keys,
                                  return_loss_mask=self.return_loss_mask, sources=sources, columns=columns)
