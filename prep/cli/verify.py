"""``prep verify``: check a materialized output against its source table, or a prepared table against its checksums."""

from __future__ import annotations

import argparse
import sys

from prep.cli.exits import MISMATCH, OK, at_least

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify", help="check a materialized output (rows once per epoch, split sizes, checksums, source version) or a "
        "prepared table (every file against the checksums of its commit)",
        description="Check a materialized output against its source table: every selected row once per epoch, split\n"
        "sizes and content checksums as the manifest says, the source table still at the recorded version and its\n"
        "files as its commit recorded them. Given a prepared table, read every file of a version and compare it with\n"
        "the checksums its commit recorded, naming each damaged file.\n\n"
        "example:\n  prep verify out/gsm8k-epochs\n  prep verify out/gsm8k.lance",
    )
    p.add_argument("path", help="materialized output directory, or a prepared Lance table (local path or s3://)")
    p.add_argument("--no-ids", action="store_true", help="skip the per-row id comparison with the plan (faster)")
    p.add_argument("--version", type=at_least(1), help="a prepared table: the version to check (default: the newest)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prep.contracts.manifest import MANIFEST
    from prep.io import lance_tables, storage

    if not storage.exists(storage.join(args.path, MANIFEST)) and \
            lance_tables.table_exists(args.path, storage.lance_storage_options(args.path)):
        return _table(args)
    if args.version is not None:
        print(f"prep verify: {args.path}: --version applies to a prepared table; a materialized output names its "
              "versions in its manifest", file=sys.stderr)
        return MISMATCH
    from prep.materialize.verify import verify

    report = verify(args.path, check_ids=not args.no_ids)
    print("\n".join(report.lines()))
    if report.ok:
        return OK
    more = f" (and {len(report.problems) - 1} more, listed above)" if len(report.problems) > 1 else ""
    repair = report.repair_line()
    print(f"prep verify: {args.path}: FAILED: {report.problems[0]}{more}{'; ' + repair if repair else ''}", file=sys.stderr)
    return MISMATCH


def _table(args: argparse.Namespace) -> int:
    from prep.io.table_checksums import check_table

    found = check_table(args.path, args.version)
    where = f"{args.path} (version {found.version})"
    if not found.recorded:
        print(f"{where}: no file checksums recorded (written before prep recorded them): its {found.files} files "
              "cannot be checked; `prep inspect` reads its rows")
        return OK
    print(f"{where}: {'OK' if found.ok else f'FAILED ({len(found.problems)} problems)'}: "
          f"{found.files - len(found.unrecorded)} files, {found.bytes / 1e6:,.1f} MB checked against the checksums of its commit")
    if found.unrecorded:
        print(f"  note: {len(found.unrecorded)} files were not written by a prep commit (added outside prep), not "
              f"checked: {', '.join(found.unrecorded[:3])}{' ...' if len(found.unrecorded) > 3 else ''}")
    for p in found.problems:
        print(f"  problem: {p}")
    if found.ok:
        return OK
    more = f" (and {len(found.problems) - 1} more, listed above)" if len(found.problems) > 1 else ""
    print(f"prep verify: {where}: FAILED: {found.problems[0]}{more}; restore the file, or prepare the table anew "
          "(the command that wrote it, with --overwrite)", file=sys.stderr)
    return MISMATCH
