"""One encoded image as a source reader hands it to the decoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Sample", "FILE_KEY", "ROW_KEY"]

# Ids are ``stable_ids(id_key, id_pos)``. Readers whose images do not share a container
# use a constant key and put the hash of the image's own key in ``id_pos``, so a
# chunk's ids are one vectorized call whatever the source.
FILE_KEY = "prep.images/file"  # id_pos = key_hash(path relative to the input root, or as the manifest writes it)
ROW_KEY = "prep.images/key"  # id_pos = key_hash(the Parquet key_column value)


@dataclass(frozen=True, slots=True)
class Sample:
    """An encoded image and where it came from.

    Args:
        data: the encoded bytes.
        source: the ``source`` column value (file URI, ``shard.tar#member``, ``file.parquet#row=N``).
        id_key: what the id derives from: :data:`FILE_KEY`, :data:`ROW_KEY`, or the shard /
            Parquet file path relative to the input root.
        id_pos: a position within ``id_key``: a key hash, or a row number.
        label: the raw label (class name, int, or None), resolved by a
            :class:`~prep.prepare.images.labels.LabelMap`.
        reject_source: the URI a reject of this image names.
        position: where in ``reject_source`` (``image``, ``member a.jpg``, ``row 3``).
    """

    data: bytes
    source: str
    id_key: str
    id_pos: int
    label: Any
    reject_source: str
    position: str
