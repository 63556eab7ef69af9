"""Arguments every prepare command shares, so one config serves many data sets (or none: a one-off
job gives its keys as flags). Relative paths resolve from the current directory."""

from __future__ import annotations

import argparse
from typing import Any

from prep.errors import PrepError
from prep.runtime.ray_cluster import parse_resources

__all__ = ["add_job_arguments", "require_without_config", "job_arguments"]


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML job config, the way to keep a recipe (see configs/); optional: "
                        "flags set its keys, and override them when both are given")
    parser.add_argument("--input", help="a file, directory or glob, local or s3:// (relative paths: from the current directory)")
    parser.add_argument("--output", help="the output table path")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--overwrite", action="store_true", default=None, help="replace an existing output table")
    how.add_argument("--append", action="store_true", default=None,
                     help="add the input files the output table does not hold yet, as one new table version "
                     "(a file it holds that changed since is refused)")
    how.add_argument("--update", action="store_true", default=None,
                     help="as --append, and replace the rows of files that changed since (deleted and added in one commit)")
    parser.add_argument("--remove-missing", action="store_true", default=None,
                        help="with --append/--update: remove the rows of files the table holds that are no longer among the "
                        "inputs (otherwise they stay, and the summary names them)")
    parser.add_argument("--ray-address", help="Ray cluster to join (default: RAY_ADDRESS, else run on this machine without Ray)")
    parser.add_argument("--ray-resources", type=parse_resources,
                        help='custom Ray resources each task asks for, as JSON, e.g. \'{"cpu_pool": 1}\' (pins tasks to nodes offering them)')
    parser.add_argument("--executor", choices=["auto", "ray", "local"],
                        help="where chunks run: auto (default: Ray when there is a cluster, else this machine), ray, local")
    parser.add_argument("--max-reject-fraction", type=float, metavar="F",
                        help="share of rows that may be rejected before the job fails with exit status 1 (default 0.1; "
                        "a job that rejects every row always fails)")


def require_without_config(args: argparse.Namespace, flags: list[str]) -> None:
    """Without ``--config`` the job's required keys come from ``flags``: name those missing, and the way out."""
    missing = [flag for flag in flags if getattr(args, flag[2:].replace("-", "_")) is None]
    if args.config is None and missing:
        raise PrepError(f"{' and '.join(missing)} required without --config (or give --config FILE, a recipe: see configs/)")


def job_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The shared flags as keyword arguments of :mod:`prep.prepare.api` (None: keep the config's value)."""
    return {"config": args.config, "input": args.input, "output": args.output, "overwrite": args.overwrite,
            "append": args.append, "update": args.update, "remove_missing": args.remove_missing,
            "executor": args.executor, "ray_address": args.ray_address, "ray_resources": args.ray_resources,
            "max_reject_fraction": args.max_reject_fraction}
