"""One encoded image as a source reader hands it to the decoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Sample"]


@dataclass(frozen=True, slots=True)
class Sample:
    """An encoded image and where it came from.

    Args:
        data: the encoded bytes.
        source: the ``source`` column value (file URI, ``shard.tar#member``, ``file.parquet#row=N``).
        id_key: the stable key the id derives from (path relative to the input root, shard key...).
        id_pos: a position within ``id_key`` (0 for a file; a member-key hash; a row number).
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
