"""The (epoch, split) task: write one split dataset, then its done record.

One task per (epoch, split), on either executor, writes
``OUT/epoch-EEEEE/split-SSSSS.lance`` and then ``split-SSSSS.done.json``
(rows, content checksum). Two ways to get a split's rows:

- ``take``: each chunk of the read order is one Lance ``take``; clumps make it
  nearly a scan (Ray: when :func:`prep.materialize.held.reads_scattered` is false;
  local: when the selected rows do not fit in memory and clumps are large).
- ``held``: the split's rows are already in memory (:mod:`prep.materialize.held`)
  and are taken into this epoch's order there.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from prep import lance_io, plan, storage
from prep.materialize.held import Held
from prep.materialize.job import Job, _dataset
from prep.checksum import Checksum
from prep.manifest import split_path
from prep.materialize.layout import done_path
from prep.materialize.rows import read_rows

__all__: list[str] = []


def _split_batches(job: Job, epoch: int, split: int, hash_keys: np.ndarray | None, held: Held | None) -> Iterator[pa.RecordBatch]:
    """The split's rows in this epoch's read order, a few read batches at a time."""
    kw = dict(split=split, epoch=epoch, hash_keys=hash_keys, **job.split_kwargs())
    if held is not None:  # the split's rows are in memory: take them into this epoch's order
        yield from held.batches(plan.split_rows(**kw), job.read_rows)
        return
    source = _dataset(job, job.source, job.version)  # take: each chunk of the read order is one Lance take
    for chunk in plan.iter_split_rows(chunk_rows=job.read_rows, **kw):
        yield from read_rows(job, source, chunk).to_batches(max_chunksize=job.read_rows)


def _write_split(job: Job, epoch: int, split: int, hash_keys: np.ndarray | None, held: Held | None = None) -> dict[str, Any]:
    """One (epoch, split): write its dataset, then its done record. Idempotent.

    Args:
        job (Job): the run.
        epoch (int): the epoch.
        split (int): the split.
        hash_keys (np.ndarray | None): one key per selected row (``hash`` strategy), else None.
        held (Held | None): rows in memory holding all of the split's rows, or None to take them from the table.

    Returns:
        The done record (also written next to the split).
    """
    import lance

    rel = split_path(epoch, split)
    uri = storage.join(job.output, rel)
    lance_io.remove_table(uri, job.s3)  # a killed attempt may have left data files
    schema = _dataset(job, job.source, job.version).schema
    schema = pa.schema([schema.field(c) for c in job.columns])
    checksum = Checksum()

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in _split_batches(job, epoch, split, hash_keys, held):
            batch = batch.select(list(job.columns))
            checksum.update(batch)
            yield batch

    lance.write_dataset(
        pa.RecordBatchReader.from_batches(schema, batches()), uri, schema=schema, mode="create",
        max_rows_per_file=1 << 30, storage_options=job.lance_options(uri), data_storage_version=job.lance_format,
    )
    record = {"fingerprint": job.fingerprint, "epoch": epoch, "split": split, "path": rel,
              "num_rows": checksum.num_rows, "checksum": checksum.hexdigest()}
    storage.write_json_atomic(storage.join(job.output, done_path(epoch, split)), record, job.s3)
    return record
