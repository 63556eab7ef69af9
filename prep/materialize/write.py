"""The (epoch, split) task: write one split dataset, then its done record.

One task per (epoch, split), on either executor, writes
``OUT/epoch-EEEEE/split-SSSSS.lance`` and then its done record (rows, content
checksum, files and sizes: :mod:`prep.contracts.done`). Each commit is a kill point
(:mod:`prep.materialize.faults`). Two ways to get a split's rows:

- ``take``: each chunk of the read order is one Lance ``take``; clumps make it
  nearly a scan (when the selected rows do not fit in one holder and clumps are
  large: :mod:`prep.materialize.table`).
- ``held``: the split's rows are already in memory (:mod:`prep.materialize.rows.held`)
  and are taken into this epoch's order there.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Protocol

import numpy as np
import pyarrow as pa

from prep import plan

from prep.io import lance_tables

from prep.io import storage
from prep.materialize.faults import kill_point
from prep.materialize.rows.held import Held
from prep.materialize.resolved import ResolvedTable, dataset
from prep.io.checksum import Checksum
from prep.contracts.done import DoneRecord
from prep.io.materialized import write_done
from prep.contracts.manifest import split_path
from prep.materialize.rows.selected import read_rows

__all__ = ["SplitOutput", "write_split", "write_split_dataset", "split_files", "output_schema"]


def _split_batches(job: ResolvedTable, epoch: int, split: int, hash_keys: np.ndarray | None, held: Held | None) -> Iterator[pa.RecordBatch]:
    """The split's rows in this epoch's read order, a few read batches at a time."""
    kw = dict(split=split, epoch=epoch, hash_keys=hash_keys, **job.split_kwargs())
    if held is not None:  # the split's rows are in memory: take them into this epoch's order
        yield from held.batches(plan.split_rows(**kw), job.read_rows, job.pick_rows)
        return
    source = dataset(job, job.source, job.version)  # take: each chunk of the read order is one Lance take
    for chunk in plan.iter_split_rows(chunk_rows=job.read_rows, **kw):
        yield from read_rows(job, source, chunk).to_batches(max_chunksize=job.read_rows)


def write_split(job: ResolvedTable, epoch: int, split: int, hash_keys: np.ndarray | None, held: Held | None = None) -> DoneRecord:
    """One (epoch, split) of a single table: write its dataset, then its done record. Idempotent.

    Args:
        job (ResolvedTable): the run.
        epoch (int): the epoch.
        split (int): the split.
        hash_keys (np.ndarray | None): one key per selected row (``hash`` strategy), else None.
        held (Held | None): rows in memory holding all of the split's rows, or None to take them from the table.

    Returns:
        The done record (also written next to the split).
    """
    batches = (batch.select(list(job.columns)) for batch in _split_batches(job, epoch, split, hash_keys, held))
    return write_split_dataset(job, epoch, split, output_schema(job), batches)


def output_schema(job: ResolvedTable) -> pa.Schema:
    """The schema of a single table's split datasets: the run's columns, as the table has them."""
    schema = dataset(job, job.source, job.version).schema
    return pa.schema([schema.field(c) for c in job.columns])


class SplitOutput(Protocol):
    """Where a split dataset goes: what :func:`write_split_dataset` needs of a run."""

    output: str
    fingerprint: str
    s3: storage.S3Options
    lance_format: str

    def lance_options(self, uri: str) -> dict[str, str] | None: ...


def split_files(uri: str, s3: storage.S3Options | None) -> dict[str, int]:
    """Every file of the dataset at ``uri`` (path relative to it) and its size in bytes; empty when there is none."""
    fs, root = storage.filesystem(uri, s3)
    root = root.rstrip("/")
    fs.invalidate_cache(root)  # Lance wrote these files, not fsspec: a listing it cached earlier is stale
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return {}
    return {name[len(root) + 1:]: int(info["size"]) for name, info in found.items()
            if info.get("type") != "directory" and name.startswith(root + "/")}


def write_split_dataset(job: SplitOutput, epoch: int, split: int, schema: pa.Schema, batches: Iterable[pa.RecordBatch],
                        counts: Callable[[], tuple[list[int], list[int]]] | None = None) -> DoneRecord:
    """Writes ``batches`` (in ``schema``) as the (epoch, split) dataset, then its done record; returns the record.

    Used by single-table runs and mixtures alike; ``counts()`` (mixtures) returns the rows and
    tokens per source once the batches are written.
    """
    import lance

    rel = split_path(epoch, split)
    uri = storage.join(job.output, rel)
    lance_tables.remove_table(uri, job.s3)  # a killed attempt, or a damaged split, may have left files
    checksum = Checksum()

    def counted() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            checksum.update(batch)
            yield batch

    lance.write_dataset(
        pa.RecordBatchReader.from_batches(schema, counted()), uri, schema=schema, mode="create",
        max_rows_per_file=1 << 30, storage_options=job.lance_options(uri), data_storage_version=job.lance_format,
    )
    kill_point("split")
    rows, tokens = counts() if counts else (None, None)
    record = DoneRecord(fingerprint=job.fingerprint, epoch=epoch, split=split, path=rel, num_rows=checksum.num_rows,
                        checksum=checksum.hexdigest(), files=split_files(uri, job.s3),
                        source_rows=tuple(rows) if rows is not None else None,
                        source_tokens=tuple(tokens) if tokens is not None else None)
    write_done(job.output, record, job.s3)
    kill_point("done")
    return record
