"""``prep materialize-shuffle``: a prepared table, or a mixture of tables, -> shuffled epochs laid out as splits."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from prep.cli.exits import at_least, names
from prep.errors import PrepError
from prep.materialize.options import DEFAULT_LANCE_FORMAT, LANCE_FORMATS, READ_ROWS
from prep.runtime.executor import EXECUTORS
from prep.plan import STRATEGIES
from prep.plan.spec import DEFAULT_SPLITS
from prep.runtime.ray_cluster import parse_resources

if TYPE_CHECKING:
    from prep.contracts.manifest import Manifest

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "materialize-shuffle",
        help="write shuffled epochs as per-split Lance datasets + manifest.json",
        description="Write epochs [start-epoch, start-epoch + epochs) of a seeded shuffle plan to OUTPUT.\n"
        "Rerunning the same command finishes what a killed run left; a larger --epochs adds epochs\n"
        "(with --extend, over the table's newest version once it grew).\n\n"
        "example:\n  prep materialize-shuffle --table out/gsm8k.lance --output out/gsm8k-epochs --epochs 3 --splits 48",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--table", help="prepared Lance table (local path or s3://)")
    what.add_argument("--mixture", help="mixture file (YAML: tables and weights, see docs/materialize.md \"Mixtures\")")
    p.add_argument("--output", required=True, help="output directory (local path or s3://)")
    p.add_argument("--epochs", type=at_least(1), required=True, help="number of epochs to write")
    p.add_argument("--splits", type=at_least(1), default=DEFAULT_SPLITS,
                   help=f"number of splits (default {DEFAULT_SPLITS}; any global batch reads it; a world size "
                   "dividing it keeps each rank's reads on its own splits)")
    p.add_argument("--strategy", default="random", choices=list(STRATEGIES),
                   help="how rows are assigned to splits (default random)")
    p.add_argument("--hash-columns", type=names, default=["id"], help="comma-separated columns for --strategy hash (default id)")
    p.add_argument("--clump", type=at_least(1), default=1, help="rows per shuffled block (default 1)")
    p.add_argument("--seed", type=at_least(0), default=0, help="plan seed (default 0)")
    p.add_argument("--filter", help="Lance SQL filter: only matching rows are materialized, e.g. \"length <= 2048\"")
    p.add_argument("--columns", type=names, help="comma-separated columns to write (default: all)")
    p.add_argument("--start-epoch", type=at_least(0), default=0, help="first epoch to write (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace an output that holds a different plan")
    p.add_argument("--extend", action="store_true",
                   help="the table grew since OUTPUT was written: plan the epochs this run adds over its newest version "
                   "(the epochs there stay as they are, each recording its version; reader states carry over)")
    p.add_argument("--read-rows", type=at_least(1), default=READ_ROWS,
                   help=f"rows per read and per written batch (default {READ_ROWS})")
    p.add_argument("--lance-format", default=DEFAULT_LANCE_FORMAT, choices=list(LANCE_FORMATS),
                   help="Lance data storage version of the splits (default 2.0: fastest to write and scan, "
                   "uncompressed; 2.2 is ~2.5x smaller, for object storage)")
    p.add_argument("--ray-address", help="Ray cluster to join (default: RAY_ADDRESS; without either, the run stays in this process)")
    p.add_argument("--ray-resources", type=parse_resources, help='custom Ray resources each task asks for, as JSON (pins tasks to nodes)')
    p.add_argument("--executor", default="auto", choices=list(EXECUTORS),
                   help="auto (default): Ray when a cluster is given (--ray-address, RAY_ADDRESS), else threads in this "
                   "process; ray: Ray even on one machine (starts a local one); local: this process. Outputs are identical")
    p.add_argument("--num-cpus", type=at_least(1), help="threads of the local run, or CPUs of a local Ray (default: all)")
    p.add_argument("--max-memory", type=_size, metavar="SIZE",
                   help="memory the run may use beyond its fixed base, per node, e.g. 512MiB or 8GiB (default: a quarter "
                        "of this machine's memory); rows beyond it are spilled to disk and read back once")
    p.add_argument("--spill-dir", help="where rows beyond --max-memory are spilled (default: OUT/_work; for an s3:// "
                                       "output on one node, this machine's temp dir)")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=run)


def _size(text: str) -> int:
    from prep.materialize.budget import parse_size

    try:
        return parse_size(text)
    except PrepError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_TABLE_ONLY = {"strategy": "random", "hash_columns": ["id"], "clump": 1, "seed": 0, "filter": None, "columns": None}


def run(args: argparse.Namespace) -> int:
    from prep.materialize import materialize_mixture, materialize_shuffle

    t0 = time.time()
    options = dict(output=args.output, epochs=args.epochs, start_epoch=args.start_epoch, overwrite=args.overwrite,
                   extend=args.extend,
                   read_rows=args.read_rows, lance_format=args.lance_format, ray_address=args.ray_address,
                   num_cpus=args.num_cpus, executor=args.executor, ray_resources=args.ray_resources,
                   max_memory=args.max_memory, spill_dir=args.spill_dir)
    if args.mixture:
        given = [f"--{k.replace('_', '-')}" for k, v in _TABLE_ONLY.items() if getattr(args, k) != v]
        if given:
            raise PrepError(f"{', '.join(given)}: with --mixture, set seed/clump/filter/columns in {args.mixture} "
                            "(filter and columns per source)")
        manifest = materialize_mixture(mixture=args.mixture, splits=args.splits, **options)
    else:
        manifest = materialize_shuffle(
            table=args.table, splits=args.splits, strategy=args.strategy, hash_columns=args.hash_columns, clump=args.clump,
            seed=args.seed, filter=args.filter, columns=args.columns, **options)
    if args.json:
        print(json.dumps(manifest.to_json(), indent=2))
        return 0
    epochs = [e.epoch for e in manifest.epochs]
    rows = f"{manifest.num_selected_rows:,} of {manifest.source.num_rows:,} rows selected"
    if len(manifest.versions) > 1:
        rows += f" at version {manifest.source.version} (the epochs drew from versions {list(manifest.versions)})"
    if manifest.source.metadata.inferred is not None:
        print(manifest.source.metadata.inferred)
    if manifest.mixture is not None:
        print(mixture_summary(manifest))
        rows = f"{manifest.num_selected_rows:,} rows an epoch from {len(manifest.mixture)} tables"
    print(f"{args.output}: epochs {epochs[0]}..{epochs[-1]} ({len(epochs)}) x {manifest.plan.num_splits} splits, "
          f"{rows}, fingerprint {manifest.fingerprint}, {time.time() - t0:.1f}s")
    return 0


def mixture_summary(manifest: "Manifest") -> str:
    """Per source: its weight, the share of rows and tokens it got over the written epochs, and how often an
    epoch goes through its rows (rows available, the most an epoch drew, repeats)."""
    mix = manifest.plan.mixture
    rows = [sum(e.source_rows[i] for e in manifest.epochs) for i in range(len(mix.sources))]
    tokens = [sum(e.source_tokens[i] for e in manifest.epochs) for i in range(len(mix.sources))]
    weights = sum(s.weight for s in mix.sources)
    lines = [f"mixture by {mix.weight_by}, global batch {mix.global_batch}, {mix.epoch_rows:,} rows an epoch:"]
    for i, s in enumerate(mix.sources):
        lines.append(f"  source {i} {s.table}: weight {s.weight / weights:.3f}, rows {rows[i] / max(1, sum(rows)):.3f} "
                     f"({rows[i]:,}), tokens {tokens[i] / max(1, sum(tokens)):.3f} ({tokens[i]:,})")
        lines.append(f"    {manifest.mixture[i].describe().split(': ', 1)[1]}")
    return "\n".join(lines)
