"""``prep verify``: check a materialized output against its source table.

Checks, per epoch and split: the split dataset exists and holds the planned
number of rows, its content checksum matches the manifest, and (when the
output has an ``id`` column) its ids are exactly the source rows the plan puts
there, in plan order; per epoch: every selected row appears exactly once (an
order-free fingerprint of all ids, compared with the source's). The source
table must still be at the version the manifest names: a newer version is a
failure, since the plan's positions would point at other rows.

The content checksum (:class:`Checksum`) is sha256 over a canonical form of
the Arrow data that does not depend on how rows are cut into batches or files:
one byte stream per leaf of the schema (null positions, list/string lengths,
value bytes), each hashed on its own, then combined with the schema and the row
count. Materialize computes it while writing, verify and prewarm recompute it
from the files.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prep import lance_io, plan, storage
from prep.errors import PrepError, one_line

__all__ = ["Checksum", "table_checksum", "dataset_checksum", "Report", "verify"]

log = logging.getLogger(__name__)


class Checksum:
    """Batch-boundary independent sha256 of Arrow data.

    >>> t = pa.table({"x": [[1, 2], None, [3]], "s": ["a", "bc", None]})
    >>> a, b = Checksum(), Checksum()
    >>> a.update(t)
    >>> for i in range(3): b.update(t.slice(i, 1))
    >>> a.hexdigest() == b.hexdigest()
    True
    """

    def __init__(self) -> None:
        self._streams: dict[str, Any] = {}
        self._seen: dict[str, int] = {}
        self._schema: pa.Schema | None = None
        self.num_rows = 0

    def _put(self, path: str, data: Any) -> None:
        h = self._streams.get(path)
        if h is None:
            h = self._streams[path] = hashlib.sha256()
        h.update(data)

    def _nulls(self, path: str, arr: pa.Array) -> None:
        start = self._seen.get(path, 0)
        self._seen[path] = start + len(arr)
        if arr.null_count:
            valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            self._put(path + "#nulls", (np.flatnonzero(~valid) + start).astype("<i8").tobytes())

    def _array(self, path: str, arr: pa.Array) -> None:
        t = arr.type
        if isinstance(t, pa.ExtensionType):
            arr, t = arr.storage, t.storage_type
        if pa.types.is_dictionary(t):
            arr = arr.cast(t.value_type)
            t = arr.type
        self._nulls(path, arr)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            lengths = pc.fill_null(pc.list_value_length(arr), 0)
            self._put(path + "#len", np.asarray(lengths.to_numpy(zero_copy_only=False), dtype="<i8").tobytes())
            self._array(path + ".item", arr.flatten())
        elif pa.types.is_fixed_size_list(t):
            self._array(path + ".item", arr.flatten())
        elif pa.types.is_struct(t):
            for f, child in zip(t, arr.flatten()):
                self._array(f"{path}.{f.name}", child)
        elif pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            arr = pc.fill_null(arr, "" if pa.types.is_string(t) or pa.types.is_large_string(t) else b"")
            big = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if big else np.int32)[arr.offset : arr.offset + len(arr) + 1]
            self._put(path + "#len", np.diff(offsets).astype("<i8").tobytes())
            data = arr.buffers()[2]
            if data is not None and len(offsets) and offsets[-1] > offsets[0]:
                self._put(path, memoryview(data)[int(offsets[0]) : int(offsets[-1])])
        elif pa.types.is_boolean(t):
            filled = pc.fill_null(arr, False)
            self._put(path, np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.uint8).tobytes())
        elif pa.types.is_null(t):
            pass
        elif t.bit_width and t.bit_width % 8 == 0:
            if arr.null_count:
                arr = pc.fill_null(arr, pa.scalar(0).cast(t))
            width = t.bit_width // 8
            data = arr.buffers()[1]
            if data is not None and len(arr):
                self._put(path, memoryview(data)[arr.offset * width : (arr.offset + len(arr)) * width])
        else:
            raise PrepError(f"column {path!r} has type {t}, which the content checksum does not support")

    def update(self, data: pa.Table | pa.RecordBatch) -> None:
        """Adds rows (a table or a batch) to the checksum."""
        if self._schema is None:
            self._schema = pa.schema([pa.field(f.name, f.type) for f in data.schema])
        columns = data.columns
        for f, col in zip(data.schema, columns):
            chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            for chunk in chunks:
                self._array(f.name, chunk)
        self.num_rows += data.num_rows

    def hexdigest(self) -> str:
        """sha256 hex over the schema, the row count and each stream's digest."""
        top = hashlib.sha256()
        top.update(str(self._schema).encode() if self._schema is not None else b"")
        top.update(str(self.num_rows).encode())
        for path in sorted(self._streams):
            top.update(path.encode() + b"\0" + self._streams[path].digest())
        return top.hexdigest()


def table_checksum(batches: Iterable[pa.Table | pa.RecordBatch]) -> tuple[int, str]:
    """(rows, checksum) of a sequence of tables or batches."""
    c = Checksum()
    for b in batches:
        c.update(b)
    return c.num_rows, c.hexdigest()


def dataset_checksum(uri: str, storage_options: dict[str, str] | None = None) -> tuple[int, str]:
    """(rows, checksum) of a committed Lance dataset, read in order."""
    ds = lance_io.open_table(uri, storage_options=storage_options)
    return table_checksum(ds.to_batches(batch_size=8192))


def _id_sums(ids: np.ndarray) -> np.ndarray:
    """Order-free multiset fingerprint of ids: (count, sum mix64(id), sum mix64(mix64(id)))."""
    from prep.plan.permutation import mix64

    a = mix64(np.asarray(ids, dtype=np.uint64))
    with np.errstate(over="ignore"):
        return np.array([len(ids), a.sum(dtype=np.uint64), mix64(a).sum(dtype=np.uint64)], dtype=np.uint64)


