"""Where a materialized output keeps what, and how its manifest is read.

``OUT/plan.json`` is written first (it marks the directory as holding this
plan); each (epoch, split) is ``OUT/epoch-EEEEE/split-SSSSS.lance`` followed by
``split-SSSSS.done.json`` (rows, content checksum); ``OUT/_work`` holds scratch
data of a run (the filter sidecar); ``manifest.json`` is written last,
atomically. Layout and manifest: docs/architecture.md ("Materialized epochs").
"""

from __future__ import annotations

from typing import Any

from prep import storage
from prep.errors import PrepError

__all__ = ["FORMAT", "MANIFEST", "PLAN_FILE", "WORK", "split_path", "read_manifest"]

FORMAT = "prep.materialized/1"
MANIFEST = "manifest.json"
PLAN_FILE = "plan.json"  # written first: marks the directory as holding this plan
WORK = "_work"


def split_path(epoch: int, split: int) -> str:
    """Relative path of one (epoch, split) dataset.

    >>> split_path(2, 17)
    'epoch-00002/split-00017.lance'
    """
    return f"epoch-{epoch:05d}/split-{split:05d}.lance"


def _done_path(epoch: int, split: int) -> str:
    return split_path(epoch, split)[: -len(".lance")] + ".done.json"


def read_manifest(path: str, s3: storage.S3Options | None = None) -> dict[str, Any]:
    """The manifest of a materialized output, with a clear error when there is none."""
    uri = storage.join(path, MANIFEST)
    if not storage.exists(uri, s3):
        hint = " (a run was started there but has not finished: rerun it)" if storage.exists(storage.join(path, PLAN_FILE), s3) else ""
        raise PrepError(f"no {MANIFEST} in {path}{hint}; run `prep materialize-shuffle --output {path}` first")
    manifest = storage.read_json(uri, s3)
    if manifest.get("format") != FORMAT:
        raise PrepError(f"{uri} has format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest
