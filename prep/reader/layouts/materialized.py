"""Open a materialized output: its manifest (read by :func:`prep.io.materialized.read_manifest`), its split datasets.

The manifest (``docs/architecture.md``, "Materialized epochs") is the only thing
the reader trusts: it names every (epoch, split) dataset and its row count, and
its fingerprint ties a reader state to the data it was taken on. Opening reads
one small JSON file; split datasets are opened lazily, by the I/O thread, and
their row counts are checked against the manifest so a truncated or replaced
split is an error instead of a silently short epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from prep.io import storage
from prep.contracts.table import TableMetadata
from prep.errors import PrepError
from prep.contracts.manifest import Manifest
from prep.io.materialized import read_manifest
from prep.reader.stages.source import SplitTable

__all__ = ["Materialized"]



@dataclass(frozen=True, kw_only=True)
class Materialized:
    """A materialized output, described by its manifest (no open handles: it pickles as its manifest).

    Args:
        uri: the output directory (local path or ``s3://``).
        fingerprint: the manifest's fingerprint (source uri + version + plan).
        num_splits: splits per epoch.
        epochs: the epoch numbers the manifest lists, ascending.
        split_rows: ``{epoch: int64 array of rows per split}``.
        split_paths: ``{epoch: [path of split 0, ...]}`` relative to ``uri``.
        columns: the materialized columns.
        metadata: the prepared table's ``prep`` metadata (kind, tokenizer, ...).
        source_version: the prepared table version that was materialized (the newest one an epoch
            drew from, when the output was extended onto a grown table; the fingerprint is the first's).
        s3: where to reach ``s3://`` URIs.
        mixture_batch: a mixture's global batch ``G`` (readers' global batches must be multiples), else None.
        mixture_tables: a mixture's tables, in ``source`` column order, else None.
        manifest: the manifest itself (read once: the reader cache is built from it).
    """

    uri: str
    fingerprint: str
    num_splits: int
    epochs: tuple[int, ...]
    split_rows: dict[int, np.ndarray]
    split_paths: dict[int, tuple[str, ...]]
    columns: tuple[str, ...]
    metadata: TableMetadata
    source_version: int | None
    s3: storage.S3Options | None = None
    mixture_batch: int | None = None
    mixture_tables: tuple[str, ...] | None = None
    manifest: Manifest | None = None

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
        m = read_manifest(uri, s3)
        return cls(
            uri=uri,
            fingerprint=m.fingerprint,
            num_splits=m.plan.num_splits,
            epochs=tuple(e.epoch for e in m.epochs),
            split_rows={e.epoch: np.array([s.num_rows for s in e.splits], dtype=np.int64) for e in m.epochs},
            split_paths={e.epoch: tuple(s.path for s in e.splits) for e in m.epochs},
            columns=m.columns,
            metadata=m.source.metadata,
            source_version=m.source.version,
            s3=s3,
            mixture_batch=m.plan.mixture.global_batch if m.plan.mixture else None,
            mixture_tables=tuple(s.table for s in m.plan.mixture.sources) if m.plan.mixture else None,
            manifest=m,
        )

    def check_global_batch(self, global_batch_size: int) -> None:
        """A mixture's proportions hold per ``G`` rows: a reader's global batch must be ``k*G``.

        Raises:
            PrepError: one line naming both numbers.
        """
        g = self.mixture_batch
        if g and global_batch_size % g:
            raise PrepError(f"global_batch_size={global_batch_size} is not a multiple of the mixture's global batch {g} "
                            f"({self.uri}): proportions hold per {g} rows; use a multiple of {g}, "
                            f"e.g. {g * max(1, round(global_batch_size / g))}")

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
