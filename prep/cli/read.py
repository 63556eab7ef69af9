"""``prep read``: print the row ids of each batch one rank would train on."""

from __future__ import annotations

import argparse
import sys

from prep.cli.exits import at_least
from prep.cli.prewarm import byte_size

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "read", help="print the row ids in each batch of one rank (checks a materialized output)",
        description="Print the row ids of each batch one rank would train on, read through prep.reader exactly as\n"
        "training reads them; the last line on stderr is the reader's status line.\n\n"
        "example:\n  prep read out/gsm8k-epochs --global-batch-size 96 --rank 0 --world-size 4 --max-steps 3",
    )
    p.add_argument("path", help="a materialized output (directory with manifest.json), or a prepared table "
                   "(read through the default on-the-fly plan: 48 splits, random, seed 0)")
    p.add_argument("--epoch", type=at_least(0), default=0, help="epoch to read (default 0)")
    p.add_argument("--rank", type=at_least(0), default=None, help="rank (default: torch.distributed, RANK, SLURM_PROCID, else 0; see docs/reader.md)")
    p.add_argument("--world-size", type=at_least(1), default=None, help="world size (default: torch.distributed, WORLD_SIZE, SLURM_NTASKS, else 1)")
    p.add_argument("--global-batch-size", type=at_least(1), required=True, help="rows per global step (any; --world-size must divide it)")
    p.add_argument("--max-steps", type=at_least(0), default=None, help="stop after this many steps")
    p.add_argument("--cache-dir", help="local reader cache (the directory `prep prewarm --cache` fills): splits are read "
                   "from there when copied, else from the remote while a background stage copies them")
    p.add_argument("--cache-max-bytes", type=byte_size, help="the most the cache may hold, e.g. 200G (default: no limit)")
    p.add_argument("--ids-only", action="store_true", help="one line per step: the step number, then the row ids")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prep.runtime.progress import Bar
    from prep.reader import ReaderDataset
    from prep.reader.loader import require_steps

    ds = ReaderDataset(args.path, global_batch_size=args.global_batch_size, rank=args.rank,
                       world_size=args.world_size, epochs=[args.epoch], cache_dir=args.cache_dir,
                       cache_max_bytes=args.cache_max_bytes)
    require_steps(ds)
    steps = 0
    planned = ds.schedule.total if args.max_steps is None else min(ds.schedule.total, args.max_steps)
    bar = Bar(planned, "read steps", unit="step", show=not sys.stdout.isatty())  # else the printed steps show it
    for batch in ds if args.max_steps is None or args.max_steps > 0 else ():
        bar.update()
        ids = " ".join(str(int(i)) for i in batch.ids)
        if args.ids_only:
            print(f"{batch.step} {ids}")
        else:
            shape = "x".join(str(d) for d in next(iter(batch.values())).shape)
            print(f"epoch {batch.epoch} step {batch.step} ({batch.num_rows} rows, {batch.num_tokens} tokens, {shape}): {ids}")
        steps += 1
        if steps == args.max_steps:
            break
    bar.close()
    if not args.ids_only:
        print(f"rank {ds.rank}/{ds.world_size}: {steps} steps of {ds.local_batch_size} rows; "
              f"{ds.dropped_rows} rows of this rank's splits are beyond the last full step", file=sys.stderr)
        print(ds.status_line(), file=sys.stderr)
    return 0
