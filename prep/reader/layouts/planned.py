"""Read a prepared table directly, in the order a shuffle plan gives: no materialization.

Same API and same batches as reading ``prep materialize-shuffle``'s output for the
same plan: split ``s`` of epoch ``e`` is ``prep.plan.split_rows(...)`` of the table,
fetched with Lance ``take``. Reads are random instead of sequential (more IOPS, more
CPU), which is the price of skipping materialization; resuming is still a seek
(``prep.plan.split_rows_range`` computes just the slice it needs).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from prep import plan as planlib
from prep.io import storage
from prep.errors import PrepError
from prep.contracts.foreign import serving_metadata
from prep.io.lance_tables import open_table
from prep.plan.hash import row_keys
from prep.plan.spec import PlanSpec
from prep.reader.workers import forksafe
from prep.reader.stages.source import SplitTable

__all__ = ["Planned", "plan_spec"]


def plan_spec(plan: PlanSpec | Mapping[str, Any]) -> PlanSpec:
    """The spec of an on-the-fly plan: a :class:`PlanSpec`, or the keys of one (the rest default).

    Raises:
        PrepError: unknown keys or bad values, or a filter (filtered plans must be materialized).
    """
    spec = plan if isinstance(plan, PlanSpec) else PlanSpec.from_json(plan, fill_defaults=True)
    if spec.filter is not None:
        raise PrepError(f"plan filter={spec.filter!r}: reading with a filter needs `prep materialize-shuffle`")
    if spec.mixture is not None:
        raise PrepError("plan mixture: a mixture is read from its materialized output (`prep materialize-shuffle --mixture`)")
    return spec


class Planned:
    """A prepared table read through an on-the-fly plan (holds no handle: pickles and forks as uri + version + plan).

    Args:
        uri: the prepared Lance table.
        plan: the plan (a :class:`PlanSpec` or the keys of one; see :func:`plan_spec`).
        epochs: how many epochs (0..n-1), or which.
        version: the table version (default: the latest, pinned at open).
        s3: where to reach ``s3://`` URIs.
    """

    mixture_batch: int | None = None  # an on-the-fly plan reads one table, never a mixture
    mixture_tables: tuple[str, ...] | None = None
    manifest: None = None  # nothing is materialized (so there is nothing to cache)

    def __init__(self, uri: str, plan: PlanSpec | Mapping[str, Any], epochs: int | Sequence[int] = 1, *,
                 version: int | None = None, s3: storage.S3Options | None = None) -> None:
        # the absolute path, as `prep materialize-shuffle` records it: same plan -> same fingerprint
        uri = uri if storage.is_remote(uri) else os.path.abspath(uri)
        self.uri, self.s3, self.plan = uri, s3, plan_spec(plan)
        ds = open_table(uri, version, storage.lance_storage_options(uri, s3))
        self.source_version, self.num_rows, self.metadata = ds.version, ds.count_rows(), serving_metadata(ds, uri)
        self.num_splits = self.plan.num_splits
        self.epochs = tuple(range(epochs)) if isinstance(epochs, int) else tuple(sorted(epochs))
        self.fingerprint = self.plan.fingerprint(uri, self.source_version)
        self.columns = self.plan.columns or tuple(ds.schema.names)
        missing = [c for c in self.columns if c not in ds.schema.names]
        if missing:
            raise PrepError(f"plan columns {missing} are not in {uri}; it has {ds.schema.names}")
        self._hash_keys = self._keys(ds) if self.plan.strategy == "hash" else None
        sizes = np.array([planlib.split_size(num_rows=self.num_rows, split=s, **self._plan_args())
                          for s in range(self.num_splits)], dtype=np.int64)
        self.split_rows = {e: sizes for e in self.epochs}

    def at_version(self, version: int) -> "Planned":
        """The same plan and epochs over table version ``version`` (a reader state pins the version it was taken on).

        Raises:
            PrepError: the table has no such version (cleaned up?).
        """
        return Planned(self.uri, self.plan, self.epochs, version=version, s3=self.s3)

    def _keys(self, ds: Any) -> np.ndarray:
        columns = list(self.plan.hash_columns)
        return row_keys(ds.to_table(columns=columns), columns)

    def _plan_args(self) -> dict[str, Any]:
        """:mod:`prep.plan` arguments besides ``num_rows``, ``split`` and ``epoch``."""
        return {**self.plan.split_args(), "hash_keys": self._hash_keys}

    def open_split(self, epoch: int, split: int, columns: list[str]) -> "PlannedSplit":
        """Split ``split`` of ``epoch``, on this process's own handle of the pinned table version."""
        ds = forksafe.dataset(self.uri, self.source_version, storage.lance_storage_options(self.uri, self.s3))
        return PlannedSplit(self, SplitTable(self.uri, ds, columns), epoch, split)


class PlannedSplit:
    """Split ``split`` of ``epoch``: its read-order positions map to table rows through the plan."""

    def __init__(self, layout: Planned, table: SplitTable, epoch: int, split: int) -> None:
        self._layout, self._table, self._epoch, self._split = layout, table, epoch, split

    @staticmethod
    def read_splits(splits: list["PlannedSplit"], rows: list[np.ndarray], pool: Any) -> tuple[Any, np.ndarray]:
        """Read-order ``rows[i]`` of ``splits[i]`` in ONE ``take`` of table rows in ascending order.

        A Lance ``take`` costs about 20 ms a call on top of its rows (it visits every fragment), so
        one call per chunk instead of one per split; ascending rows read each fragment front to
        back. Returns the table and ``order``: row ``i`` of the splits' rows one after the other
        is row ``order[i]`` of the table (see :class:`prep.reader.collate.Chunk`).
        """
        positions = np.concatenate([split.positions(split_rows) for split, split_rows in zip(splits, rows)])
        ascending = np.argsort(positions, kind="stable")
        order = np.empty_like(ascending)
        order[ascending] = np.arange(len(ascending))
        return splits[0]._table.read(positions[ascending]), order

    def positions(self, rows: np.ndarray) -> np.ndarray:
        """Table rows of this split's read-order ``rows``."""
        start, stop = int(rows[0]), int(rows[-1]) + 1
        if rows[0] < 0 or stop > self._layout.split_rows[self._epoch][self._split]:
            raise PrepError(f"rows {start}..{stop - 1} are outside split {self._split} of {self._layout.uri}")
        order = planlib.split_rows_range(num_rows=self._layout.num_rows, split=self._split, epoch=self._epoch, start=start, stop=stop,
                                         **self._layout._plan_args())
        positions: np.ndarray = order[rows - start]
        return positions
