"""The I/O stage: large sequential reads of one rank's splits, as NumPy arrays.

One read covers several steps of every split the rank reads (each step takes a run of
rows of each, :class:`prep.plan.order.Share`): steps ``[t0, t1)`` of a split are one
range, read with Lance's offset/limit (a seek, whatever the position), or a ``take`` of a
worker's strided steps; splits are opened and read a few at a time. The read's splits become one :class:`~prep.reader.collate.Chunk`
(one set of columns), so batch building never loops over splits. Arrow buffers are
handed on without copies where the layout allows (see :func:`columns_to_numpy`).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np
import pyarrow as pa

from prep.io import storage
from prep.errors import PrepError
from prep.reader.workers import buffers, forksafe
from prep.reader.collate import Chunk, ranges
from prep.reader.schedule import Schedule
from prep.reader.stage import EPOCH_KEY, STEP_KEY, SplitOpener
from prep.plan.order import Share

__all__ = ["Ragged", "RawChunk", "SplitTable", "ChunkSource", "columns_to_numpy"]

READ_THREADS = 4  # split opens and reads in flight at once


@dataclass(frozen=True)
class Ragged:
    """A list column as Arrow lays it out: row ``i`` is ``values[offsets[i]:offsets[i+1]]``."""

    offsets: np.ndarray
    values: np.ndarray


def columns_to_numpy(table: pa.Table) -> dict[str, Any]:
    """Arrow columns as NumPy: zero-copy views of the Arrow buffers where the type allows.

    ``list<T>`` becomes :class:`Ragged`, ``fixed_size_list<T>[n]`` a 2-D ``(rows, n)`` array,
    anything else a 1-D array. Boolean values (bit-packed in Arrow) are copied, and so are
    columns of several chunks (one per split read): concatenated into recycled memory
    (:mod:`prep.reader.workers.buffers`), which, unlike fresh pages, costs no page faults.
    """
    out: dict[str, Any] = {}
    for name, col in zip(table.column_names, table.columns):
        parts = [_array_to_numpy(chunk) for chunk in col.chunks]
        out[name] = parts[0] if len(parts) == 1 else _concat(parts)
    return out


def _array_to_numpy(arr: pa.Array) -> Any:
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        values = arr.values
        return Ragged(arr.offsets.to_numpy(), values.to_numpy(zero_copy_only=not pa.types.is_boolean(values.type)))
    if pa.types.is_fixed_size_list(arr.type):
        flat = arr.flatten()
        return flat.to_numpy(zero_copy_only=not pa.types.is_boolean(flat.type)).reshape(len(arr), arr.type.list_size)
    return arr.to_numpy(zero_copy_only=False)


def _concat(parts: list[Any]) -> Any:
    """One column from several, rows after rows."""
    if isinstance(parts[0], Ragged):
        lens = [int(p.offsets[-1] - p.offsets[0]) for p in parts]
        starts = np.cumsum([0] + lens)
        offsets = _into([p.offsets[:-1] - (p.offsets[0] - start) for p, start in zip(parts, starts)] + [starts[-1:]])
        return Ragged(offsets, _into([p.values[p.offsets[0]:p.offsets[-1]] for p in parts]))
    return _into(parts)


def _into(arrays: list[np.ndarray]) -> np.ndarray:
    out = buffers.empty((sum(len(a) for a in arrays), *arrays[0].shape[1:]), np.result_type(*arrays))
    return np.concatenate(arrays, out=out)


class RowReader(Protocol):
    """One split, opened: rows at positions (a :class:`SplitTable`, or the cache's split that reads through one)."""

    def read(self, rows: np.ndarray) -> pa.Table: ...


class SplitTable:
    """One split's rows in read order, with reads that name the file when they fail.

    Args:
        uri: the split's Lance dataset.
        dataset: the open dataset.
        columns: the columns to read.
    """

    def __init__(self, uri: str, dataset: Any, columns: list[str]) -> None:
        self.uri, self._ds, self._columns = uri, dataset, columns

    @classmethod
    def open(cls, uri: str, *, expected_rows: int, columns: list[str], s3: storage.S3Options | None = None) -> "SplitTable":
        """Opens ``uri``; its row count must equal the manifest's ``expected_rows``."""
        try:  # in the I/O thread of the iterating process, never before a fork
            ds = forksafe.dataset(uri, None, storage.lance_storage_options(uri, s3))
            rows = ds.count_rows()
        except Exception as exc:  # Lance raises ValueError/OSError/RuntimeError for missing or broken files
            raise PrepError(f"cannot open split dataset {uri} ({_first_line(exc)}); "
                            "re-run `prep materialize-shuffle` or `prep prewarm`") from exc
        if rows != expected_rows:
            raise PrepError(f"split dataset {uri} has {rows} rows, the manifest says {expected_rows}: "
                            "it is truncated or was replaced; re-run `prep materialize-shuffle`")
        missing = [c for c in columns if c not in ds.schema.names]
        if missing:
            raise PrepError(f"split dataset {uri} lacks columns {missing} (it has {ds.schema.names})")
        return cls(uri, ds, columns)

    @staticmethod
    def read_splits(tables: Sequence[RowReader], rows: list[np.ndarray], pool: ThreadPoolExecutor) -> tuple[pa.Table, None]:
        """``rows[i]`` of ``tables[i]``, split after split (one read per split, on ``pool``'s threads)."""
        parts = list(pool.map(lambda table, split_rows: table.read(split_rows), tables, rows))
        return (parts[0] if len(parts) == 1 else pa.concat_tables(parts)), None

    def read(self, rows: np.ndarray) -> pa.Table:
        """Rows at the given positions, in that order: a range read when they are contiguous."""
        start, stop = int(rows[0]), int(rows[-1]) + 1
        try:
            if stop - start == len(rows) and (len(rows) < 3 or bool((np.diff(rows) == 1).all())):
                table = self._ds.to_table(columns=self._columns, offset=start, limit=stop - start)
            else:
                table = self._ds.take(rows, columns=self._columns)
        except Exception as exc:
            raise PrepError(f"cannot read rows {start}..{stop - 1} of {self.uri} ({_first_line(exc)}): "
                            "a data file is missing or corrupt; re-run `prep materialize-shuffle`") from exc
        if table.num_rows != len(rows):
            raise PrepError(f"{self.uri}: read {table.num_rows} rows of {start}..{stop - 1}, expected {len(rows)}")
        return table


@dataclass
class RawChunk:
    """One read: ``steps`` of ``epoch``; ``rows`` holds the rank's rows of those steps, all splits in one."""

    epoch: int
    steps: np.ndarray
    rows: Chunk
    num_rows: int
    nbytes: int
    fetch_s: float = field(default=0.0)


class ChunkSource:
    """Stage: reads the rank's splits one chunk of steps at a time.

    State is ``{epoch, step}``: the position after the last chunk returned.

    Args:
        layout: the materialized output (or on-the-fly plan) to read, or the cache in front of it.
        schedule: the steps being read.
        share: the rank's rows of each step.
        columns: the columns to read.
        worker: this DataLoader worker's index (0 without workers).
        num_workers: DataLoader workers sharing the rank's steps (1 without workers).
        max_steps: steps in one read once reads have ramped up.
    """

    def __init__(self, *, layout: SplitOpener, schedule: Schedule, share: Share, columns: list[str],
                 worker: int = 0, num_workers: int = 1, max_steps: int = 64) -> None:
        self._layout, self._schedule, self._share, self._columns = layout, schedule, share, columns
        self._worker, self._num_workers, self._max_steps = worker, num_workers, max_steps
        self._tables: dict[int, Any] = {}
        self._tables_epoch: int | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.fetch_s, self.bytes_read, self.rows_read = 0.0, 0, 0
        self.reset(None)

    def reset(self, initial_state: dict[str, int] | None) -> None:
        """Seeks to ``initial_state`` (``None``: the first step)."""
        start = 0 if initial_state is None else self._schedule.index(initial_state[EPOCH_KEY], initial_state[STEP_KEY])
        self._position = self._schedule.position(start)
        self._chunks = self._schedule.chunks(start, self._worker, self._num_workers, self._max_steps)

    def next(self) -> RawChunk:
        """Reads the next chunk. Raises StopIteration after the last one."""
        epoch, steps = next(self._chunks)
        started = time.perf_counter()
        starts, counts = self._share.rows(steps)
        splits = np.flatnonzero(counts.sum(axis=0))
        rows = [ranges(starts[:, s], counts[:, s]) for s in splits]
        if self._pool is None:  # opens and reads of many splits overlap (Lance releases the GIL)
            self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="reader-read")
        tables = self._open(epoch, [int(s) for s in splits], self._pool)
        table, order = type(tables[0]).read_splits(tables, rows, self._pool)
        merged = Chunk.of(columns_to_numpy(table), counts[:, splits], order)
        num_rows = int(counts.sum())
        self._position = self._schedule.position(self._schedule.index(epoch, int(steps[-1])) + 1)
        chunk = RawChunk(epoch, steps, merged, num_rows, table.nbytes, time.perf_counter() - started)
        self.fetch_s += chunk.fetch_s
        self.bytes_read += chunk.nbytes
        self.rows_read += chunk.num_rows
        return chunk

    def get_state(self) -> dict[str, int]:
        return {EPOCH_KEY: self._position[0], STEP_KEY: self._position[1]}

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._tables.clear()

    def _open(self, epoch: int, splits: list[int], pool: ThreadPoolExecutor) -> list[Any]:
        """``splits`` of ``epoch``, each opened once (on the pool: the first batch waits on all of them)."""
        if self._tables_epoch != epoch:
            self._tables.clear()
            self._tables_epoch = epoch
        missing = [s for s in splits if s not in self._tables]
        opened = pool.map(lambda split: self._layout.open_split(epoch, split, self._columns), missing)
        self._tables.update(zip(missing, opened))
        return [self._tables[s] for s in splits]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
