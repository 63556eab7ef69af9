"""Where a materialized output keeps what, and which of its files prep may remove.

``OUT/_prep_job.json`` (:mod:`prep.contracts.marker`) is written first: it names the job and its plan, and
marks the directory as one prep may write into and clean up (only the files of
this layout, never anything else there). Each (epoch, split) is
``OUT/epoch-EEEEE/split-SSSSS.lance`` followed by its done record
(:mod:`prep.contracts.done`); ``OUT/_work`` holds scratch data of a run (the filter
sidecar); ``manifest.json`` is written last, atomically (:mod:`prep.contracts.manifest`
reads and writes it). Layout and manifest: docs/architecture.md ("Materialized epochs").
"""

from __future__ import annotations

import re

from prep.contracts.done import DONE_SUFFIX
from prep.contracts.manifest import MANIFEST
from prep.contracts.marker import JOB_MARKER

__all__ = ["JOB_NAME", "WORK", "owned_entries"]

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
