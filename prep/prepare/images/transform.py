"""Fit a decoded image to the configured size: resize, then center-crop or pad.

``crop`` is the classic evaluation transform, ``Resize(shorter side) + CenterCrop``,
computed with torchvision's tensor kernels (``resize`` with antialias on uint8 is
vectorized and matches Pillow within 1 level for bilinear). For a square target it
gives exactly what ``torchvision.transforms.v2.Resize(S)`` followed by ``CenterCrop(S)``
gives. ``pad`` scales the longer side to fit and pads the rest with ``pad_value``.

Images of extreme aspect ratio (the resized longer side beyond ``MAX_STRETCH`` times
the target's) are first center-cropped in source pixels to that ratio, so a 10000x10
banner never becomes a 224x224000 intermediate; the kept center differs from the
unbounded result only by sub-pixel rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as F

__all__ = ["Fit", "fit", "MAX_STRETCH"]

MAX_STRETCH = 4

_MODES = {
    "nearest": InterpolationMode.NEAREST,
    "nearest-exact": InterpolationMode.NEAREST_EXACT,
    "bilinear": InterpolationMode.BILINEAR,
    "bicubic": InterpolationMode.BICUBIC,
}


@dataclass(frozen=True, slots=True)
class Fit:
    """How to fit images: target ``height`` x ``width``, ``mode`` crop/pad, interpolation."""

    height: int
    width: int
    mode: str = "crop"
    interpolation: str = "bilinear"
    antialias: bool = True
    pad_value: int = 0


def _resized_size(h: int, w: int, fit_: Fit) -> tuple[int, int]:
    """Size after scaling: the binding side lands exactly on the target, the other is truncated."""
    th, tw = fit_.height, fit_.width
    if fit_.mode == "crop":
        if th * w >= tw * h:  # height binds (image is wider than the target)
            return th, max(tw, int(th * w / h))
        return max(th, int(tw * h / w)), tw
    if th * w >= tw * h:  # width binds (image is taller than the target)
        return max(1, min(th, int(tw * h / w))), tw
    return th, max(1, min(tw, int(th * w / h)))


def _bound_aspect(img: torch.Tensor, fit_: Fit) -> torch.Tensor:
    h, w = img.shape[-2:]
    th, tw = fit_.height, fit_.width
    if w * th > MAX_STRETCH * tw * h:  # too wide: keep the center MAX_STRETCH target widths
        keep = max(1, round(MAX_STRETCH * tw * h / th))
        return F.center_crop(img, [h, keep])
    if h * tw > MAX_STRETCH * th * w:  # too tall
        keep = max(1, round(MAX_STRETCH * th * w / tw))
        return F.center_crop(img, [keep, w])
    return img


def fit(img: torch.Tensor, fit_: Fit) -> torch.Tensor:
    """Returns ``img`` (``(C, H, W)`` uint8) resized and cropped or padded to the target.

    >>> out = fit(torch.zeros(3, 10, 40, dtype=torch.uint8), Fit(8, 8, "pad", pad_value=9))
    >>> tuple(out.shape), int(out[0, 0, 0]), int(out[0, 4, 4])
    ((3, 8, 8), 9, 0)
    """
    if fit_.mode == "crop":
        img = _bound_aspect(img, fit_)
    h, w = img.shape[-2:]
    size = _resized_size(h, w, fit_)
    if size != (h, w):
        antialias = fit_.antialias and fit_.interpolation in ("bilinear", "bicubic")
        img = F.resize(img, list(size), interpolation=_MODES[fit_.interpolation], antialias=antialias)
    if fit_.mode == "crop":
        return F.center_crop(img, [fit_.height, fit_.width])
    dh, dw = fit_.height - size[0], fit_.width - size[1]
    if dh or dw:
        img = F.pad(img, [dw // 2, dh // 2, dw - dw // 2, dh - dh // 2], fill=fit_.pad_value)
    return img
