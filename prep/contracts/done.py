"""The done record of a materialized split: its one typed form, its one strict parser.

``OUT/epoch-EEEEE/split-SSSSS.done.json`` is written (atomically) right after the
split dataset ``split-SSSSS.lance`` is committed; ``manifest.json`` is built from
the records of every split. A record says what the split holds (rows, content
checksum, for a mixture the rows and tokens per source) and which files make it up
with their sizes, so that a rerun can check cheaply that a done split is still
whole (:mod:`prep.materialize.rerun`) and rewrite it when it is not. Example:
prep/contracts/README.md.

A record that does not parse is not an error for a run: the split is written again.
The cache keeps its own records under another name (:mod:`prep.cache.store`); to read
a materialized output's record it calls :func:`prep.io.materialized.read_done`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from prep.errors import PrepError
from prep.contracts.manifest import split_path

__all__ = ["DONE_SUFFIX", "DoneRecord", "done_path", "parse_done"]

DONE_SUFFIX = ".done.json"
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")
_REQUIRED = ("fingerprint", "epoch", "split", "path", "num_rows", "checksum", "files")
_OPTIONAL = ("source_rows", "source_tokens")  # a mixture's split only


def done_path(epoch: int, split: int) -> str:
    """Relative path of the done record of (epoch, split).

    >>> done_path(2, 17)
    'epoch-00002/split-00017.done.json'
    """
    return split_path(epoch, split)[: -len(".lance")] + DONE_SUFFIX


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, kw_only=True)
class DoneRecord:
    """One committed (epoch, split) dataset.

    Args:
        fingerprint: the plan's fingerprint (a record of another plan is not this run's).
        epoch, split: which split.
        path: the split dataset, relative to the output (:func:`prep.contracts.manifest.split_path`).
        num_rows: rows written.
        checksum: content checksum (:mod:`prep.io.checksum`).
        files: every file of the split dataset (path relative to it) and its size in bytes.
        source_rows, source_tokens: a mixture's rows and tokens per source in the split, else None.
    """

    fingerprint: str
    epoch: int
    split: int
    path: str
    num_rows: int
    checksum: str
    files: Mapping[str, int] = field(default_factory=dict)
    source_rows: tuple[int, ...] | None = None
    source_tokens: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"fingerprint": self.fingerprint, "epoch": self.epoch, "split": self.split,
                               "path": self.path, "num_rows": self.num_rows, "checksum": self.checksum,
                               "files": dict(self.files)}
        if self.source_rows is not None:
            doc["source_rows"], doc["source_tokens"] = list(self.source_rows), list(self.source_tokens or ())
        return doc


def parse_done(doc: Any) -> DoneRecord:
    """The record in ``doc`` (parsed JSON); strict.

    Raises:
        PrepError: one line naming the first bad key.
    """
    if not isinstance(doc, dict):
        raise PrepError("a done record must be a JSON object")
    missing = [k for k in _REQUIRED if k not in doc]
    unknown = sorted(set(doc) - set(_REQUIRED) - set(_OPTIONAL))
    if missing or unknown:
        raise PrepError(f"done record: missing keys {missing}, unknown keys {unknown}")
    if not isinstance(doc["fingerprint"], str) or not _FINGERPRINT.match(doc["fingerprint"]):
        raise PrepError(f"done record: fingerprint={doc['fingerprint']!r} is not 16 hex digits")
    for key in ("epoch", "split", "num_rows"):
        if not _count(doc[key]):
            raise PrepError(f"done record: {key}={doc[key]!r} must be an integer >= 0")
    if doc["path"] != split_path(doc["epoch"], doc["split"]):
        raise PrepError(f"done record: path={doc['path']!r}, expected {split_path(doc['epoch'], doc['split'])!r}")
    if not isinstance(doc["checksum"], str) or not doc["checksum"]:
        raise PrepError(f"done record: checksum={doc['checksum']!r} must be a non-empty string")
    files = doc["files"]
    if not (isinstance(files, dict) and all(isinstance(k, str) and k and _count(v) for k, v in files.items())):
        raise PrepError("done record: files must map each file of the split to its size in bytes (>= 0)")
    counts = [doc.get(k) for k in _OPTIONAL]
    if (counts[0] is None) != (counts[1] is None) or any(
            c is not None and not (isinstance(c, list) and all(_count(v) for v in c)) for c in counts):
        raise PrepError("done record: source_rows and source_tokens are both given (lists of counts >= 0) or neither")
    return DoneRecord(fingerprint=doc["fingerprint"], epoch=doc["epoch"], split=doc["split"], path=doc["path"],
                      num_rows=doc["num_rows"], checksum=doc["checksum"], files=dict(files),
                      source_rows=tuple(counts[0]) if counts[0] is not None else None,
                      source_tokens=tuple(counts[1]) if counts[1] is not None else None)
