"""Where a materialized output keeps what, and which of its files prep may remove.

``OUT/_prep_job.json`` (:mod:`prep.contracts.marker`) is written first: it names the job and its plan, and
marks the directory as one prep may write into and clean up (only the files of
this layout, never anything else there). Each (epoch, split) is
``OUT/epoch-EEEEE/split-SSSSS.lance`` followed by its done record
(:mod:`prep.contracts.done`); ``OUT/_work`` holds scratch data of a run (the filter
sidecar); ``manifest.json`` is written last, atomically (:mod:`prep.contracts.manifest`
reads and writes it). Layout and manifest: docs/architecture.md ("Materialized epochs").

A rerun of materialize rewrites every split whose done record, files or content do not
hold, so ``prep verify`` and ``prep prewarm`` name that rerun for a damaged split
(:func:`rerun_command`, built from the manifest) rather than send the user to the other
command. Options left at their defaults are left out; a mixture's manifest holds its plan
but not the path of the mixture file, so that one is a placeholder.
"""

from __future__ import annotations

import re
import shlex

from prep.contracts.done import DONE_SUFFIX
from prep.contracts.manifest import MANIFEST, Manifest
from prep.contracts.marker import JOB_MARKER
from prep.plan.spec import PlanSpec

__all__ = ["JOB_NAME", "WORK", "owned_entries", "rerun_command"]

JOB_NAME = "prep materialize-shuffle"
WORK = "_work"
_EPOCH_DIR = re.compile(r"^epoch-\d{5}$")
# a split, its done record, and what a write killed midway leaves of either (a temp file beside it)
_SPLIT_ENTRY = re.compile(rf"^split-\d{{5}}(\.lance|{re.escape(DONE_SUFFIX)})(\.tmp-[0-9a-f]+)?$")


def owned_entries(top: list[str], epoch_dir: dict[str, list[str]], names: tuple[str, ...] = (MANIFEST, JOB_MARKER, WORK)) -> list[str]:
    """The names (relative to OUT) this layout writes, out of what is there; anything else is not prep's.

    Args:
        top: names directly in OUT.
        epoch_dir: names inside each ``epoch-EEEEE`` directory of ``top``.
        names: the top-level names the caller writes (prewarm: only the manifest).

    >>> owned_entries(["manifest.json", "notes.txt", "epoch-00000"], {"epoch-00000": ["split-00000.lance", "x"]})
    ['manifest.json', 'epoch-00000/split-00000.lance']
    """
    out = [n for n in top if n in names]
    for d in top:
        if _EPOCH_DIR.match(d):
            out += [f"{d}/{n}" for n in epoch_dir.get(d, []) if _SPLIT_ENTRY.match(n)]
    return out


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
