"""The command that repairs a materialized output, for the messages that find damage.

A rerun of materialize rewrites every split whose done record, files or content do not
hold (:mod:`prep.materialize.rerun`), so ``prep verify`` and ``prep prewarm`` name that
rerun for a damaged split, built from the manifest, rather than send the user to the
other command. Options left at their defaults are left out. A mixture's manifest holds
its plan but not the path of the mixture file, so that one is a placeholder.
"""

from __future__ import annotations

import shlex

from prep.contracts.manifest import Manifest
from prep.plan.spec import PlanSpec

__all__ = ["rerun_command"]

_DEFAULTS = PlanSpec()


def rerun_command(manifest: Manifest, output: str) -> str:
    """The ``prep materialize-shuffle`` command line that rewrites the damaged splits of ``output``.

    >>> from prep.contracts.manifest import Epoch, Source
    >>> from prep.contracts.table import TableMetadata
    >>> m = Manifest(prep_version="0", fingerprint="0" * 16, plan=PlanSpec(num_splits=4, seed=3, filter="length > 25"),
    ...              source=Source(uri="t.lance", version=1, num_rows=9, metadata=TableMetadata(kind="sft", prep_version="0")),
    ...              num_selected_rows=9, columns=("id",), epochs=(Epoch(epoch=0, splits=()), Epoch(epoch=1, splits=())))
    >>> rerun_command(m, "out")
    "prep materialize-shuffle --table t.lance --output out --epochs 2 --splits 4 --seed 3 --filter 'length > 25'"
    """
    p = manifest.plan
    epochs = [e.epoch for e in manifest.epochs]
    what = ["--mixture", "MIXTURE_FILE"] if p.mixture is not None else ["--table", manifest.source.uri]
    args = ["prep", "materialize-shuffle", *what, "--output", output, "--epochs", str(max(epochs) - min(epochs) + 1)]
    if min(epochs):
        args += ["--start-epoch", str(min(epochs))]
    args += ["--splits", str(p.num_splits)]
    if p.strategy != _DEFAULTS.strategy:
        args += ["--strategy", p.strategy]
    if p.hash_columns != _DEFAULTS.hash_columns:
        args += ["--hash-columns", ",".join(p.hash_columns)]
    for flag, value, default in (("--clump", p.clump, _DEFAULTS.clump), ("--seed", p.seed, _DEFAULTS.seed)):
        if value != default:
            args += [flag, str(value)]
    if p.filter is not None:
        args += ["--filter", p.filter]
    if p.columns is not None:
        args += ["--columns", ",".join(p.columns)]
    line = shlex.join(args)
    return line.replace("MIXTURE_FILE", "<the mixture file it was written from>") if p.mixture is not None else line
