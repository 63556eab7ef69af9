"""Where a materialized output keeps what, and how its manifest is read and checked.

``OUT/_prep_job.json`` is written first: it names the job and its plan, and
marks the directory as one prep may write into and clean up (only the files of
this layout, never anything else there). Each (epoch, split) is
``OUT/epoch-EEEEE/split-SSSSS.lance`` followed by ``split-SSSSS.done.json``
(rows, content checksum); ``OUT/_work`` holds scratch data of a run (the filter
sidecar); ``manifest.json`` is written last, atomically. Layout and manifest:
docs/architecture.md ("Materialized epochs").
"""

from __future__ import annotations

import json
import re
from typing import Any

from prep import storage
from prep.errors import PrepError, one_line
from prep.outputs import MARKER

__all__ = [
    "FORMAT", "MANIFEST", "JOB_FILE", "JOB_NAME", "WORK", "split_path", "read_json_file", "read_manifest",
    "check_manifest", "owned_entries",
]

FORMAT = "prep.materialized/1"
MANIFEST = "manifest.json"
JOB_FILE = MARKER  # written first: names the job, marks the directory as prep's to write and clean
JOB_NAME = "prep materialize-shuffle"
WORK = "_work"
_RERUN = "rerun `prep materialize-shuffle` to rewrite it"
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")
_EPOCH_DIR = re.compile(r"^epoch-\d{5}$")
_SPLIT_ENTRY = re.compile(r"^split-\d{5}(\.lance|\.done\.json|\.lance\.tmp-[0-9a-f]+)$")


def split_path(epoch: int, split: int) -> str:
    """Relative path of one (epoch, split) dataset.

    >>> split_path(2, 17)
    'epoch-00002/split-00017.lance'
    """
    return f"epoch-{epoch:05d}/split-{split:05d}.lance"


def _done_path(epoch: int, split: int) -> str:
    return split_path(epoch, split)[: -len(".lance")] + ".done.json"


def owned_entries(top: list[str], epoch_dir: dict[str, list[str]], names: tuple[str, ...] = (MANIFEST, JOB_FILE, WORK)) -> list[str]:
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


def read_json_file(uri: str, s3: storage.S3Options | None, fix: str) -> Any:
    """Parses a JSON file; a broken one is a one-line PrepError naming it, the line and ``fix``."""
    fs, path = storage.filesystem(uri, s3)
    try:
        with fs.open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise PrepError(f"{uri} cannot be read ({one_line(exc)}): {fix}") from None
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise PrepError(f"{uri} is not valid JSON (not UTF-8 text): {fix}") from None
    except json.JSONDecodeError as exc:
        raise PrepError(f"{uri} is not valid JSON (line {exc.lineno}: {exc.msg}): {fix}") from None


def _int(value: Any, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def check_manifest(doc: Any, uri: str) -> dict[str, Any]:
    """Returns ``doc`` if it is a manifest in :data:`FORMAT` that verify, prewarm and the reader can use.

    Raises:
        PrepError: one line naming ``uri`` and the first thing that is wrong.
    """

    def bad(what: str) -> PrepError:
        return PrepError(f"{uri}: {what}; {_RERUN}")

    if not isinstance(doc, dict):
        raise bad("the top level is not a JSON object")
    missing = [k for k in ("format", "fingerprint", "source", "plan", "num_selected_rows", "columns", "epochs") if k not in doc]
    if missing:
        raise bad(f"missing keys {missing}")
    if doc["format"] != FORMAT:
        raise bad(f"format={doc['format']!r}, this prep reads {FORMAT!r} (written by another prep version?)")
    if not isinstance(doc["fingerprint"], str) or not _FINGERPRINT.match(doc["fingerprint"]):
        raise bad(f"fingerprint {doc['fingerprint']!r} is not 16 hex digits")
    src, p = doc["source"], doc["plan"]
    if not isinstance(src, dict) or not isinstance(src.get("uri"), str) or not _int(src.get("version"), 1):
        raise bad("source must name the table's uri and its version (an integer >= 1)")
    if not isinstance(p, dict) or not _int(p.get("num_splits"), 1):
        raise bad(f"plan.num_splits={p.get('num_splits') if isinstance(p, dict) else None!r} must be a positive integer")
    if not isinstance(p.get("strategy"), str) or not _int(p.get("seed")) or not _int(p.get("clump"), 1):
        raise bad("plan must hold strategy, seed (>= 0) and clump (>= 1)")
    if p["strategy"] == "hash" and not isinstance(p.get("hash_columns"), list):
        raise bad("plan.hash_columns must list the hashed columns (strategy hash)")
    if not _int(doc["num_selected_rows"]):
        raise bad(f"num_selected_rows={doc['num_selected_rows']!r} must be an integer >= 0")
    if not isinstance(doc["columns"], list) or not all(isinstance(c, str) for c in doc["columns"]):
        raise bad("columns must be a list of column names")
    if not isinstance(doc["epochs"], list) or not doc["epochs"]:
        raise bad("epochs must be a non-empty list")
    seen = set()
    for entry in doc["epochs"]:
        epoch = entry.get("epoch") if isinstance(entry, dict) else None
        if not _int(epoch) or epoch in seen or not isinstance(entry.get("splits"), list):
            raise bad(f"epoch entry {str(entry)[:60]} needs a new integer epoch and a list of splits")
        seen.add(epoch)
        splits = [s.get("split") if isinstance(s, dict) else None for s in entry["splits"]]
        if splits != list(range(p["num_splits"])):
            raise bad(f"epoch {epoch} lists splits {splits[:8]}{'...' if len(splits) > 8 else ''}, expected 0..{p['num_splits'] - 1}")
        for s in entry["splits"]:
            path, n, checksum = s.get("path"), s.get("num_rows"), s.get("checksum")
            if not isinstance(path, str) or path.startswith("/") or ".." in path or not _int(n) or not isinstance(checksum, str):
                raise bad(f"epoch {epoch} split {s['split']}: bad path={path!r}, num_rows={n!r} or checksum={checksum!r}")
    return doc


def read_manifest(path: str, s3: storage.S3Options | None = None) -> dict[str, Any]:
    """The checked manifest of a materialized output; anything wrong is a one-line PrepError."""
    uri = storage.join(path, MANIFEST)
    if not storage.exists(uri, s3):
        hint = ""
        if storage.exists(storage.join(path, JOB_FILE), s3):
            hint = " (a run was started there but has not finished: rerun it)"
        elif storage.exists(storage.join(path, "_versions"), s3):
            hint = " (it is a Lance table: pass plan=... to read a prepared table directly, or materialize it)"
        raise PrepError(
            f"{path} is not a materialized output: no {MANIFEST}{hint}; run `prep materialize-shuffle --output {path}` "
            "(the manifest is written last, so a crashed run has none)"
        )
    return check_manifest(read_json_file(uri, s3, _RERUN), uri)
