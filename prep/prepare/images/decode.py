"""Encoded image bytes -> a ``CHW`` uint8 tensor, RGB or grayscale, upright.

The format is found from the content, never from the file name, so a GIF or PNG
named ``.jpg`` decodes as what it is: JPEG and PNG by their magic bytes and header
(read here, for the size check), anything else by Pillow's header parser.
torchvision (``torchvision.io.decode_image``: libjpeg-turbo, libpng, giflib, libwebp)
decodes JPEG, PNG and still GIF and WebP, converting any mode (grayscale, palette,
RGBA, CMYK, 16-bit) and applying the EXIF orientation. Pillow is the fallback, and
only for what torchvision cannot decode or should not: other formats (BMP, TIFF,
ICO...), animated GIF and WebP (Pillow decodes the first frame alone, where
torchvision would decode every frame), and any file torchvision refuses that Pillow
can still read. Alpha is dropped, not composited (as both libraries' RGB conversions
do). Images over ``max_pixels`` are refused from their header, before decoding.

Anything that cannot be decoded raises :class:`ImageError`, whose message is the
reject reason: whatever a library raises on a malformed file (Pillow raises
``TypeError``, ``KeyError``, ``SyntaxError``... from its parsers) becomes one.
"""

from __future__ import annotations

import io
import struct
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms.v2 import functional as F

from prep.errors import described

__all__ = ["ImageError", "Decoded", "decode", "TORCHVISION_FORMATS"]

# torchvision 0.29 deprecates its image codecs in favour of TorchCodec, which this
# project does not ship yet; the codecs still work, so say it once in the docs, not per image.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision", category=DeprecationWarning)

TORCHVISION_FORMATS = frozenset({"JPEG", "MPO", "PNG", "GIF", "WEBP"})
_SIXTEEN_BIT = {"I;16", "I;16B", "I;16L", "I;16N", "I"}


class ImageError(ValueError):
    """An input that is not a usable image; the message is the reject reason."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded image.

    Args:
        pixels: ``(C, H, W)`` uint8 tensor, C = 3 (RGB) or 1.
        format: what the content is (Pillow's name: ``JPEG``, ``PNG``, ``GIF``...).
        frames: frames in the file (the first was kept).
        via_pil: True when Pillow decoded it (torchvision could not).
    """

    pixels: torch.Tensor
    format: str
    frames: int
    via_pil: bool


_MAGIC = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF8", "GIF"), (b"BM", "BMP"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"))


