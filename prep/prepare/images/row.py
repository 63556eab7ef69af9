"""One image -> its row (:class:`ImageRow`) or why it is rejected: runs in a chunk's sandbox.

Resolve the label, decode by content, fit to the target size, lay out as HWC, optionally
re-encode. Any exception raised for one image, whatever its type and stage, rejects that
image with the stage, the exception's type and its message. Imports torch and the
decoders: :mod:`prep.prepare.images.worker` imports this module only where it decodes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from prep.errors import described
from prep.prepare.faults import maybe_raise
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.decode import ImageError, decode
from prep.prepare.images.labels import LabelError, LabelMap
from prep.prepare.images.transform import Fit, fit

__all__ = ["ImageRow", "image_row"]


@dataclass(frozen=True, slots=True)
class ImageRow:
    """One image, ready: every column's value, computed before any is appended."""

    item: Any
    hwc: np.ndarray
    encoded: bytes
    label: int
    name: str
    format: str
    frames: int
    via_pil: bool


def image_row(item: Any, poison: str | None, cfg: ImagesConfig, labels: LabelMap, fit_: Fit) -> ImageRow | str:
    """The image's row, or why it is rejected."""
    if poison is not None:  # crashed or hung this worker before: rejected, not decoded again
        return poison
    h, w, c = cfg.shape
    stage = "label"
    try:
        label, name = labels.resolve(item.label)
        stage = "decode"
        maybe_raise(stage, item.source)
        dec = decode(item.data, c, cfg.max_pixels)
        stage = "resize"
        maybe_raise(stage, item.source)
        chw = fit(dec.pixels, fit_)
        if tuple(chw.shape) != (c, h, w):  # a decoder broke its contract: never misalign rows
            return f"decoded to shape {tuple(chw.shape)}, expected {(c, h, w)}; please report this file"
        stage = "encode"
        maybe_raise(stage, item.source)
        hwc = chw.permute(1, 2, 0).contiguous().numpy()
        encoded = _encode(hwc, chw, cfg.encode, cfg.quality) if cfg.encode != "none" else b""
    except (LabelError, ImageError) as exc:
        return str(exc)
    except Exception as exc:  # whatever a library raises for this one image costs this image alone
        return f"{stage} failed: {described(exc)}"
    return ImageRow(item, hwc, encoded, label, name, dec.format, dec.frames, dec.via_pil)


def _encode(hwc: np.ndarray, chw: torch.Tensor, fmt: str, quality: int) -> bytes:
    if fmt == "jpeg":
        from torchvision.io import encode_jpeg

        return encode_jpeg(chw, quality=quality).numpy().tobytes()
    from PIL import Image  # torchvision has no WebP encoder

    buf = io.BytesIO()
    Image.fromarray(hwc[:, :, 0] if hwc.shape[2] == 1 else hwc).save(buf, "WEBP", quality=quality)
    return buf.getvalue()
