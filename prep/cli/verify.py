"""``prep verify``: check a materialized output against its source table."""

from __future__ import annotations

import argparse
import sys

from prep.cli.exits import MISMATCH, OK

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify", help="check a materialized output: rows once per epoch, split sizes, checksums, source version",
        description="Check a materialized output against its source table: every selected row once per epoch, split\n"
        "sizes and content checksums as the manifest says, the source table still at the recorded version.\n\n"
        "example:\n  prep verify out/gsm8k-epochs",
    )
    p.add_argument("path", help="materialized output directory (local path or s3://)")
    p.add_argument("--no-ids", action="store_true", help="skip the per-row id comparison with the plan (faster)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prep.materialize.verify import verify

    report = verify(args.path, check_ids=not args.no_ids)
    print("\n".join(report.lines()))
    if report.ok:
        return OK
    more = f" (and {len(report.problems) - 1} more, listed above)" if len(report.problems) > 1 else ""
    repair = report.repair_line()
    print(f"prep verify: {args.path}: FAILED: {report.problems[0]}{more}{'; ' + repair if repair else ''}", file=sys.stderr)
    return MISMATCH
