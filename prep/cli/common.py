"""Arguments every prepare command shares, so one config serves many data sets."""

from __future__ import annotations

import argparse
from typing import Any

from prep.runtime.ray_cluster import parse_resources

__all__ = ["add_job_arguments", "job_overrides"]


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML job config (see configs/)")
    parser.add_argument("--input", help="override the config's input: a file, directory or glob, local or s3://")
    parser.add_argument("--output", help="override the config's output table path")
    parser.add_argument("--overwrite", action="store_true", default=None, help="replace an existing output table")
    parser.add_argument("--ray-address", help="Ray cluster to join (default: RAY_ADDRESS, else run on this machine without Ray)")
    parser.add_argument("--ray-resources", type=parse_resources,
                        help='custom Ray resources each task asks for, as JSON, e.g. \'{"cpu_pool": 1}\' (pins tasks to nodes offering them)')
    parser.add_argument("--executor", choices=["auto", "ray", "local"],
                        help="where chunks run: auto (default: Ray when there is a cluster, else this machine), ray, local")
    parser.add_argument("--max-reject-fraction", type=float, metavar="F",
                        help="share of rows that may be rejected before the job fails with exit status 1 (default 0.1; "
                        "a job that rejects every row always fails)")


def job_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Config keys set on the command line (None means: keep the config's value)."""
    out: dict[str, Any] = {"input": args.input, "output": args.output, "overwrite": args.overwrite, "executor": args.executor,
                           "max_reject_fraction": args.max_reject_fraction}
    ray = {k: v for k, v in (("address", args.ray_address), ("resources", args.ray_resources)) if v}
    if ray:
        out["ray"] = ray
    return out