def _magic(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return next((name for magic, name in _MAGIC if data.startswith(magic)), None)


_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from the first SOF marker, skipping segments by their length."""
    i, n = 2, len(data)
    while i + 9 < n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
        elif marker in _SOF:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        elif marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
        else:
            i += 2 + struct.unpack(">H", data[i + 2 : i + 4])[0]
    return None


def _quick_size(fmt: str | None, data: bytes) -> tuple[int, int] | None:
    """Image size read straight from a JPEG or PNG header (cheaper than Pillow's parser)."""
    if fmt == "JPEG":
        return _jpeg_size(data)
    if fmt == "PNG" and data[12:16] == b"IHDR" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    return None  # GIF goes through Pillow, which counts its frames


def _check_size(fmt: str, width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise ImageError(f"{fmt} of {width}x{height} pixels exceeds max_pixels={max_pixels}; raise max_pixels to accept it")
    if width == 0 or height == 0:
        raise ImageError(f"{fmt} of {width}x{height} pixels is empty")


def _header(data: bytes, max_pixels: int) -> tuple[Image.Image, str]:
    """Pillow's view of the header: the format of anything it knows, its size and frames."""
    try:
        im = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        fmt = _magic(data)
        if fmt:
            raise ImageError(f"corrupt {fmt}: starts like one but its header cannot be read") from None
        raise ImageError(f"not an image: unrecognized content starting {data[:16]!r}") from None
    except Image.DecompressionBombError as exc:
        raise ImageError(f"too many pixels to decode safely: {exc}") from None
    except Exception as exc:  # a recognized format whose header is broken
        raise ImageError(f"unreadable image header: {type(exc).__name__}: {exc}") from None
    fmt = im.format or "unknown"
    _check_size(fmt, *im.size, max_pixels)
    return im, fmt


def _torchvision(data: bytes, channels: int) -> tuple[torch.Tensor, int]:
    """``(pixels, frames)``; raises RuntimeError when torchvision cannot decode ``data``."""
    mode = ImageReadMode.RGB if channels == 3 else ImageReadMode.GRAY
    out = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=mode, apply_exif_orientation=True)
    frames = 1
    if out.ndim == 4:  # an animated image Pillow did not see as one: (frames, C, H, W)
        frames, out = out.shape[0], out[0]
    if out.dtype != torch.uint8:  # 16-bit PNG
        out = F.to_dtype(out, torch.uint8, scale=True)
    return _channels(out, channels), frames


def _channels(img: torch.Tensor, channels: int) -> torch.Tensor:
    """Enforces the channel count: some decoders (GIF) ignore the requested mode."""
    if img.shape[0] == channels:
        return img
    if img.shape[0] in (2, 4):  # gray+alpha, RGBA: drop alpha
        img = img[:-1]
    if channels == 1 and img.shape[0] == 3:
        return F.rgb_to_grayscale(img, num_output_channels=1)
    if channels == 3 and img.shape[0] == 1:
        return img.expand(3, -1, -1).contiguous()
    return img


def _pil(im: Image.Image, channels: int) -> torch.Tensor:
    im.seek(0)
    im = ImageOps.exif_transpose(im)
    if im.mode in _SIXTEEN_BIT:  # Pillow's convert() clips 16-bit values; scale them as torchvision does
        arr = (np.clip(np.asarray(im, dtype=np.int64), 0, 65535) >> 8).astype(np.uint8)
        im = Image.fromarray(arr, "L")
    arr = np.asarray(im.convert("RGB" if channels == 3 else "L"))
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return torch.from_numpy(np.array(arr.transpose(2, 0, 1), order="C"))  # a writable copy


def decode(data: bytes, channels: int = 3, max_pixels: int = 100_000_000) -> Decoded:
    """Decodes ``data`` by content into a ``(channels, H, W)`` uint8 tensor.

    Args:
        data: the encoded file.
        channels: 3 for RGB, 1 for grayscale.
        max_pixels: refuse images larger than this before decoding.

    Returns:
        The pixels, the detected format, the frame count and which library decoded it.

    Raises:
        ImageError: empty, not an image, truncated or corrupt, or too large.

    >>> import io; from PIL import Image
    >>> buf = io.BytesIO(); Image.new("L", (4, 2), 7).save(buf, "PNG")
    >>> d = decode(buf.getvalue()); tuple(d.pixels.shape), d.format, d.via_pil
    ((3, 2, 4), 'PNG', False)
    """
    try:
        return _decode(data, channels, max_pixels)
    except ImageError:
        raise
    except Exception as exc:  # a parser's own failure on this file (Pillow's TIFF frame count raises TypeError)
        raise ImageError(f"cannot decode {_magic(data) or 'image'}: {described(exc)}") from None


def _decode(data: bytes, channels: int, max_pixels: int) -> Decoded:
    if not data:
        raise ImageError("empty file (0 bytes)")
    fmt = _magic(data)
    size = _quick_size(fmt, data)
    tv_error = None
    if size is not None:  # JPEG or PNG with a readable header: no need for Pillow's parser
        _check_size(fmt, *size, max_pixels)
        try:
            pixels, frames = _torchvision(data, channels)
            return Decoded(pixels, fmt, frames, False)
        except RuntimeError as exc:
            tv_error = _short(exc)
    im, fmt = _header(data, max_pixels)
    frames = int(getattr(im, "n_frames", 1) or 1)
    if tv_error is None and fmt in TORCHVISION_FORMATS and frames == 1:  # animated: Pillow decodes frame 0 only
        try:
            pixels, frames = _torchvision(data, channels)
            return Decoded(pixels, fmt, frames, False)
        except RuntimeError as exc:
            tv_error = _short(exc)
    try:
        pixels = _pil(im, channels)
    except Exception as exc:
        why = tv_error or f"{type(exc).__name__}: {exc}"
        raise ImageError(f"corrupt or truncated {fmt}: {why}") from None
    return Decoded(pixels, fmt, frames, True)


def _short(exc: RuntimeError) -> str:
    """torchvision's message without its C++ source location."""
    return str(exc).strip().splitlines()[-1].split(", ")[-1]
