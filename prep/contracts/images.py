"""What an image table says about its images: their layout, their classes, how they were decoded.

Part of a prepared table's metadata (:mod:`prep.contracts.table`): ``image`` is the pixel
layout of the ``image`` column (:class:`ImageInfo`), and the keys ``labels``,
``source_kind``, ``encoded`` and ``decoder`` sit beside it at the top level of the object
(:class:`ImageTableInfo`), as decode-images has always written them. ``labels`` is what a
label number means (index = label); ``--append`` refuses classes that would renumber them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from prep.errors import PrepError

__all__ = ["ImageInfo", "EncodedInfo", "DecoderInfo", "ImageTableInfo", "IMAGE_TABLE_KEYS"]

IMAGE_TABLE_KEYS = ("labels", "source_kind", "encoded", "decoder")  # top-level keys of the table metadata


def _fail(where: str, what: str) -> PrepError:
    return PrepError(f"{where}: prep table metadata {what}")


def _shape(where: str, name: str, raw: Any) -> tuple[int, int, int]:
    if (not isinstance(raw, (list, tuple)) or len(raw) != 3
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in raw)):
        raise _fail(where, f"{name}={raw!r} must be a shape [H, W, C] of positive integers")
    return (raw[0], raw[1], raw[2])


def _object(where: str, name: str, raw: Any, known: set[str]) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise _fail(where, f"{name}={raw!r} must be an object")
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _fail(where, f"{name}.{unknown[0]}={raw[unknown[0]]!r} is not a field prep writes (one of {sorted(known)})")
    return raw


def _str(where: str, name: str, raw: Any) -> str:
    if not isinstance(raw, str):
        raise _fail(where, f"{name}={raw!r} must be a string")
    return raw


@dataclass(frozen=True, kw_only=True)
class ImageInfo:
    """The pixel layout of an image table's ``image`` column."""

    shape: tuple[int, int, int]
    layout: Literal["HWC"] = "HWC"
    dtype: Literal["uint8"] = "uint8"

    @classmethod
    def from_json(cls, raw: Any, where: str) -> ImageInfo:
        raw = _object(where, "image", raw, {"shape", "layout", "dtype"})
        if raw.get("layout", "HWC") != "HWC" or raw.get("dtype", "uint8") != "uint8":
            raise _fail(where, f"image={dict(raw)!r} must have layout HWC and dtype uint8")
        return cls(shape=_shape(where, "image.shape", raw.get("shape")))

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "layout": self.layout, "dtype": self.dtype}


@dataclass(frozen=True, kw_only=True)
class EncodedInfo:
    """The ``encoded`` column: each image re-encoded at the table's shape (``encode: jpeg|webp``)."""

    format: str
    quality: int
    shape: tuple[int, int, int]

    @classmethod
    def from_json(cls, raw: Any, where: str) -> EncodedInfo:
        raw = _object(where, "encoded", raw, {"format", "quality", "shape"})
        quality = raw.get("quality")
        if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
            raise _fail(where, f"encoded.quality={quality!r} must be an integer 1-100")
        return cls(format=_str(where, "encoded.format", raw.get("format")), quality=quality,
                   shape=_shape(where, "encoded.shape", raw.get("shape")))

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "quality": self.quality, "shape": list(self.shape)}


@dataclass(frozen=True, kw_only=True)
class DecoderInfo:
    """What decoded the images: the library and its fallback, and the formats seen (None: not recorded)."""

    library: str
    fallback: str
    formats: Mapping[str, int] | None = None

    @classmethod
    def from_json(cls, raw: Any, where: str) -> DecoderInfo:
        raw = _object(where, "decoder", raw, {"library", "fallback", "formats"})
        formats = raw.get("formats")
        if formats is not None and (not isinstance(formats, Mapping) or not all(
                isinstance(k, str) and not isinstance(v, bool) and isinstance(v, int) and v >= 0 for k, v in formats.items())):
            raise _fail(where, f"decoder.formats={formats!r} must be an object of integers >= 0")
        return cls(library=_str(where, "decoder.library", raw.get("library")),
                   fallback=_str(where, "decoder.fallback", raw.get("fallback")),
                   formats=dict(formats) if formats is not None else None)

    def to_json(self) -> dict[str, Any]:
        return {"library": self.library, "fallback": self.fallback,
                **({"formats": dict(self.formats)} if self.formats is not None else {})}


@dataclass(frozen=True, kw_only=True)
class ImageTableInfo:
    """What an image table says beyond its pixel layout.

    Args:
        labels: the class names; a row's label is the index of its class here.
        source_kind: the kind of input (``imagefolder``, ``manifest``, ``webdataset``, ``parquet``, ``ray-data``).
        encoded: the ``encoded`` column's format, when the table has one.
        decoder: what decoded the images.
    """

    labels: tuple[str, ...] = ()
    source_kind: str | None = None
    encoded: EncodedInfo | None = None
    decoder: DecoderInfo | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], where: str) -> ImageTableInfo:
        """The image keys of the table metadata ``raw`` (its top-level object); missing ones are not recorded."""
        labels = raw.get("labels") or []
        if not isinstance(labels, list) or not all(isinstance(n, str) for n in labels):
            raise _fail(where, f"labels={labels!r} must be a list of class names")
        kind = raw.get("source_kind")
        return cls(labels=tuple(labels), source_kind=_str(where, "source_kind", kind) if kind is not None else None,
                   encoded=EncodedInfo.from_json(raw["encoded"], where) if raw.get("encoded") is not None else None,
                   decoder=DecoderInfo.from_json(raw["decoder"], where) if raw.get("decoder") is not None else None)

    def to_json(self) -> dict[str, Any]:
        """Its keys of the table metadata (``encoded`` null when the table has no ``encoded`` column)."""
        return {"labels": list(self.labels), **({"source_kind": self.source_kind} if self.source_kind is not None else {}),
                "encoded": self.encoded.to_json() if self.encoded else None,
                **({"decoder": self.decoder.to_json()} if self.decoder else {})}
