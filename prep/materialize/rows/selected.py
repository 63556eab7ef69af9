"""Reading the selected row set: rows by position, ids, hash keys, and the filter sidecar.

The plan (:mod:`prep.plan`) says which selected rows split ``s`` reads in
epoch ``e``, in order. ``--filter`` selects rows once: their row addresses go
to a small sidecar (``OUT/_work/selection.lance``) that tasks read by position.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa

from prep.io import lance_tables
from prep.errors import PrepError
from prep.materialize.resolved import ResolvedTable, dataset
from prep.plan import hash as plan_hash

IO_BUFFER_BYTES = 64 << 20  # Lance's read-ahead in a streaming scan (its default, 2 GiB, would be memory beyond any budget)

__all__ = ["read_rows", "read_range", "iter_range", "bytes_per_row", "selected_ids", "hash_keys_for", "write_selection", "selection_fingerprint"]


def _take(ds: Any, positions: np.ndarray, columns: list[str], selection: Any = None) -> pa.Table:
    """Rows at ``positions`` of ``ds`` (or of its rows listed in ``selection``), in the given order.

    Lance sorts the positions, reads in order and puts the rows back itself (as
    fast as a sorted take, measured), so no reordering happens here.
    """
    positions = np.asarray(positions, dtype=np.int64)
    if selection is None:
        return ds.take(positions, columns=columns)
    addresses = selection.take(positions, columns=["row_address"]).column("row_address")
    return ds._take_rows(addresses.combine_chunks(), columns=columns)


def read_rows(job: ResolvedTable, source: Any, positions: np.ndarray, columns: Sequence[str] | None = None) -> pa.Table:
    """Rows at ``positions`` of the selected row set, in the given order."""
    selection = dataset(job, job.selection) if job.selection else None
    return _take(source, positions, list(columns or job.columns), selection)


def read_range(job: ResolvedTable, source: Any, start: int, stop: int) -> pa.Table:
    """Selected rows ``[start, stop)`` in order: one scan of the table, or a take through the filter sidecar."""
    if job.selection is None:
        return source.scanner(columns=list(job.columns), offset=start, limit=stop - start, batch_size=stop - start).to_table()
    return read_rows(job, source, np.arange(start, stop))


def iter_range(job: ResolvedTable, source: Any, start: int, stop: int, rows: int, row_bytes: int) -> Iterator[pa.Table]:
    """Selected rows ``[start, stop)`` in order, about ``rows`` (of ``row_bytes`` on average) at a time: one
    streaming scan of the table (each page read once, where a read per chunk would read again each page a chunk
    boundary cuts), or takes through the filter sidecar."""
    if job.selection is not None:
        for a in range(start, stop, rows):
            yield read_rows(job, source, np.arange(a, min(a + rows, stop)))
        return
    scan = source.scanner(columns=list(job.columns), offset=start, limit=stop - start, batch_size=rows,
                          io_buffer_size=max(IO_BUFFER_BYTES, 4 * rows * row_bytes))
    for batch in scan.to_batches():
        if batch.num_rows:
            yield pa.Table.from_batches([batch])


def bytes_per_row(job: ResolvedTable, source: Any) -> int:
    """Arrow bytes of an average output row, from the first 1,000 rows (sizes the passes that read ranges)."""
    sample = source.take(np.arange(min(1000, source.count_rows())), columns=list(job.columns))
    return max(1, sample.nbytes // max(1, sample.num_rows))


def selected_ids(job: ResolvedTable, source: Any) -> np.ndarray:
    """The ``id`` column of the selected rows, in selection order (for verify)."""
    filt = job.plan.filter
    return source.to_table(columns=["id"], filter=filt).column("id").to_numpy()


def hash_keys_for(job: ResolvedTable, source: Any) -> np.ndarray:
    """One uint64 key per selected row from ``hash_columns`` (8 bytes a row, read in one pass)."""
    cols = list(job.plan.hash_columns or [])
    parts = [
        plan_hash.row_keys(pa.Table.from_batches([b]), cols)
        for b in source.to_batches(columns=cols, filter=job.plan.filter, batch_size=65536)
        if b.num_rows
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


# ---------------------------------------------------------------- selection


SELECTION_KEY = b"prep.selection"  # the sidecar's schema metadata: the plan fingerprint it was selected for


def selection_fingerprint(selection: Any) -> str | None:
    """The fingerprint a selection sidecar (an open Lance dataset) was written for."""
    raw = (selection.schema.metadata or {}).get(SELECTION_KEY)
    return json.loads(raw).get("fingerprint") if raw else None


def write_selection(job: ResolvedTable, source: Any, uri: str) -> int:
    """Writes the row addresses of rows matching the filter to ``uri``; returns their count."""
    filt = job.plan.filter
    try:
        scanner = source.scanner(columns=[], filter=filt, with_row_address=True, batch_size=1 << 16)
        reader = scanner.to_reader()
    except (ValueError, OSError) as exc:
        raise PrepError(f"--filter {filt!r} is not a valid filter for {job.source}: {str(exc).splitlines()[0][:300]}") from None
    meta = {SELECTION_KEY: json.dumps({"fingerprint": job.fingerprint})}
    schema = pa.schema([("row_address", pa.uint64())], metadata=meta)
    count = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal count
        try:
            for b in reader:
                count += b.num_rows
                yield pa.record_batch([b.column("_rowaddr")], schema=schema)
        except (ValueError, OSError) as exc:
            raise PrepError(f"--filter {filt!r} failed on {job.source}: {str(exc).splitlines()[0][:300]}") from None

    import lance

    lance_tables.remove_table(uri, job.s3)
    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), uri, schema=schema, mode="create",
                        storage_options=job.lance_options(uri))
    return count
