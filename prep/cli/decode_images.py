"""``prep decode-images``: image sources -> a Lance table of decoded, resized pixels."""

from __future__ import annotations

import argparse
import json

from prep.cli.common import add_job_arguments, call_keys, require_without_config
from prep.cli.exits import at_least

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "decode-images", help="decode and resize images into a Lance table (Ray tasks on a cluster)",
        description="Decode, orient and resize images (ImageFolder, a manifest, WebDataset shards or Parquet; local or\n"
        "s3://) into a Lance table of fixed-size pixel arrays and labels, plus a rejects table.\n\n"
        "Without --config, --input and --output are enough (224x224 RGB); with it, flags override its keys.\n"
        "Any config key not named below: --set KEY=VALUE (e.g. --set pad_value=255).\n\n"
        "example:\n  prep decode-images --input data/photos --output out/photos.lance --size 160\n"
        "  prep decode-images --input data/photos --output out/photos.lance --size 256x192 --resize pad --interpolation bicubic\n"
        "  prep decode-images --config configs/imagefolder.yaml --output out/photos.lance",
    )
    add_job_arguments(p)
    p.add_argument("--source", choices=["auto", "imagefolder", "manifest", "webdataset", "parquet"],
                   help="what the input is (default auto: inferred from it)")
    p.add_argument("--size", type=image_size, help="output side, or HEIGHTxWIDTH (default 224)")
    p.add_argument("--resize", choices=["crop", "pad"],
                   help="crop (default: scale the shorter side, center-crop) or pad (scale the longer side, center-pad)")
    p.add_argument("--interpolation", choices=["nearest", "nearest-exact", "bilinear", "bicubic"],
                   help="resampling (default bilinear)")
    p.add_argument("--channels", type=int, choices=[1, 3], help="3 for RGB (default), 1 for grayscale")
    p.add_argument("--encode", choices=["none", "jpeg", "webp"],
                   help="also store the resized image re-encoded, in an `encoded` column (default none)")
    p.add_argument("--quality", type=at_least(1), help="JPEG/WebP quality 1-100 (default 90)")
    p.add_argument("--keep-original", action="store_true", default=None,
                   help="keep the source bytes in an `original` column (a Lance blob)")
    manifest = p.add_argument_group("manifest and Parquet inputs")
    manifest.add_argument("--path-column", help="manifest column of image paths (default path)")
    manifest.add_argument("--label-column", help="column of labels (default label; --set label_column=null: unlabeled)")
    manifest.add_argument("--image-column", help="Parquet column of image bytes (default image)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def image_size(text: str) -> int | tuple[int, int]:
    """An argparse ``type``: ``224`` (a square) or ``224x160`` (height x width).

    >>> image_size("224"), image_size("224x160")
    (224, (224, 160))
    """
    try:
        sides = [int(side) for side in text.lower().split("x")]
    except ValueError:
        sides = []
    if len(sides) not in (1, 2):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give 224 or HEIGHTxWIDTH such as 224x160")
    return sides[0] if len(sides) == 1 else (sides[0], sides[1])


def run(args: argparse.Namespace) -> int:
    require_without_config(args, ["--input", "--output"])

    from prep.prepare.api import decode_images
    from prep.prepare.images.job import format_summary

    summary = decode_images(**call_keys(args, dict(
        source=args.source, size=args.size, resize=args.resize, interpolation=args.interpolation, channels=args.channels,
        encode=args.encode, quality=args.quality, keep_original=args.keep_original, path_column=args.path_column,
        label_column=args.label_column, image_column=args.image_column)))
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
