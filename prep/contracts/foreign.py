"""What prep reads in a Lance table it did not write: its kind and layout, inferred from its columns and stated.

A table written by ``lance.write_dataset`` or Ray Data's ``write_lance`` has no ``prep``
metadata (:mod:`prep.contracts.table`). Materialize, mixtures and the reader still take
it when its columns say what a row is; what they infer is one sentence
(:attr:`~prep.contracts.table.TableMetadata.inferred`) that materialize logs and prints
and the reader logs, and that the manifest keeps:

- **text**: ``input_ids`` ``list<int>`` (any integer width). With a ``loss_mask`` list it is
  ``sft`` (trained where the mask is non-zero), without one ``pretrain`` (every token trained on).
- **images**: ``image`` ``fixed_size_list<uint8>[H*W*C]`` holding a square RGB (``C = 3``) or
  grey (``C = 1``) image, the only shapes a length alone tells, and an integer ``label``.

Always stated: no ``id`` column (batch ids are :data:`NO_ID`, ``2**64 - 1``; ``prep verify`` checks counts and
checksums only), no tokenizer (padding uses id 0 unless ``pad_id=``; token ids are not
checked against a vocabulary), no rejects table and no provenance. A table with neither
kind of column is refused before any work, naming what it lacks and what it has.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pyarrow as pa

from prep.contracts.table import ImageInfo, RejectsMetadata, TableMetadata, read_metadata
from prep.errors import PrepError

__all__ = ["NO_ID", "serving_metadata", "infer_metadata"]

NO_ID = 2**64 - 1  # the reader's batch ids for rows without an ``id`` column (uint64 -1)
_NOT_PREP = "not written by prep"


def serving_metadata(ds: Any, where: str) -> TableMetadata:
    """The metadata of the table ``ds`` (an open Lance dataset) at ``where``: prep's, else inferred from its columns.

    Raises:
        PrepError: a rejects table, or a table with no token or image columns (naming the columns it lacks).
    """
    meta = read_metadata(ds.schema.metadata, where)
    if isinstance(meta, RejectsMetadata):
        raise PrepError(f"{where} is a rejects table (of {meta.of}), not a table of rows to train on; pass {meta.of}")
    return meta if meta is not None else infer_metadata(ds.schema, where)


def infer_metadata(schema: pa.Schema, where: str) -> TableMetadata:
    """What a table with ``schema`` and no ``prep`` metadata holds (module docstring).

    >>> infer_metadata(pa.schema([("input_ids", pa.list_(pa.int32()))]), "t.lance").inferred
    't.lance was not written by prep: kind pretrain (input_ids list<int32>; no loss_mask: every token trained on); no id column (batch ids are 2**64-1); no tokenizer (padding uses id 0 unless pad_id=; no vocabulary check); no rejects table or provenance'
    """
    names = schema.names
    if "input_ids" in names:
        kind, what = _text(schema, where)
    elif "image" in names:
        kind, what, image = _image(schema, where)
        return _metadata(kind, where, what, "id" in names, image=image)
    else:
        raise PrepError(f"{where} is a Lance table prep did not write, and it lacks the columns a row needs: token ids "
                        f"`input_ids` (list<int>), or `image` (fixed_size_list<uint8>) with `label`; it has {names}")
    return _metadata(kind, where, what, "id" in names)


def _metadata(kind: str, where: str, what: str, has_id: bool, image: ImageInfo | None = None) -> TableMetadata:
    said = [f"kind {kind} ({what})"]
    said += [] if has_id else ["no id column (batch ids are 2**64-1)"]
    said += [] if kind == "images" else ["no tokenizer (padding uses id 0 unless pad_id=; no vocabulary check)"]
    said += ["no rejects table or provenance"]
    return TableMetadata(kind=kind, prep_version="?", image=image,  # type: ignore[arg-type]
                         inferred=f"{where} was {_NOT_PREP}: " + "; ".join(said))


def _shown(t: pa.DataType) -> str:
    """``list<int32>`` rather than Arrow's ``list<item: int32>``."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"{'large_' if pa.types.is_large_list(t) else ''}list<{t.value_type}>"
    return str(t)


def _is_list_of(t: pa.DataType, ok: Callable[[pa.DataType], bool]) -> bool:
    return bool((pa.types.is_list(t) or pa.types.is_large_list(t)) and ok(t.value_type))


def _text(schema: pa.Schema, where: str) -> tuple[str, str]:
    ids = schema.field("input_ids").type
    if not _is_list_of(ids, pa.types.is_integer):
        raise PrepError(f"{where}: column input_ids is {_shown(ids)}, not a list of token ids (list<int32> or list<int64>): "
                        "cast it, or write it as Python lists of ints")
    if "loss_mask" not in schema.names:
        return "pretrain", f"input_ids {_shown(ids)}; no loss_mask: every token trained on"
    mask = schema.field("loss_mask").type
    if not _is_list_of(mask, lambda v: pa.types.is_integer(v) or pa.types.is_boolean(v)):
        raise PrepError(f"{where}: column loss_mask is {_shown(mask)}, not a list of 0/1 per token (list<uint8> or list<bool>): "
                        "cast it, or drop it to train on every token")
    return "sft", f"input_ids {_shown(ids)}; loss_mask {_shown(mask)}: trained where it is non-zero"


def _image(schema: pa.Schema, where: str) -> tuple[str, str, ImageInfo]:
    image = schema.field("image").type
    if not (pa.types.is_fixed_size_list(image) and pa.types.is_uint8(image.value_type)):
        raise PrepError(f"{where}: column image is {image}, not decoded pixels (fixed_size_list<uint8>[H*W*C]): "
                        "decode the images with `prep decode-images`")
    if "label" not in schema.names or not pa.types.is_integer(schema.field("label").type):
        raise PrepError(f"{where}: an image table needs an integer `label` column beside `image`; it has {schema.names}")
    n = image.list_size
    for channels in (3, 1):
        side = math.isqrt(n // channels)
        if n % channels == 0 and side * side * channels == n:
            return "images", (f"image {n:,} bytes a row read as a square {side}x{side}x{channels} HWC image, the "
                              f"only shape its length tells; label {schema.field('label').type}"), \
                ImageInfo(shape=(side, side, channels))
    raise PrepError(f"{where}: column image holds {n:,} bytes a row, not a square RGB or grey image, so its shape "
                    "cannot be told: prepare the images with `prep decode-images`, which records it")
