"""``prep bench``: how fast the reader feeds a simulated trainer, and which stage bounds it."""

from __future__ import annotations

import argparse
import json
import sys

from prep.cli.exits import at_least

__all__ = ["register"]


def _milliseconds(text: str) -> float:
    """``--consumer-ms``: a number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be >= 0")
    return value


def _seconds(text: str) -> float:
    """``--seconds``: a number > 0."""
    value = _milliseconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 must be > 0")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="read a materialized output against a simulated trainer: throughput and the stage that bounds it",
        description="Run prep.reader on PATH for one rank against a simulated consumer that takes --consumer-ms per step,\n"
        "show the reader's live status line, and end with throughput, time to first batch, the share of time the\n"
        "consumer waited, the stage that bounds reading (remote I/O, local I/O, collate, transform, consumer) and\n"
        "the knob to turn (docs/tuning.md). The verdict is the one the status line of a real run prints.\n\n"
        "PATH may also be a prepared table, read through an on-the-fly plan as ReaderDataset(path, plan=...) does.\n\n"
        "example:\n  prep bench out/gsm8k-epochs --global-batch-size 96 --world-size 8 --consumer-ms 50 --plot bench.png",
    )
    p.add_argument("path", help="a materialized output (directory with manifest.json), or a prepared table read "
                   "through an on-the-fly random plan (see --splits); local or s3://")
    p.add_argument("--global-batch-size", type=at_least(1), required=True, help="rows per global step (any; --world-size must divide it)")
    p.add_argument("--rank", type=at_least(0), help="rank to read as (default: torch.distributed, RANK, SLURM_PROCID, else 0)")
    p.add_argument("--world-size", type=at_least(1), help="ranks (default: torch.distributed, WORLD_SIZE, SLURM_NTASKS, else 1)")
    p.add_argument("--consumer-ms", type=_milliseconds, default=0.0,
                   help="simulated training step per batch in milliseconds (default 0: take batches as fast as they come)")
    p.add_argument("--splits", type=at_least(1), default=48,
                   help="splits of the on-the-fly plan when PATH is a prepared table (default 48; any global batch fits)")
    p.add_argument("--seconds", type=_seconds, default=10.0, help="read for at most this long (default 10)")
    p.add_argument("--read-mb", type=at_least(1), default=64, help="MiB one read covers, all the rank's splits together (default 64)")
    p.add_argument("--raw-chunks", type=at_least(1), default=2, help="reads queued ahead of batching (default 2)")
    p.add_argument("--batch-threads", type=at_least(1), default=2, help="threads building batches (default 2)")
    p.add_argument("--prefetch-batches", type=at_least(1), default=4, help="batches built ahead of the consumer (default 4)")
    p.add_argument("--plot", metavar="PNG", help="write queue depths and throughput over time to this image (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def _plan_for(args: argparse.Namespace) -> dict:
    """A prepared table (a Lance table, not a materialized output) is read through an on-the-fly plan."""
    from prep.io import storage

    if storage.exists(storage.join(args.path, "_versions")):
        return {"plan": {"num_splits": args.splits}}
    return {}


def run(args: argparse.Namespace) -> int:
    from prep.runtime import progress
    from prep.tools.bench import format_result, run_bench

    def show(line: str) -> None:
        print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)

    live = progress.enabled()
    result = run_bench(args.path, global_batch_size=args.global_batch_size, rank=args.rank, world_size=args.world_size,
                       consumer_ms=args.consumer_ms, seconds=args.seconds, on_status=show if live else None,
                       read_bytes=args.read_mb << 20, raw_chunks=args.raw_chunks, batch_threads=args.batch_threads,
                       prefetch_batches=args.prefetch_batches, **_plan_for(args))
    if live:
        print(file=sys.stderr)
    if args.plot:
        from prep.tools.plots import bench_figure

        bench_figure(result, args.plot)
    print(json.dumps(result.to_json(), indent=2) if args.json else format_result(result))
    if args.plot and not args.json:
        print(f"  plot: {args.plot}")
    return 0
