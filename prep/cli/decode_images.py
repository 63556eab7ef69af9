"""``prep decode-images``: image sources -> a Lance table of decoded, resized pixels."""

from __future__ import annotations

import argparse
import json

from prep.cli.common import add_job_arguments, job_arguments, require_without_config

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "decode-images", help="decode and resize images into a Lance table (Ray tasks on a cluster)",
        description="Decode, orient and resize images (ImageFolder, a manifest, WebDataset shards or Parquet; local or\n"
        "s3://) into a Lance table of fixed-size pixel arrays and labels, plus a rejects table.\n\n"
        "Without --config, --input and --output are enough (224x224 RGB); with it, flags override its keys.\n\n"
        "example:\n  prep decode-images --input data/photos --output out/photos.lance --size 160\n"
        "  prep decode-images --config configs/imagefolder.yaml --output out/photos.lance",
    )
    add_job_arguments(p)
    p.add_argument("--source", choices=["auto", "imagefolder", "manifest", "webdataset", "parquet"],
                   help="what the input is (default auto: inferred from it)")
    p.add_argument("--size", type=image_size, help="output side, or HEIGHTxWIDTH (default 224)")
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

    summary = decode_images(source=args.source, size=args.size, **job_arguments(args))
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
