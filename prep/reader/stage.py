"""The reader's contracts: what every stage does, what a layout gives, the state keys, the error.

A *stage* (:class:`Stage`) turns the items of the stage before it into its own and
can say, at any moment, what its consumer has taken (``get_state``); resetting a new
stage to that state continues exactly (``tests/common/roundtrip.py`` checks every
stage). A *layout* (:class:`Layout`) is what is read: a materialized output
(:class:`prep.reader.layouts.materialized.Materialized`) or a prepared table through an on-the-fly
plan (:class:`prep.reader.layouts.planned.Planned`).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import numpy as np

from prep.contracts.manifest import Manifest
from prep.contracts.table import TableMetadata
from prep.errors import PrepError

__all__ = ["EPOCH_KEY", "STEP_KEY", "Layout", "ReaderError", "SplitOpener", "SplitReader", "Stage"]

EPOCH_KEY = "epoch"  # a stage state is {EPOCH_KEY: e, STEP_KEY: t}: the next global step to deliver
STEP_KEY = "step"
T_co = TypeVar("T_co", covariant=True)


class ReaderError(PrepError):
    """A failure inside one of the reader's threads, re-raised where the batches are consumed."""


class Stage(Protocol[T_co]):
    """The contract every reader stage follows (see ../shared/STYLE.md, "Stages with a contract"): items of type ``T_co``.

    tests/test_reader_protocols.py holds each stage class to it under the type checker.
    """

    def reset(self, initial_state: dict[str, Any] | None) -> None: ...
    def next(self) -> T_co:
        """The next item; StopIteration after the last."""
        ...

    def get_state(self) -> dict[str, Any]: ...
    def shutdown(self) -> None: ...


class SplitReader(Protocol):
    """One (epoch, split) of a layout, opened: its class reads several of them at once."""

    @staticmethod
    def read_splits(splits: list[Any], rows: list[np.ndarray], pool: Any) -> tuple[Any, np.ndarray | None]:
        """Read-order ``rows[i]`` of ``splits[i]``, as one Arrow table and an ``order`` (where the
        splits' rows, one split after the other, are in it; None: in that order; see
        :class:`prep.reader.collate.Chunk`)."""
        ...


class SplitOpener(Protocol):
    """What the I/O stage reads through: one (epoch, split) at a time (a :class:`Layout`, or the cache's wrapper of one)."""

    def open_split(self, epoch: int, split: int, columns: list[str]) -> SplitReader:
        """One (epoch, split), opened in the calling process."""
        ...


class Layout(SplitOpener, Protocol):
    """What the reader needs from the data it reads (one implementation per mode).

    Attributes:
        uri: where the data is (in error messages and the cache's source).
        fingerprint: ties a reader state to the data and the plan.
        source_version: the prepared table's version.
        num_splits: splits per epoch.
        epochs: the epochs there are, ascending.
        split_rows: ``{epoch: int64 array of rows per split}``.
        columns: the columns there are.
        metadata: the prepared table's ``prep`` metadata.
        manifest: the materialized output's manifest (the cache needs it), None for an on-the-fly plan.
        mixture_batch: a mixture's global batch (readers' global batches are multiples of it), else None.
        mixture_tables: a mixture's tables in ``source`` column order, else None.
    """

    # read-only members: the implementations hold them as frozen fields or properties
    @property
    def uri(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def source_version(self) -> int | None: ...
    @property
    def num_splits(self) -> int: ...
    @property
    def epochs(self) -> tuple[int, ...]: ...
    @property
    def split_rows(self) -> dict[int, np.ndarray]: ...
    @property
    def columns(self) -> tuple[str, ...]: ...
    @property
    def metadata(self) -> TableMetadata: ...
    @property
    def manifest(self) -> Manifest | None: ...
    @property
    def mixture_batch(self) -> int | None: ...
    @property
    def mixture_tables(self) -> tuple[str, ...] | None: ...
