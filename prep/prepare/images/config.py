"""The decode-images job's config: what to read, how to decode, what to store.

Every key has a default except ``input`` and ``output``, so the smallest config is
two lines. Cross-key rules (store something; a size that fits) are checked here,
before Ray starts, and fail as one-line :class:`~prep.errors.PrepError` s via
:func:`prep.runtime.config.load_config`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from prep.runtime.config import JobConfig

__all__ = ["ImagesConfig", "SourceKind", "Interpolation"]

SourceKind = Literal["auto", "imagefolder", "manifest", "webdataset", "parquet"]
Interpolation = Literal["nearest", "nearest-exact", "bilinear", "bicubic"]


class ImagesConfig(JobConfig):
    """Config of ``pipelines/decode_images.py`` / ``prep decode-images``.

    Attributes:
        source: ``imagefolder`` (``root/<class>/.../file``), ``manifest`` (CSV/JSONL/Parquet
            of path + label), ``webdataset`` (tar shards of ``key.jpg`` + ``key.cls``/``key.json``),
            ``parquet`` (a column of image bytes), or ``auto`` (default) to infer it from the input.
        size: output ``[height, width]``, or one int for a square (default 224).
        channels: 3 for RGB (default), 1 for grayscale.
        resize: ``crop`` (default): scale the shorter side to fit, then center-crop;
            ``pad``: scale the longer side to fit, then center-pad with ``pad_value``.
        interpolation: ``bilinear`` (default), ``bicubic``, ``nearest`` or ``nearest-exact``.
        antialias: low-pass when downscaling (default True; ignored by the nearest modes).
        pad_value: fill for ``resize: pad`` (0-255, default 0).
        store_pixels: write the decoded ``image`` column (default True).
        encode: also (or, with ``store_pixels: false``, only) store the resized image
            re-encoded as ``jpeg`` or ``webp`` in an ``encoded`` column; ``none`` (default).
        quality: JPEG/WebP quality 1-100 (default 90).
        keep_original: keep the source bytes in an ``original`` column with Lance blob
            encoding (readers fetch them lazily, by byte range); default False.
        labels: class names in label order. Default: discovered and sorted (ImageFolder
            folders, string labels of a manifest or Parquet file), or none for integer labels.
        path_column: manifest column holding image paths (default ``path``); relative paths
            are resolved against ``image_root``, else the manifest's folder.
        label_column: manifest/Parquet column of labels (default ``label``); null for unlabeled
            data (label -1). A missing column is an error unless it is null.
        image_column: Parquet column of encoded image bytes, or a struct with a ``bytes``
            field as Hugging Face writes (default ``image``).
        key_column: Parquet column whose value identifies a row across runs (ids derive
            from it); default: file path + row number.
        image_root: base for relative manifest paths (default: the manifest's folder).
        images_per_chunk: images per Ray task at most (default 256).
        max_pixels: images with more pixels than this are rejected before decoding
            (decompression-bomb guard; default 100,000,000).
    """

    chunk_bytes: int = Field(default=64 << 20, ge=4096)
    source: SourceKind = "auto"
    size: int | tuple[int, int] = 224
    channels: Literal[1, 3] = 3
    resize: Literal["crop", "pad"] = "crop"
    interpolation: Interpolation = "bilinear"
    antialias: bool = True
    pad_value: int = Field(default=0, ge=0, le=255)
    store_pixels: bool = True
    encode: Literal["none", "jpeg", "webp"] = "none"
    quality: int = Field(default=90, ge=1, le=100)
    keep_original: bool = False
    labels: list[str] | None = None
    path_column: str = "path"
    label_column: str | None = "label"
    image_column: str = "image"
    key_column: str | None = None
    image_root: str | None = None
    images_per_chunk: int = Field(default=256, ge=1)
    max_pixels: int = Field(default=100_000_000, ge=1)

    @field_validator("size")
    @classmethod
    def _positive_size(cls, v: int | tuple[int, int]) -> int | tuple[int, int]:
        sides = (v, v) if isinstance(v, int) else v
        if min(sides) < 1 or max(sides) > 8192:
            raise ValueError(f"each side must be 1-8192 pixels, got {v}")
        return v

    @field_validator("labels")
    @classmethod
    def _unique_labels(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(set(v)) != len(v):
            dup = sorted({x for x in v if v.count(x) > 1})
            raise ValueError(f"class names must be unique; repeated: {dup[:5]}")
        return v

    @model_validator(mode="after")
    def _stores_something(self) -> "ImagesConfig":
        if not self.store_pixels and self.encode == "none":
            raise ValueError("store_pixels is false and encode is none: nothing would be stored; set encode: jpeg or webp")
        return self

    @property
    def height(self) -> int:
        return self.size if isinstance(self.size, int) else self.size[0]

    @property
    def width(self) -> int:
        return self.size if isinstance(self.size, int) else self.size[1]

    @property
    def shape(self) -> tuple[int, int, int]:
        """Output shape, HWC."""
        return (self.height, self.width, self.channels)
