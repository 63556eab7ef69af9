"""``prep prewarm``: copy one rank's splits to a local cache and verify them."""

from __future__ import annotations

import argparse

from prep.cli.exits import at_least

__all__ = ["register"]


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_size(text: str) -> int:
    """``--max-bytes 200G``: bytes, with an optional K/M/G/T suffix (powers of 1024).

    >>> byte_size("1.5G"), byte_size("4096")
    (1610612736, 4096)
    """
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in _UNITS else (t, "")
    try:
        value = int(float(num) * _UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 4096, 500M, 200G)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1 byte")
    return value


def epoch_list(text: str) -> list[int]:
    """``--epochs 0,2``: comma-separated epoch numbers (>= 0)."""
    return [at_least(0)(x.strip()) for x in text.split(",") if x.strip()]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prewarm", help="fetch one rank's split datasets (+ manifest) into a local reader cache, verified",
        description="Fetch the splits one rank reads (and the manifest) from a materialized output, local or s3://, into\n"
        "the local cache the reader uses (cache_dir=), in parallel, checking each split's checksum; rerunning skips\n"
        "what is cached, --max-bytes bounds the cache.\n\n"
        "example:\n  prep prewarm s3://bucket/gsm8k-epochs --rank 3 --world-size 8 --cache /local/nvme/gsm8k-epochs",
    )
    p.add_argument("path", help="materialized output directory (local path or s3://)")
    p.add_argument("--cache", required=True, help="local cache directory (laid out like the output)")
    p.add_argument("--rank", type=at_least(0), help="this rank (default: torch.distributed, RANK, SLURM_PROCID, else 0)")
    p.add_argument("--world-size", type=at_least(1), help="number of ranks (default: torch.distributed, WORLD_SIZE, SLURM_NTASKS, else 1)")
    p.add_argument("--epochs", type=epoch_list,
                   help="comma-separated epochs to copy (default: all in the manifest)")
    p.add_argument("--overwrite", action="store_true", help="replace a cache that holds a different materialization")
    p.add_argument("--max-bytes", type=byte_size, help="the most the cache may hold, e.g. 200G (default: no limit); "
                   "splits that do not fit are left to the reader to fetch")
    p.add_argument("--threads", type=at_least(1), default=16, help="splits fetched at once (default 16)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prep.cache.prewarm import prewarm

    summary = prewarm(args.path, cache=args.cache, rank=args.rank, world_size=args.world_size, epochs=args.epochs,
                      overwrite=args.overwrite, max_bytes=args.max_bytes, threads=args.threads, progress=True)
    skipped = f", {summary['skipped']} did not fit under --max-bytes" if summary["skipped"] else ""
    print(
        f"{summary['cache']}: rank {summary['rank']}/{summary['world_size']} splits {summary['splits'][0]}.."
        f"{summary['splits'][-1]} x {len(summary['epochs'])} epochs: {summary['copied']} copied, "
        f"{summary['cached']} already cached{skipped}, {summary['bytes'] / 1e6:,.1f} MB "
        f"({summary['bytes'] / 1e6 / max(summary['seconds'], 1e-9):,.1f} MB/s, {summary['retries']} retries), "
        f"all verified, {summary['seconds']:.1f}s"
    )
    return 0
