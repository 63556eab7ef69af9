"""``prep prewarm``: copy one rank's splits to a local cache and verify them."""

from __future__ import annotations

import argparse

from prep.cli.exits import at_least

__all__ = ["register"]


def epoch_list(text: str) -> list[int]:
    """``--epochs 0,2``: comma-separated epoch numbers (>= 0)."""
    return [at_least(0)(x.strip()) for x in text.split(",") if x.strip()]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prewarm", help="copy one rank's split datasets (+ manifest) to a local cache, verified",
        description="Copy the splits one rank reads (and the manifest) from a materialized output, local or s3://, to a\n"
        "local cache laid out like the output, checking each split's checksum; rerunning skips what is cached.\n\n"
        "example:\n  prep prewarm s3://bucket/gsm8k-epochs --rank 3 --world-size 8 --cache /local/nvme/gsm8k-epochs",
    )
    p.add_argument("path", help="materialized output directory (local path or s3://)")
    p.add_argument("--cache", required=True, help="local cache directory (laid out like the output)")
    p.add_argument("--rank", type=at_least(0), help="this rank (default: torch.distributed, RANK, SLURM_PROCID, else 0)")
    p.add_argument("--world-size", type=at_least(1), help="number of ranks (default: torch.distributed, WORLD_SIZE, SLURM_NTASKS, else 1)")
    p.add_argument("--epochs", type=epoch_list,
                   help="comma-separated epochs to copy (default: all in the manifest)")
    p.add_argument("--overwrite", action="store_true", help="replace a cache that holds a different materialization")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prep.prewarm import prewarm

    summary = prewarm(args.path, cache=args.cache, rank=args.rank, world_size=args.world_size,
                      epochs=args.epochs, overwrite=args.overwrite)
    print(
        f"{summary['cache']}: rank {summary['rank']}/{summary['world_size']} splits {summary['splits'][0]}.."
        f"{summary['splits'][-1]} x {len(summary['epochs'])} epochs: {summary['copied']} copied, "
        f"{summary['cached']} already cached, {summary['bytes'] / 1e6:,.1f} MB, all verified, {summary['seconds']:.1f}s"
    )
    return 0
