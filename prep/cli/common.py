"""Arguments every prepare command shares, so one config serves many data sets (or none: a one-off
job gives its keys as flags). Every config key is reachable from the command line: the common ones
as named flags, any other as ``--set KEY=VALUE``, validated as a config file's keys are.
Relative paths resolve from the current directory."""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from prep.errors import PrepError
from prep.runtime.executor import EXECUTORS
from prep.runtime.ray_cluster import parse_resources

__all__ = ["add_job_arguments", "require_without_config", "job_arguments", "setting", "call_keys"]


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
    parser.add_argument("--executor", choices=list(EXECUTORS),
                        help="where chunks run: auto (default: Ray when there is a cluster, else this machine), ray, local")
    parser.add_argument("--max-reject-fraction", type=float, metavar="F",
                        help="share of rows that may be rejected before the job fails with exit status 1 (default 0.1; "
                        "a job that rejects every row always fails)")
    parser.add_argument("--set", dest="settings", action="append", type=setting, default=[], metavar="KEY=VALUE",
                        help="any config key, as in the YAML file: a dotted KEY reaches into sections, VALUE is read "
                        "as YAML (--set chunk_bytes=4194304 --set s3.retry.max_attempts=12 --set passthrough=[id]); "
                        "repeatable; named flags win over it, it wins over --config")


def setting(text: str) -> dict[str, Any]:
    """An argparse ``type`` for ``--set``: ``a.b=VALUE`` as ``{"a": {"b": VALUE}}``, VALUE read as YAML.

    >>> setting("sft.layout=qa"), setting("pack.seq_len=2048"), setting("passthrough=[id, source]")
    ({'sft': {'layout': 'qa'}}, {'pack': {'seq_len': 2048}}, {'passthrough': ['id', 'source']})
    >>> setting("prompt")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: 'prompt' is not KEY=VALUE (e.g. --set sft.layout=qa)
    """
    key, eq, raw = text.partition("=")
    if not eq or not key.strip() or any(not part for part in key.strip().split(".")):
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. --set sft.layout=qa)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw  # not YAML: the text itself (a template with braces, say)
    for part in reversed(key.strip().split(".")):
        value = {part: value}
    return value


def require_without_config(args: argparse.Namespace, flags: list[str]) -> None:
    """Without ``--config`` the job's required keys come from ``flags`` (or ``--set``): name those missing,
    and the way out."""
    keys = {key for one in args.settings for key in one}
    attrs = {flag: flag[2:].replace("-", "_") for flag in flags}
    missing = [flag for flag, attr in attrs.items() if getattr(args, attr) is None and attr not in keys]
    if args.config is None and missing:
        raise PrepError(f"{' and '.join(missing)} required without --config (or give --config FILE, a recipe: see configs/)")


def call_keys(args: argparse.Namespace, flags: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :mod:`prep.prepare.api` for this command line: the ``--set`` keys, then
    the shared flags and the command's own ``flags`` over them (None: not given)."""
    from prep.runtime.config import merge  # pydantic: not for `prep --help`

    keys: dict[str, Any] = {}
    for one in args.settings:
        keys = merge(keys, one)
    return merge(keys, {**job_arguments(args), **flags})


def job_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The shared flags as keyword arguments of :mod:`prep.prepare.api` (None: keep the config's value)."""
    return {"config": args.config, "input": args.input, "output": args.output, "overwrite": args.overwrite,
            "append": args.append, "update": args.update, "remove_missing": args.remove_missing,
            "executor": args.executor, "ray_address": args.ray_address, "ray_resources": args.ray_resources,
            "max_reject_fraction": args.max_reject_fraction}
