"""``prep decode-images``: image sources -> a Lance table of decoded, resized pixels."""

from __future__ import annotations

import argparse
import json

from prep.cli.common import add_job_arguments, job_overrides

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "decode-images", help="decode and resize images into a Lance table (a Ray Data job)",
        description="Decode, orient and resize images (ImageFolder, a manifest, WebDataset shards or Parquet; local or\n"
        "s3://) into a Lance table of fixed-size pixel arrays and labels, plus a rejects table.\n\n"
        "example:\n  prep decode-images --config configs/imagefolder.yaml --output out/photos.lance",
    )
    add_job_arguments(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prep.runtime.config import load_config
    from prep.prepare.images.config import ImagesConfig
    from prep.prepare.images.job import format_summary, run_decode_images

    cfg = load_config(ImagesConfig, args.config, **job_overrides(args))
    summary = run_decode_images(cfg)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
