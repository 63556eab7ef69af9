"""Image preparation without Ray: decoding by content, fitting, labels, every source kind, bad inputs.

Builders here (``bad_tree``, ``write_tar``, ``write_parquet``) are reused by
tests/test_images_job.py, which runs the same inputs through the Ray job.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import struct
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image, ImageOps

from prep.runtime.config import load_config
from prep.errors import PrepError
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.decode import ImageError, decode
from prep.prepare.images.labels import LabelError, LabelMap
from prep.prepare.images.sources import plan
from prep.prepare.images.transform import MAX_STRETCH, Fit, fit
from prep.prepare.images.worker import _BATCH_ROWS, ImageChunkWorker
from prep.prepare.isolation import Progress
from prep.io.storage import S3Options

HYMENOPTERA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "hymenoptera" / "train"
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities of TorchVision:DeprecationWarning")
needs_photos = pytest.mark.skipif(not HYMENOPTERA.is_dir(), reason=f"real photos not found at {HYMENOPTERA}")


# ---------------------------------------------------------------- builders


def encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def noise(w: int, h: int, seed: int = 0) -> Image.Image:
    """A smooth-ish random RGB image (noise upsampled), so resizing is not trivial."""
    small = np.random.default_rng(seed).integers(0, 256, (max(1, h // 4), max(1, w // 4), 3), dtype=np.uint8)
    return Image.fromarray(small).resize((w, h), Image.BILINEAR)


def animated_gif(values=(10, 200, 90)) -> bytes:
    frames = [Image.fromarray(np.full((30, 40, 3), v, np.uint8)) for v in values]
    return encode(frames[0], "GIF", save_all=True, append_images=frames[1:])


def exif_rotated_jpeg(orientation: int = 6) -> bytes:
    im = noise(80, 48, seed=5)
    exif = im.getexif()
    exif[0x0112] = orientation
    return encode(im, "JPEG", quality=95, exif=exif.tobytes())


def tiff_without_frame_width() -> bytes:
    """A 2-frame TIFF whose second frame has no ImageWidth tag: Pillow opens it, then raises
    ``TypeError: Missing dimensions`` when counting its frames (issue 21, finding 2)."""
    data = bytearray(encode(Image.new("RGB", (6, 4), (200, 10, 10)), "TIFF", save_all=True,
                            append_images=[Image.new("RGB", (6, 4), (10, 200, 10))]))
    assert data[:4] == b"II*\x00"  # little-endian: IFD offsets and tags are "<I" and "<H"
    first = struct.unpack_from("<I", data, 4)[0]
    second = struct.unpack_from("<I", data, first + 2 + 12 * struct.unpack_from("<H", data, first)[0])[0]
    for k in range(struct.unpack_from("<H", data, second)[0]):
        entry = second + 2 + 12 * k
        if struct.unpack_from("<H", data, entry)[0] == 256:  # ImageWidth -> a private tag nobody reads
            struct.pack_into("<H", data, entry, 0xFDE8)
    return bytes(data)


def photos(n: int) -> list[Path]:
    """``n`` real photos spread over both classes, sorted."""
    files = sorted(p for p in HYMENOPTERA.rglob("*") if p.is_file() and p.suffix == ".jpg" and " " not in p.name)
    return files[:: max(1, len(files) // n)][:n]


GOOD = {  # relative path -> what it is; each must decode
    "ants/a photo with spaces.jpg": "real JPEG, spaces in the name",
    "ants/fourmi naïve — café.jpg": "real JPEG, non-ASCII name",
    "ants/really a gif.jpg": "GIF named .jpg",
    "ants/really a png.jpg": "PNG named .jpg",
    "ants/tiny.png": "5x3, smaller than the target",
    "ants/banner.jpg": "2000x20, extreme aspect",
    "ants/tower.png": "10x900, extreme aspect",
    "ants/animated.gif": "3 frames",
    "bees/cmyk.jpg": "CMYK JPEG",
    "bees/gray.jpg": "grayscale JPEG",
    "bees/rgba.png": "RGBA PNG",
    "bees/palette.png": "palette PNG with transparency",
    "bees/sixteen.png": "16-bit grayscale PNG",
    "bees/rotated.jpg": "EXIF orientation 6",
    "bees/bitmap.bmp": "BMP (Pillow fallback)",
    "bees/anim.webp": "animated WebP (Pillow fallback)",
}
BAD = {  # relative path -> words expected in the reject reason
    "bees/truncated.jpg": "truncated",
    "bees/no-width.tif": "cannot decode TIFF: TypeError: Missing dimensions",
    "bees/empty.jpg": "empty file",
    "bees/notes.txt": "not an image",
    "bees/fake.jpg": "not an image",
    "stray.jpg": "class folder",
}


def bad_tree(root: Path) -> Path:
    """An ImageFolder tree with every awkward input of the issue (GOOD decode, BAD reject)."""
    real = photos(2)
    files: dict[str, bytes] = {
        "ants/a photo with spaces.jpg": real[0].read_bytes(),
        "ants/fourmi naïve — café.jpg": real[1].read_bytes() if len(real) > 1 else encode(noise(300, 200), "JPEG"),
        "ants/really a gif.jpg": encode(noise(120, 90, 1).convert("P"), "GIF"),
        "ants/really a png.jpg": encode(noise(90, 120, 2), "PNG"),
        "ants/tiny.png": encode(noise(5, 3, 3), "PNG"),
        "ants/banner.jpg": encode(noise(2000, 20, 4), "JPEG"),
        "ants/tower.png": encode(noise(10, 900, 6), "PNG"),
        "ants/animated.gif": animated_gif(),
        "bees/cmyk.jpg": encode(noise(64, 64, 7).convert("CMYK"), "JPEG"),
        "bees/gray.jpg": encode(noise(64, 80, 8).convert("L"), "JPEG"),
        "bees/rgba.png": encode(noise(70, 50, 9).convert("RGBA"), "PNG"),
        "bees/palette.png": encode(noise(70, 50, 10).convert("P"), "PNG", transparency=0),
        "bees/sixteen.png": encode(Image.fromarray((np.arange(64 * 48).reshape(48, 64) * 21).astype(np.uint16)), "PNG"),
        "bees/rotated.jpg": exif_rotated_jpeg(),
        "bees/bitmap.bmp": encode(noise(33, 44, 11), "BMP"),
        "bees/anim.webp": encode(noise(40, 30, 12), "WEBP", save_all=True, append_images=[noise(40, 30, 13)]),
        "bees/truncated.jpg": real[0].read_bytes()[: real[0].stat().st_size // 2],
        "bees/no-width.tif": tiff_without_frame_width(),
        "bees/empty.jpg": b"",
        "bees/notes.txt": b"field notes: 3 ants, 2 bees\n",
        "bees/fake.jpg": b"<html><body>404 not found</body></html>",
        "stray.jpg": encode(noise(50, 50, 14), "JPEG"),
        ".DS_Store": b"\x00\x00\x00\x01Bud1",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def write_tar(path: Path, images: list[Path], *, label_of, as_json: bool = False, truncate: bool = False) -> Path:
    """A WebDataset shard: ``<key>.jpg`` + ``<key>.cls`` (or ``.json``) per image."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i, img in enumerate(images):
            key = f"sample{i:04d}"
            label = label_of(img)
            extra = json.dumps({"label": label}).encode() if as_json else str(label).encode()
            for name, data in ((f"{key}.jpg", img.read_bytes()), (f"{key}.{'json' if as_json else 'cls'}", extra)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[: len(data) * 2 // 3] if truncate else data)
    return path


def write_parquet(path: Path, images: list[Path], *, labels, hf_struct: bool = False, row_group_size: int = 3) -> Path:
    """Image bytes in Parquet: a binary column, or Hugging Face's ``struct<bytes, path>``."""
    blobs = [p.read_bytes() for p in images]
    if hf_struct:
        image = pa.array([{"bytes": b, "path": p.name} for b, p in zip(blobs, images)], pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    else:
        image = pa.array(blobs, pa.binary())
    table = pa.table({"image": image, "label": pa.array(labels), "name": [p.name for p in images]})
    if hf_struct:
        features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": ["ants", "bees"]}}
        table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def run_worker(cfg: ImagesConfig):
    """The job's work without Ray: plan, then every chunk through the worker, in order."""
    planned = plan(cfg)
    worker = ImageChunkWorker(cfg, planned.labels, S3Options())
    outs = [worker(c) for c in planned.chunks]
    table = pa.concat_tables([o.table.read_all() for o in outs])  # reading the stream completes rejects and counts
    rejects = [r for o in outs for r in o.rejects]
    counts = sum((o.counts for o in outs), __import__("collections").Counter())
    return planned, table, rejects, counts


def config(tmp_path: Path, **kw) -> ImagesConfig:
    return load_config(ImagesConfig, None, output=str(tmp_path / "out.lance"), **kw)


def reference_pil(data: bytes, size: int = 224) -> np.ndarray:
    """Straightforward Pillow: open, upright, RGB, bilinear shorter side, center crop."""
    im = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    w, h = im.size
    nw, nh = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    arr = np.asarray(im.resize((nw, nh), Image.BILINEAR))
    top, left = int(round((nh - size) / 2)), int(round((nw - size) / 2))
    return arr[top : top + size, left : left + size]


def reference_torchvision(data: bytes, size: int = 224) -> np.ndarray:
    """Straightforward torchvision: decode_image (RGB, EXIF) -> Resize(size) -> CenterCrop(size)."""
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms import v2

    img = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB, apply_exif_orientation=True)
    img = img[0] if img.ndim == 4 else img
    return v2.CenterCrop(size)(v2.Resize(size, antialias=True)(img)).permute(1, 2, 0).numpy()


# ---------------------------------------------------------------- decode


@pytest.mark.parametrize(
    "mode,fmt",
    [("RGB", "JPEG"), ("L", "JPEG"), ("CMYK", "JPEG"), ("RGBA", "PNG"), ("LA", "PNG"), ("P", "PNG"), ("1", "PNG"), ("P", "GIF"), ("RGB", "WEBP"), ("RGB", "BMP"), ("RGB", "TIFF")],
)
def test_any_mode_decodes_to_the_same_rgb_as_pillow(mode, fmt):
    data = encode(noise(40, 30, 1).convert(mode), fmt)
    got = decode(data)
    want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert got.pixels.dtype == torch.uint8 and tuple(got.pixels.shape) == (3, 30, 40)
    assert np.array_equal(got.pixels.permute(1, 2, 0).numpy(), want)
    assert got.via_pil == (fmt in ("BMP", "TIFF"))


def test_format_comes_from_content_not_the_name():
    assert decode(encode(noise(20, 10), "GIF")).format == "GIF"
    assert decode(encode(noise(20, 10), "PNG")).format == "PNG"


def test_sixteen_bit_png_scales_to_eight_bits():
    values = (np.arange(48 * 64).reshape(48, 64) * 21).astype(np.uint16)
    got = decode(encode(Image.fromarray(values), "PNG")).pixels
    assert np.array_equal(got[0].numpy(), (values >> 8).astype(np.uint8))
    assert got.shape == (3, 48, 64)


def test_exif_orientation_is_applied_like_pillow():
    data = exif_rotated_jpeg(6)
    got = decode(data).pixels.permute(1, 2, 0).numpy()
    want = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    assert got.shape == (80, 48, 3) and np.array_equal(got, want)


def test_animated_gif_keeps_the_first_frame():
    got = decode(animated_gif((10, 200, 90)))
    assert got.frames == 3 and got.via_pil  # Pillow decodes frame 0 alone
    assert int(got.pixels.float().mean().round()) == 10


def test_animated_webp_falls_back_to_pillow_first_frame():
    frames = [Image.fromarray(np.full((30, 40, 3), v, np.uint8)) for v in (30, 220)]
    got = decode(encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True))
    assert got.via_pil and got.frames == 2 and int(got.pixels.float().mean().round()) == 30


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "WEBP", "BMP"])
def test_grayscale_output_has_one_channel_whatever_the_decoder(fmt):
    data = encode(noise(20, 10).convert("P") if fmt == "GIF" else noise(20, 10), fmt)
    got = decode(data, channels=1).pixels
    want = np.asarray(Image.open(io.BytesIO(data)).convert("L")).astype(int)
    assert tuple(got.shape) == (1, 10, 20) and np.abs(got[0].numpy().astype(int) - want).max() <= 1