def _ids(uri: str, s3: storage.S3Options | None) -> np.ndarray:
    """The ``id`` column of a split dataset, in order."""
    ds = lance_io.open_table(uri, storage_options=storage.lance_storage_options(uri, s3))
    return ds.to_table(columns=["id"]).column("id").to_numpy()


@dataclass
class Report:
    """What :func:`verify` checked and found."""

    path: str
    fingerprint: str = ""
    epochs: int = 0
    splits: int = 0
    rows: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        head = "OK" if self.ok else f"FAILED ({len(self.problems)} problems)"
        out = [
            f"{self.path}: {head}",
            f"  fingerprint {self.fingerprint}: {self.epochs} epochs x {self.splits} splits, {self.rows:,} rows checked",
        ]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  problem: {p}" for p in self.problems[:50]]
        if len(self.problems) > 50:
            out.append(f"  ... and {len(self.problems) - 50} more")
        return out


def verify(path: str, *, s3: storage.S3Options | None = None, check_ids: bool = True, max_problems: int = 1000) -> Report:
    """Checks the materialized output at ``path`` against its manifest and source table.

    Args:
        path: the materialized output directory (local or ``s3://``).
        s3: S3 endpoint/keys (default: the AWS environment).
        check_ids: also compare each split's ids with the plan (needs an ``id`` column).
        max_problems: stop collecting problems after this many.

    Returns:
        A :class:`Report`; ``report.ok`` is False on any mismatch.

    Raises:
        PrepError: when there is no manifest, a manifest that breaks the format, or the
            source table is gone. A split that is missing or cannot be read is a problem
            in the report, not an error.
    """
    from prep import materialize as mat

    manifest = mat.read_manifest(path, s3)
    report = Report(path=path, fingerprint=manifest["fingerprint"])
    src = manifest["source"]
    p = manifest["plan"]
    opts = storage.lance_storage_options(src["uri"], s3)
    latest = lance_io.open_table(src["uri"], storage_options=opts)
    if latest.version != src["version"]:
        report.problems.append(
            f"source table {src['uri']} changed: materialized from version {src['version']}, now at version "
            f"{latest.version}; the plan's rows no longer match it: re-run materialize-shuffle (with --overwrite)"
        )
        return report
    source = lance_io.open_table(src["uri"], version=src["version"], storage_options=opts)
    expected = plan.plan_fingerprint(src["uri"], src["version"], p)
    if expected != manifest["fingerprint"]:
        report.problems.append(f"manifest fingerprint {manifest['fingerprint']} != recomputed {expected}: the manifest was edited")
    job = mat.job_for_manifest(manifest, path, s3)
    selected = manifest["num_selected_rows"]
    keys = mat.hash_keys_for(job, source) if p["strategy"] == "hash" else None
    has_ids = check_ids and "id" in manifest["columns"]
    if not has_ids:
        report.notes.append("no id column in the output: per-row identity not checked, checksums and counts only")
    source_ids = mat.selected_ids(job, source) if has_ids else None  # 8 bytes a selected row
    source_sums = _id_sums(source_ids) if has_ids else None
    report.splits = p["num_splits"]
    for entry in manifest["epochs"]:
        report.epochs += 1
        epoch = entry["epoch"]
        sums = np.zeros(3, dtype=np.uint64)
        total = 0
        for sp in entry["splits"]:
            where = f"epoch {epoch} split {sp['split']}"
            uri = storage.join(path, sp["path"])
            planned = plan.split_size(
                num_rows=selected, num_splits=p["num_splits"], split=sp["split"], strategy=p["strategy"],
                seed=p["seed"], clump=p["clump"], hash_keys=keys,
            )
            if sp["num_rows"] != planned:
                report.problems.append(f"{where}: manifest says {sp['num_rows']} rows, the plan {planned}")
            try:
                rows, checksum = dataset_checksum(uri, storage.lance_storage_options(uri, s3))
                got_ids = _ids(uri, s3) if has_ids else None
            except (PrepError, OSError, ValueError) as exc:  # a missing or damaged data file is a finding
                what = "is missing" if not storage.exists(uri, s3) else f"cannot be read ({one_line(exc)})"
                report.problems.append(f"{where}: {uri} {what}: rerun materialize-shuffle to rewrite it")
                continue
            total += rows
            report.rows += rows
            if rows != planned:
                report.problems.append(f"{where}: {rows} rows on disk, {planned} planned")
            if checksum != sp["checksum"]:
                report.problems.append(f"{where}: checksum {checksum[:12]}... != manifest {sp['checksum'][:12]}...")
            if has_ids:
                sums += _id_sums(got_ids)  # uint64 arrays wrap: a sum mod 2^64
                positions = plan.split_rows(
                    num_rows=selected, num_splits=p["num_splits"], split=sp["split"], epoch=epoch,
                    strategy=p["strategy"], seed=p["seed"], clump=p["clump"], hash_keys=keys,
                )
                want = source_ids[positions]
                if len(want) != len(got_ids) or not np.array_equal(want, got_ids):
                    bad = int(np.argmax(want[: len(got_ids)] != got_ids[: len(want)])) if len(want) and len(got_ids) else 0
                    report.problems.append(f"{where}: ids differ from the plan (first at row {bad})")
            if len(report.problems) >= max_problems:
                return report
        if total != selected:
            report.problems.append(f"epoch {epoch}: {total} rows, {selected} selected rows expected")
        if has_ids and not np.array_equal(sums, source_sums):
            report.problems.append(f"epoch {epoch}: the set of ids is not the selected rows exactly once")
    return report
