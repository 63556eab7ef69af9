"""``prep inspect``: look at a prepared table, its rejects or a materialized output without writing Python."""

from __future__ import annotations

import argparse
import json

from prep.cli.exits import at_least

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect", help="show what a prepared table, a rejects table or a materialized output holds",
        description="Show what PATH holds. A prepared table: schema, rows and tokens, length percentiles, rejects grouped\n"
        "by reason with examples, the config and tokenizer it was made with, prep/Lance versions. A rejects table:\n"
        "rejects by reason. A materialized output: epochs, splits, rows per split and epoch, plan, source.\n"
        "--rows N decodes N rows back to text ([[...]] marks the part masked out of the loss) or describes images;\n"
        "--plot draws lengths, labels and sample images, rejects, or rows per split/epoch.\n\n"
        "example:\n  prep inspect out/gsm8k.lance --rows 2 --plot gsm8k.png",
    )
    p.add_argument("path", help="a prepared Lance table, its .rejects.lance table, or a materialized output (local or s3://)")
    p.add_argument("--rows", type=at_least(0), default=0, help="decode this many rows (default 0)")
    p.add_argument("--plot", metavar="PNG", help="write a figure to this image file (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prep.tools.inspection import format_report, inspect_path, to_json

    report = inspect_path(args.path, rows=args.rows)
    if args.plot:
        from prep.tools.plots import inspect_figure

        inspect_figure(report, args.plot)
    print(json.dumps(to_json(report), indent=2, default=str) if args.json else format_report(report))
    if args.plot and not args.json:
        print(f"  plot: {args.plot}")
    return 0