@pytest.mark.parametrize(
    "data,words",
    [
        (b"", "empty file"),
        (b"just some text, not pixels", "not an image"),
        (b"\xff\xd8\xff\xe0" + b"\x00" * 10, "header"),
    ],
)
def test_unusable_bytes_raise_image_error_with_reason(data, words):
    with pytest.raises(ImageError, match=words):
        decode(data)


def test_a_parser_failure_of_any_type_is_an_image_error_naming_it():
    """Pillow raises TypeError, not an image error, counting this TIFF's frames; decode's contract is ImageError only."""
    with pytest.raises(ImageError, match="^cannot decode TIFF: TypeError: Missing dimensions$"):
        decode(tiff_without_frame_width())


def test_truncated_jpeg_is_an_error_not_gray_pixels():
    data = encode(noise(400, 300), "JPEG")
    with pytest.raises(ImageError, match="truncated"):
        decode(data[: len(data) // 2])


def test_max_pixels_refuses_before_decoding():
    with pytest.raises(ImageError, match="max_pixels"):
        decode(encode(noise(100, 100), "PNG"), max_pixels=5000)


# ---------------------------------------------------------------- fit


@pytest.mark.parametrize("w,h", [(500, 375), (375, 500), (224, 224), (300, 224), (1000, 260)])
def test_crop_is_exactly_torchvision_resize_then_center_crop(w, h):
    from torchvision.transforms import v2

    img = torch.from_numpy(np.asarray(noise(w, h, w)).transpose(2, 0, 1).copy())
    want = v2.CenterCrop(224)(v2.Resize(224, antialias=True)(img))
    assert torch.equal(fit(img, Fit(224, 224)), want)


def test_smaller_images_are_upscaled_and_nonsquare_targets_fill():
    img = torch.from_numpy(np.asarray(noise(5, 3)).transpose(2, 0, 1).copy())
    assert fit(img, Fit(224, 224)).shape == (3, 224, 224)
    assert fit(img, Fit(64, 128, "pad")).shape == (3, 64, 128)
    assert fit(img, Fit(64, 128)).shape == (3, 64, 128)


def test_pad_keeps_the_whole_image_centered():
    img = torch.full((3, 10, 40), 200, dtype=torch.uint8)
    out = fit(img, Fit(40, 40, "pad", pad_value=7))
    assert out.shape == (3, 40, 40)
    assert (out[:, :15] == 7).all() and (out[:, 25:] == 7).all() and (out[:, 15:25] == 200).all()


def test_extreme_aspect_is_bounded_before_resizing():
    img = torch.zeros((3, 10, 10000), dtype=torch.uint8)
    img[:, :, 4990:5010] = 255  # a bright center survives
    out = fit(img, Fit(224, 224))
    assert out.shape == (3, 224, 224) and out[:, :, 112].float().mean() > 100
    tall = fit(torch.zeros((3, 10000, 10), dtype=torch.uint8), Fit(32, 32))
    assert tall.shape == (3, 32, 32) and MAX_STRETCH >= 1


# ---------------------------------------------------------------- labels and config


def test_labels_sorted_names_ints_and_errors():
    m = LabelMap.discovered(["bees", "ants", "bees"])
    assert m.names == ("ants", "bees") and m.resolve("bees") == (1, "bees") and m.resolve(None) == (-1, "")
    assert LabelMap(None).resolve(3) == (3, "3") and LabelMap(None).resolve("4") == (4, "4")
    assert m.resolve(0) == (0, "ants")
    for bad, words in (("wasps", "not one of"), (5, "outside"), (-1, "outside"), (1.5, "neither")):
        with pytest.raises(LabelError, match=words):
            m.resolve(bad)
    with pytest.raises(LabelError, match="labels:"):
        LabelMap(None).resolve("ants")


def test_config_errors_are_one_line_and_name_the_key(tmp_path):
    with pytest.raises(PrepError, match="size"):
        config(tmp_path, input="x", size=0)
    with pytest.raises(PrepError, match="nothing would be stored"):
        config(tmp_path, input="x", store_pixels=False)
    with pytest.raises(PrepError, match="interpolation"):
        config(tmp_path, input="x", interpolation="lanczos")
    assert config(tmp_path, input="x", size=[32, 64]).shape == (32, 64, 3)


# ---------------------------------------------------------------- sources + worker (no Ray)


def test_bad_inputs_each_decode_or_become_a_reject_with_reason(tmp_path):
    if not HYMENOPTERA.is_dir():
        pytest.skip("needs the real photos")
    root = bad_tree(tmp_path / "tree")
    planned, table, rejects, counts = run_worker(config(tmp_path, input=str(root), images_per_chunk=4))
    assert planned.kind == "imagefolder" and planned.labels.names == ("ants", "bees")
    written = {Path(s).relative_to(root).as_posix() for s in table.column("source").to_pylist()}
    rejected = {Path(r.source).relative_to(root).as_posix(): r.reason for r in rejects}
    assert written == set(GOOD), set(GOOD) ^ written
    assert set(rejected) == set(BAD)
    for rel, words in BAD.items():
        assert words in rejected[rel], (rel, rejected[rel])
    assert counts["rows_read"] == len(GOOD) + len(BAD) == table.num_rows + counts["rows_rejected"]
    assert counts["decoded_with_pil"] == 3 and counts["animated_first_frame_kept"] == 2  # BMP, animated WebP and GIF
    assert table.column("image").type.list_size == 224 * 224 * 3
    assert len(set(table.column("id").to_pylist())) == table.num_rows
    by_source = dict(zip(written, table.column("label_name").to_pylist()))
    assert {n for s, n in by_source.items()} <= {"ants", "bees"}


class HeldItems(Progress):
    """Records the item in hand as the sandbox's mark does (the index, or None while idle)."""

    held: int | None = None

    def items(self, items, name=str):
        for i, item in enumerate(items):
            self.held = i
            yield item, None
            self.held = None

    @contextlib.contextmanager
    def idle(self):
        held, self.held = self.held, None
        try:
            yield
        finally:
            self.held = held


def test_rows_are_handed_to_the_writer_with_no_image_in_hand(tmp_path):
    """The writer's time, and any stall or crash in it, must not be charged to the image that filled the batch."""
    root = tmp_path / "tree"
    (root / "a").mkdir(parents=True)
    for i in range(_BATCH_ROWS + 3):
        (root / "a" / f"{i:03}.png").write_bytes(encode(noise(8, 8, i), "PNG"))
    cfg = config(tmp_path, input=str(root), size=8, images_per_chunk=1000)
    planned, progress = plan(cfg), HeldItems()
    out = ImageChunkWorker(cfg, planned.labels, S3Options())(planned.chunks[0], progress)
    assert [(batch.num_rows, progress.held) for batch in out.table] == [(_BATCH_ROWS, None), (3, None)]


@needs_photos
def test_photos_match_torchvision_exactly_and_pillow_within_one_level(tmp_path):
    sample = photos(10) + [HYMENOPTERA / "ants" / "imageNotFound.gif"]
    root = tmp_path / "tree"
    for p in sample:
        (root / p.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(p, root / p.parent.name / p.name)
    _, table, rejects, _ = run_worker(config(tmp_path, input=str(root)))
    assert not rejects and table.num_rows == len(sample)
    pixels = table.column("image").combine_chunks().flatten().to_numpy().reshape(-1, 224, 224, 3)
    for src, got in zip(table.column("source").to_pylist(), pixels):
        data = Path(src).read_bytes()
        assert np.array_equal(got, reference_torchvision(data)), src
        diff = np.abs(got.astype(int) - reference_pil(data).astype(int))
        assert diff.max() <= 1 and diff.mean() < 0.05, src


@needs_photos
def test_webdataset_parquet_and_manifest_give_the_imagefolder_pixels(tmp_path):
    imgs = photos(6)
    label_of = {"ants": 0, "bees": 1}
    tar = write_tar(tmp_path / "shards" / "shard-000.tar", imgs, label_of=lambda p: label_of[p.parent.name])
    write_tar(tmp_path / "j" / "shard-000.tar", imgs, label_of=lambda p: p.parent.name, as_json=True)
    pqf = write_parquet(tmp_path / "images.parquet", imgs, labels=[label_of[p.parent.name] for p in imgs], hf_struct=True)
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("path,label\n" + "".join(f"{p},{p.parent.name}\n" for p in imgs))

    want = np.stack([reference_torchvision(p.read_bytes()) for p in imgs])
    names = [p.parent.name for p in imgs]
    for inp, extra, kind, want_names in (
        (tar.parent, {}, "webdataset", [str(label_of[n]) for n in names]),  # bare ints: no names known
        (tmp_path / "j", {"labels": ["ants", "bees"]}, "webdataset", names),
        (pqf, {}, "parquet", names),  # names from the Hugging Face ClassLabel metadata
        (manifest, {}, "manifest", names),
    ):
        planned, table, rejects, _ = run_worker(config(tmp_path, input=str(inp), **extra))
        assert planned.kind == kind and not rejects, (kind, rejects)
        got = table.column("image").combine_chunks().flatten().to_numpy().reshape(-1, 224, 224, 3)
        assert np.array_equal(got, want), kind
        assert table.column("label_name").to_pylist() == want_names, kind
        assert table.column("label").to_pylist() == [label_of[p.parent.name] for p in imgs], kind


@needs_photos
def test_container_damage_is_accounted_for(tmp_path):
    imgs = photos(6)
    (tmp_path / "s").mkdir()
    write_tar(tmp_path / "s" / "a.tar", imgs, label_of=lambda p: 0, truncate=True)
    _, table, rejects, counts = run_worker(config(tmp_path, input=str(tmp_path / "s")))
    assert 0 < table.num_rows < len(imgs)
    assert [r.position for r in rejects][-1] == "file" and "truncated or corrupt" in rejects[-1].reason
    assert counts["rows_read"] == table.num_rows + counts["rows_rejected"] and counts["files_rejected"] == 1

    manifest = tmp_path / "m.jsonl"
    lines = [json.dumps({"path": str(imgs[0]), "label": "ants"}), "{not json", json.dumps({"path": "missing.jpg", "label": "bees"}), json.dumps({"path": "", "label": "ants"})]
    manifest.write_text("\n".join(lines) + "\n")
    _, table, rejects, counts = run_worker(config(tmp_path, input=str(manifest)))
    assert table.num_rows == 1 and counts["rows_read"] == 4 and counts["rows_rejected"] == 3
    reasons = " | ".join(r.reason for r in rejects)
    assert "malformed JSON" in reasons and "file not found" in reasons and "empty" in reasons
    # a manifest row's reject names its line (issue 31 #10: 'row 1' was the 0-based count of non-blank lines)
    manifest.write_text("\n".join(lines[:1] + ["", *lines[1:2]]) + "\n")
    _, _, rejects, _ = run_worker(config(tmp_path, input=str(manifest)))
    assert [(r.source, r.position) for r in rejects] == [(str(manifest), "line 3")] and "malformed JSON" in rejects[0].reason


def test_a_dangling_symlink_in_an_image_folder_is_a_counted_reject(tmp_path):
    """Issue 31 #10: a dangling ``x.jpg`` was skipped without being counted (and a link to a good image too)."""
    (tmp_path / "in" / "ants").mkdir(parents=True)
    (tmp_path / "real.jpg").write_bytes(encode(noise(40, 30), "JPEG"))
    (tmp_path / "in" / "ants" / "a.jpg").write_bytes(encode(noise(40, 30, seed=1), "JPEG"))
    (tmp_path / "in" / "ants" / "linked.jpg").symlink_to(tmp_path / "real.jpg")
    (tmp_path / "in" / "ants" / "x.jpg").symlink_to(tmp_path / "nowhere.jpg")
    _, table, rejects, counts = run_worker(config(tmp_path, input=str(tmp_path / "in")))
    assert table.num_rows == 2 and counts["rows_read"] == 3 == table.num_rows + counts["rows_rejected"]
    assert [(Path(r.source).name, r.reason) for r in rejects] == [
        ("x.jpg", f"dangling symlink to {tmp_path / 'nowhere.jpg'}: its target does not exist")]


@needs_photos
def test_a_dangling_tar_shard_is_a_file_level_reject(tmp_path):
    (tmp_path / "s").mkdir()
    write_tar(tmp_path / "s" / "a.tar", photos(2), label_of=lambda p: 0)
    (tmp_path / "s" / "b.tar").symlink_to(tmp_path / "gone.tar")
    _, table, rejects, counts = run_worker(config(tmp_path, input=str(tmp_path / "s")))
    assert table.num_rows == 2 and counts["files_rejected"] == 1
    assert [(r.position, r.reason) for r in rejects] == [("file", f"dangling symlink to {tmp_path / 'gone.tar'}: its target does not exist")]


def test_a_csv_manifest_row_reject_names_its_record(tmp_path):
    """'data row N' counts records after the header from 1, as text CSV positions do (a quoted newline is one record)."""
    (tmp_path / "a.jpg").write_bytes(encode(noise(40, 30), "JPEG"))
    manifest = tmp_path / "m.csv"
    manifest.write_text('path,label\na.jpg,"two\nlines"\n,ants\n')
    _, table, rejects, counts = run_worker(config(tmp_path, input=str(manifest)))
    assert table.num_rows == 1 and [(r.position, r.reason) for r in rejects] == [("data row 2", "column 'path' is empty or not a string (None)")]


def test_missing_input_and_missing_columns_fail_before_any_work(tmp_path):
    with pytest.raises(PrepError, match="input not found"):
        plan(config(tmp_path, input=str(tmp_path / "nope")))
    manifest = tmp_path / "m.csv"
    manifest.write_text("file,label\na.jpg,x\n")
    with pytest.raises(PrepError, match="path_column"):
        plan(config(tmp_path, input=str(manifest)))


def test_encoded_and_original_columns(tmp_path):
    root = tmp_path / "t" / "cls"
    root.mkdir(parents=True)
    yy, xx = np.mgrid[0:48, 0:64]
    smooth = np.stack([xx * 4, yy * 5, (xx + yy) * 2], axis=2).astype(np.uint8)  # lossy codecs keep gradients
    (root / "a.png").write_bytes(encode(Image.fromarray(smooth), "PNG"))
    for fmt in ("jpeg", "webp"):
        _, table, _, _ = run_worker(config(tmp_path, input=str(root.parent), size=32, encode=fmt, quality=95, keep_original=True))
        assert table.schema.field("original").metadata == {b"lance-encoding:blob": b"true"}
        assert table.column("original")[0].as_py() == (root / "a.png").read_bytes()
        back = np.asarray(Image.open(io.BytesIO(table.column("encoded")[0].as_py())).convert("RGB"))
        pixels = table.column("image")[0].values.to_numpy().reshape(32, 32, 3)
        assert back.shape == (32, 32, 3) and np.abs(back.astype(int) - pixels.astype(int)).mean() < 3, fmt


def test_grayscale_pad_nonsquare_keeps_every_row_its_own_shape(tmp_path):
    if not HYMENOPTERA.is_dir():
        pytest.skip("needs the real photos")
    root = bad_tree(tmp_path / "tree")
    cfg = config(tmp_path, input=str(root), channels=1, resize="pad", size=[48, 64], interpolation="bicubic", pad_value=255)
    _, table, rejects, counts = run_worker(cfg)
    assert table.num_rows == len(GOOD) and len(rejects) == len(BAD)
    assert table.column("image").type.list_size == 48 * 64
    banner = table.column("source").to_pylist().index(str(root / "ants" / "banner.jpg"))
    img = table.column("image")[banner].values.to_numpy().reshape(48, 64)
    assert (img[:20] == 255).all() and (img[-20:] == 255).all()  # 2000x20 fits as 64x0.64 -> 1 row, padded


def test_bracketed_directory_is_a_path_and_globs_select_shards(tmp_path):
    root = tmp_path / "photos [2020]" / "cls"
    root.mkdir(parents=True)
    (root / "a.png").write_bytes(encode(noise(20, 20), "PNG"))
    planned = plan(config(tmp_path, input=str(root.parent)))
    assert planned.kind == "imagefolder" and planned.files == 1
    if HYMENOPTERA.is_dir():
        for i in range(2):
            write_tar(tmp_path / "wds" / f"shard-{i}.tar", photos(2), label_of=lambda p: 0)
        (tmp_path / "wds" / "README.md").write_text("not a shard")
        planned = plan(config(tmp_path, input=str(tmp_path / "wds" / "shard-*.tar")))
        assert planned.kind == "webdataset" and [c.key for c in planned.chunks] == ["shard-0.tar", "shard-1.tar"]


def test_header_sizes_match_pillow_including_progressive_and_exif_jpegs():
    from prep.prepare.images.decode import _quick_size

    cases = [encode(noise(123, 45), "JPEG", progressive=True), exif_rotated_jpeg(), encode(noise(7, 300), "PNG")]
    cases += [p.read_bytes() for p in photos(20)] if HYMENOPTERA.is_dir() else []
    for data in cases:
        fmt = "PNG" if data.startswith(b"\x89PNG") else "JPEG"
        assert _quick_size(fmt, data) == Image.open(io.BytesIO(data)).size
    with pytest.raises(ImageError, match="max_pixels"):
        decode(cases[0], max_pixels=123 * 45 - 1)


def test_ids_are_a_hash_of_the_relative_path_only(tmp_path):
    from prep.prepare.ids import key_hash, stable_ids
    from prep.prepare.images.samples import FILE_KEY

    for parent in ("one", "two"):
        (tmp_path / parent / "ants").mkdir(parents=True)
        (tmp_path / parent / "ants" / "x y.png").write_bytes(encode(noise(20, 20), "PNG"))
    ids = [run_worker(config(tmp_path, input=str(tmp_path / parent)))[1].column("id")[0].as_py() for parent in ("one", "two")]
    assert ids[0] == ids[1] == int(stable_ids(FILE_KEY, np.array([key_hash("ants/x y.png")], np.uint64))[0])
