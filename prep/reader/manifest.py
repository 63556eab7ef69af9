"""Open a materialized output: read and check ``manifest.json``, open split datasets.

The manifest (``docs/architecture.md``, "Materialized epochs") is the only thing
the reader trusts: it names every (epoch, split) dataset and its row count, and
its fingerprint ties a reader state to the data it was taken on. Opening reads
one small JSON file; split datasets are opened lazily, by the I/O thread, and
their row counts are checked against the manifest so a truncated or replaced
split is an error instead of a silently short epoch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from prep import storage
from prep.errors import PrepError
from prep.reader.source import SplitTable

__all__ = ["MANIFEST_NAME", "MANIFEST_FORMAT", "Materialized"]

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "prep.materialized/1"
_REQUIRED = ("format", "fingerprint", "source", "plan", "columns", "epochs")
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True, kw_only=True)
class Materialized:
    """A materialized output, described by its manifest (no open handles: it pickles small).

    Args:
        uri: the output directory (local path or ``s3://``).
        fingerprint: the manifest's fingerprint (source uri + version + plan).
        num_splits: splits per epoch.
        epochs: the epoch numbers the manifest lists, ascending.
        split_rows: ``{epoch: int64 array of rows per split}``.
        split_paths: ``{epoch: [path of split 0, ...]}`` relative to ``uri``.
        columns: the materialized columns.
        metadata: the prepared table's ``prep`` metadata (kind, tokenizer, ...).
        source_version: the prepared table version that was materialized.
        s3: where to reach ``s3://`` URIs.
    """

    uri: str
    fingerprint: str
    num_splits: int
    epochs: tuple[int, ...]
    split_rows: dict[int, np.ndarray]
    split_paths: dict[int, tuple[str, ...]]
    columns: tuple[str, ...]
    metadata: dict[str, Any]
    source_version: int | None
    s3: storage.S3Options | None = None

    @classmethod
    def open(cls, uri: str, s3: storage.S3Options | None = None) -> "Materialized":
        """Reads and checks ``uri/manifest.json``.

        Args:
            uri: a directory written by ``prep materialize-shuffle``.
            s3: S3 endpoint and keys for ``s3://`` URIs (default: the environment).

        Returns:
            The output's description.

        Raises:
            PrepError: no manifest, or a manifest that breaks the documented format.
        """
        path = storage.join(uri, MANIFEST_NAME)
        if not storage.exists(path, s3):
            hint = ""
            if storage.exists(storage.join(uri, "_versions"), s3):
                hint = " (it is a Lance table: pass plan=... to read a prepared table directly)"
            raise PrepError(
                f"{uri} is not a materialized output: no {MANIFEST_NAME}{hint}; "
                "run `prep materialize-shuffle` (the manifest is written last, so a crashed run has none)"
            )
        try:
            doc = storage.read_json(path, s3)
        except ValueError as exc:
            raise PrepError(f"{path} is not valid JSON ({exc})") from None
        return cls._from_doc(uri, path, doc, s3)

    @classmethod
    def _from_doc(cls, uri: str, path: str, doc: Any, s3: storage.S3Options | None) -> "Materialized":
        def bad(what: str) -> PrepError:
            return PrepError(f"{path}: {what}; re-run `prep materialize-shuffle` to rewrite it")

        if not isinstance(doc, dict):
            raise bad("top level is not a JSON object")
        missing = [k for k in _REQUIRED if k not in doc]
        if missing:
            raise bad(f"missing keys {missing}")
        if doc["format"] != MANIFEST_FORMAT:
            raise bad(f"format={doc['format']!r}, this reader reads {MANIFEST_FORMAT!r}")
        fingerprint = doc["fingerprint"]
        if not isinstance(fingerprint, str) or not _FINGERPRINT.match(fingerprint):
            raise bad(f"fingerprint={fingerprint!r} is not 16 hex digits")
        num_splits = doc["plan"].get("num_splits") if isinstance(doc["plan"], dict) else None
        if not isinstance(num_splits, int) or num_splits < 1:
            raise bad(f"plan.num_splits={num_splits!r} must be a positive integer")
        rows: dict[int, np.ndarray] = {}
        paths: dict[int, tuple[str, ...]] = {}
        for entry in doc["epochs"]:
            epoch = entry.get("epoch")
            splits = sorted(entry.get("splits", []), key=lambda s: s.get("split", -1))
            if not isinstance(epoch, int) or epoch in rows:
                raise bad(f"epoch entry {epoch!r} is not a new integer")
            if [s.get("split") for s in splits] != list(range(num_splits)):
                raise bad(f"epoch {epoch} lists splits {[s.get('split') for s in splits][:8]}..., "
                          f"expected 0..{num_splits - 1}")
            for s in splits:
                n, p = s.get("num_rows"), s.get("path")
                if not isinstance(n, int) or n < 0 or not isinstance(p, str) or p.startswith("/") or ".." in p:
                    raise bad(f"epoch {epoch} split {s.get('split')}: bad num_rows={n!r} or path={p!r}")
            rows[epoch] = np.array([s["num_rows"] for s in splits], dtype=np.int64)
            paths[epoch] = tuple(s["path"] for s in splits)
        if not rows:
            raise bad("no epochs")
        source = doc["source"] if isinstance(doc["source"], dict) else {}
        return cls(
            uri=uri,
            fingerprint=fingerprint,
            num_splits=num_splits,
            epochs=tuple(sorted(rows)),
            split_rows=rows,
            split_paths=paths,
            columns=tuple(doc["columns"] or ()),
            metadata=dict(source.get("metadata") or {}),
            source_version=source.get("version"),
            s3=s3,
        )

    def pick_epochs(self, epochs: int | Sequence[int] | None) -> tuple[int, ...]:
        """Epochs to read: all (None), the first ``n`` (int) or the listed ones, which must exist."""
        if epochs is None:
            return self.epochs
        chosen = tuple(range(epochs)) if isinstance(epochs, int) else tuple(sorted(set(epochs)))
        missing = [e for e in chosen if e not in self.epochs]
        if missing or not chosen:
            raise PrepError(f"epochs {missing or list(chosen)} are not in {self.uri} (it has epochs {list(self.epochs)})")
        return chosen

    def open_split(self, epoch: int, split: int, columns: list[str]) -> SplitTable:
        """Opens one (epoch, split) dataset and checks its row count against the manifest.

        Raises:
            PrepError: the dataset is missing, unreadable or holds a different number of rows.
        """
        uri = storage.join(self.uri, self.split_paths[epoch][split])
        return SplitTable.open(uri, expected_rows=int(self.split_rows[epoch][split]), columns=columns, s3=self.s3)
