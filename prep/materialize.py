"""``prep materialize-shuffle``: write shuffled epochs as per-split Lance datasets.

Layout and manifest: docs/architecture.md ("Materialized epochs"); how it
works, measurements and trade-offs: docs/materialize.md. In short:

1. The plan (:mod:`prep.plan`) says which selected rows split ``s`` reads in
   epoch ``e``, in order. ``--filter`` selects rows once: their row addresses go
   to a small sidecar (``OUT/_work/selection.lance``) that tasks read by position.
2. One Ray task per (epoch, split) writes ``OUT/epoch-EEEEE/split-SSSSS.lance``
   and then ``split-SSSSS.done.json`` (rows, content checksum). Two ways to get
   a split's rows:

   - ``take`` (sequential strategy, or clumps >= ``GATHER_BELOW_CLUMP``): each
     chunk of the read order is one Lance ``take``; clumps make it nearly a scan.
   - ``gather`` (small clumps, where a ``take`` per row costs ~5x a scan): map
     tasks scan contiguous chunks once per run and cut them into one piece per
     split (Ray object store, spilled to disk when full); each (epoch, split)
     task concatenates its pieces (its rows in table order) and reorders them in
     memory. The map pass is shared by all epochs of the run.
3. ``manifest.json`` is written last, atomically. A rerun skips splits whose
   done record matches the plan's fingerprint, so a killed run is finished,
   not redone, and an extended run only adds epochs.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa

from prep import __version__ as prep_version
from prep import lance_io, plan, storage
from prep.errors import PrepError
from prep.plan import hash as plan_hash

__all__ = [
    "MANIFEST",
    "FORMAT",
    "split_path",
    "read_manifest",
    "materialize_shuffle",
    "Job",
    "job_for_manifest",
    "read_rows",
    "selected_ids",
    "hash_keys_for",
]

log = logging.getLogger(__name__)

FORMAT = "prep.materialized/1"
MANIFEST = "manifest.json"
PLAN_FILE = "plan.json"  # written first: marks the directory as holding this plan
WORK = "_work"
GATHER_BELOW_CLUMP = 16  # clumps smaller than this go through the gather shuffle (see module docstring)
GATHER_CHUNK_BYTES = 64 << 20  # rows per gather map task: about this many bytes
# Split datasets are written once and read sequentially: Lance 2.0 files cost ~4x less CPU to
# write and ~2x less to scan than 2.2 here, but are ~2.5x larger (no compression): see docs/materialize.md.
DEFAULT_LANCE_FORMAT = "2.0"


def split_path(epoch: int, split: int) -> str:
    """Relative path of one (epoch, split) dataset.

    >>> split_path(2, 17)
    'epoch-00002/split-00017.lance'
    """
    return f"epoch-{epoch:05d}/split-{split:05d}.lance"


def _done_path(epoch: int, split: int) -> str:
    return split_path(epoch, split)[: -len(".lance")] + ".done.json"


def read_manifest(path: str, s3: storage.S3Options | None = None) -> dict[str, Any]:
    """The manifest of a materialized output, with a clear error when there is none."""
    uri = storage.join(path, MANIFEST)
    if not storage.exists(uri, s3):
        hint = " (a run was started there but has not finished: rerun it)" if storage.exists(storage.join(path, PLAN_FILE), s3) else ""
        raise PrepError(f"no {MANIFEST} in {path}{hint}; run `prep materialize-shuffle --output {path}` first")
    manifest = storage.read_json(uri, s3)
    if manifest.get("format") != FORMAT:
        raise PrepError(f"{uri} has format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


@dataclass(frozen=True, kw_only=True)
class Job:
    """Everything a task needs, passed by value (URIs and versions, never handles).

    Args:
        source: source table URI.
        version: source table version the plan is computed on.
        columns: output columns, in order.
        plan: the plan dict (as in the manifest).
        num_selected: rows in the selected row set.
        output: output directory URI.
        fingerprint: the plan's fingerprint.
        selection: URI of the filter sidecar, or None without ``--filter``.
        s3: resolved S3 options (shipped to workers).
        read_rows: rows per Lance ``take`` and per written batch.
        lance_format: Lance data storage version of the split datasets.
        run_id: unique per run: workers cache open datasets per run, since
            ``_work`` datasets are rewritten at the same URI by a later run.
    """

    source: str
    version: int
    columns: tuple[str, ...]
    plan: dict[str, Any]
    num_selected: int
    output: str
    fingerprint: str
    selection: str | None = None
    s3: storage.S3Options = field(default_factory=storage.S3Options)
    read_rows: int = 16384
    lance_format: str = DEFAULT_LANCE_FORMAT
    run_id: str = ""

    def lance_options(self, uri: str) -> dict[str, str] | None:
        return storage.lance_storage_options(uri, self.s3)

    def split_kwargs(self) -> dict[str, Any]:
        p = self.plan
        return dict(num_rows=self.num_selected, num_splits=p["num_splits"], strategy=p["strategy"], seed=p["seed"], clump=p["clump"])


@functools.lru_cache(maxsize=8)
def _open(uri: str, version: int | None, options: tuple[tuple[str, str], ...] | None, run_id: str):
    return lance_io.open_table(uri, version=version, storage_options=dict(options) if options else None)


def _dataset(job: Job, uri: str, version: int | None = None):
    """An open dataset, cached per worker: a pinned version is immutable; anything else only within this run."""
    opts = job.lance_options(uri)
    return _open(uri, version, tuple(sorted(opts.items())) if opts else None, "" if version is not None else job.run_id)


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


def read_rows(job: Job, source: Any, positions: np.ndarray, columns: Sequence[str] | None = None) -> pa.Table:
    """Rows at ``positions`` of the selected row set, in the given order."""
    selection = _dataset(job, job.selection) if job.selection else None
    return _take(source, positions, list(columns or job.columns), selection)


def selected_ids(job: Job, source: Any) -> np.ndarray:
    """The ``id`` column of the selected rows, in selection order (for verify)."""
    filt = job.plan["filter"]
    return source.to_table(columns=["id"], filter=filt).column("id").to_numpy()


def hash_keys_for(job: Job, source: Any) -> np.ndarray:
    """One uint64 key per selected row from ``hash_columns`` (8 bytes a row, read in one pass)."""
    cols = list(job.plan["hash_columns"] or [])
    parts = [
        plan_hash.row_keys(pa.Table.from_batches([b]), cols)
        for b in source.to_batches(columns=cols, filter=job.plan["filter"], batch_size=65536)
        if b.num_rows
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def job_for_manifest(manifest: dict[str, Any], path: str, s3: storage.S3Options | None = None) -> Job:
    """A :class:`Job` describing the run that wrote ``manifest`` (no filter sidecar)."""
    src = manifest["source"]
    return Job(
        source=src["uri"], version=src["version"], columns=tuple(manifest["columns"]), plan=manifest["plan"],
        num_selected=manifest["num_selected_rows"], output=path, fingerprint=manifest["fingerprint"],
        s3=(s3 or storage.S3Options()).resolved(),
    )


# ---------------------------------------------------------------- selection


def _write_selection(job: Job, source: Any, uri: str) -> int:
    """Writes the row addresses of rows matching the filter to ``uri``; returns their count."""
    filt = job.plan["filter"]
    try:
        scanner = source.scanner(columns=[], filter=filt, with_row_address=True, batch_size=1 << 16)
        reader = scanner.to_reader()
    except (ValueError, OSError) as exc:
        raise PrepError(f"--filter {filt!r} is not a valid filter for {job.source}: {str(exc).splitlines()[0][:300]}") from None
    meta = {lance_io.METADATA_KEY: json.dumps({"fingerprint": job.fingerprint})}
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

    lance_io.remove_table(uri, job.s3)
    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), uri, schema=schema, mode="create",
                        storage_options=job.lance_options(uri))
    return count


# ---------------------------------------------------------------- tasks


def _gather_mode(p: dict[str, Any]) -> bool:
    return p["strategy"] != "sequential" and p["clump"] < GATHER_BELOW_CLUMP


def _gather_chunk(job: Job, start: int, stop: int, hash_keys: np.ndarray | None) -> tuple[pa.Table, ...] | pa.Table:
    """Gather, map side: read selected rows ``[start, stop)`` in order, cut them into one piece per split.

    The pieces go to the Ray object store (shared memory, spilled to disk when
    full) and serve every epoch of this run.
    """
    source = _dataset(job, job.source, job.version)
    if job.selection is None:
        table = source.scanner(columns=list(job.columns), offset=start, limit=stop - start, batch_size=stop - start).to_table()
    else:
        table = read_rows(job, source, np.arange(start, stop))
    splits = plan.assign_rows(positions=np.arange(start, stop), hash_keys=hash_keys, **job.split_kwargs())
    order = np.argsort(splits, kind="stable")
    bounds = np.searchsorted(splits[order], np.arange(job.plan["num_splits"] + 1))
    grouped = table.combine_chunks().take(pa.array(order))
    # Ray stores each slice compactly (only the slice's bytes), measured: no per-split copy needed here
    pieces = tuple(grouped.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:]))
    return pieces if len(pieces) > 1 else pieces[0]


def _split_batches(job: Job, epoch: int, split: int, hash_keys: np.ndarray | None, pieces: tuple[pa.Table, ...]) -> Iterator[pa.RecordBatch]:
    """The split's rows in this epoch's read order, a few read batches at a time."""
    kw = dict(split=split, epoch=epoch, hash_keys=hash_keys, **job.split_kwargs())
    if not pieces:  # take: each chunk of the read order is one Lance take (Lance sorts and reorders)
        source = _dataset(job, job.source, job.version)
        for chunk in plan.iter_split_rows(chunk_rows=job.read_rows, **kw):
            yield from read_rows(job, source, chunk).to_batches(max_chunksize=job.read_rows)
        return
    # gather: the pieces hold the split's rows in ascending position order (mapped from the object store)
    rows = pa.concat_tables(pieces)
    order = plan.split_rows(**kw)
    local = np.empty(len(order), dtype=np.int64)
    local[np.argsort(order, kind="stable")] = np.arange(len(order))
    for i in range(0, len(local), job.read_rows):
        yield from rows.take(pa.array(local[i : i + job.read_rows])).to_batches()


def _write_split(job: Job, epoch: int, split: int, hash_keys: np.ndarray | None, *pieces: pa.Table) -> dict[str, Any]:
    """One (epoch, split): write its dataset, then its done record. Idempotent."""
    import lance

    from prep.verify import Checksum

    rel = split_path(epoch, split)
    uri = storage.join(job.output, rel)
    lance_io.remove_table(uri, job.s3)  # a killed attempt may have left data files
    schema = _dataset(job, job.source, job.version).schema
    schema = pa.schema([schema.field(c) for c in job.columns])
    checksum = Checksum()

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in _split_batches(job, epoch, split, hash_keys, pieces):
            batch = batch.select(list(job.columns))
            checksum.update(batch)
            yield batch

    lance.write_dataset(
        pa.RecordBatchReader.from_batches(schema, batches()), uri, schema=schema, mode="create",
        max_rows_per_file=1 << 30, storage_options=job.lance_options(uri), data_storage_version=job.lance_format,
    )
    record = {"fingerprint": job.fingerprint, "epoch": epoch, "split": split, "path": rel,
              "num_rows": checksum.num_rows, "checksum": checksum.hexdigest()}
    storage.write_json_atomic(storage.join(job.output, _done_path(epoch, split)), record, job.s3)
    pa.default_memory_pool().release_unused()
    return record


def _run_task(fn, where: str, *args):
    try:
        return fn(*args)
    except PrepError as exc:
        raise PrepError(f"{where}: {exc}") from None
    except Exception as exc:  # wrapped with where it happened, re-raised in the driver
        raise PrepError(f"{where}: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}") from exc


# ---------------------------------------------------------------- driver


def _check_output(output: str, fingerprint: str, p: dict, source_uri: str, version: int, overwrite: bool, s3: storage.S3Options) -> None:
    fs, path = storage.filesystem(output, s3)
    if not fs.exists(path):
        return
    entries = fs.ls(path, detail=False)
    marker = None
    for name in (MANIFEST, PLAN_FILE):
        if storage.exists(storage.join(output, name), s3):
            marker = storage.read_json(storage.join(output, name), s3)
            break
    if marker is not None and marker.get("fingerprint") == fingerprint and not overwrite:
        return
    if not entries and marker is None:
        return
    if not overwrite:
        if marker is None:
            raise PrepError(f"output {output} is not empty and holds no prep plan; choose an empty --output or pass --overwrite")
        old_src = marker.get("source", {})
        why = []
        if old_src.get("uri") != source_uri:
            why.append(f"source {old_src.get('uri')} -> {source_uri}")
        if old_src.get("version") != version:
            why.append(f"source version {old_src.get('version')} -> {version} (the table changed since)")
        why += [f"{k} {marker.get('plan', {}).get(k)!r} -> {v!r}" for k, v in p.items() if marker.get("plan", {}).get(k) != v]
        raise PrepError(
            f"output {output} holds a different plan (fingerprint {marker.get('fingerprint')}, this run {fingerprint}: "
            f"{'; '.join(why) or 'different'}); pass --overwrite to replace it or choose another --output"
        )
    log.warning("--overwrite: removing %s", output)
    fs.rm(path, recursive=True)


def _done_records(job: Job, epochs: range) -> dict[tuple[int, int], dict]:
    fs, root = storage.filesystem(job.output, job.s3)
    done = {}
    for e in epochs:
        folder = f"{root.rstrip('/')}/epoch-{e:05d}"
        if not fs.exists(folder):
            continue
        for name in fs.ls(folder, detail=False):
            if not name.endswith(".done.json"):
                continue
            rec = storage.read_json(("s3://" + name) if job.output.startswith("s3://") else name, job.s3)
            if rec.get("fingerprint") == job.fingerprint:
                done[(rec["epoch"], rec["split"])] = rec
    return done


def _gather_pieces(job: Job, source: Any, remote, hash_ref) -> list[list]:
    """Submits the gather map tasks; returns piece refs indexed [chunk][split]."""
    sample = source.take(np.arange(min(1000, source.count_rows())), columns=list(job.columns))
    row_bytes = max(1, sample.nbytes // max(1, sample.num_rows))
    step = int(min(1 << 20, max(job.read_rows, GATHER_CHUNK_BYTES // row_bytes)))
    bounds = [(a, min(a + step, job.num_selected)) for a in range(0, job.num_selected, step)]
    splits = job.plan["num_splits"]
    refs = [
        remote.options(num_returns=splits).remote(_gather_chunk, f"gather rows [{a}, {b})", job, a, b, hash_ref)
        for a, b in bounds
    ]
    return [r if isinstance(r, list) else [r] for r in refs]


def materialize_shuffle(
    *,
    table: str,
    output: str,
    epochs: int,
    splits: int = 48,
    strategy: str = "random",
    hash_columns: Sequence[str] = ("id",),
    clump: int = 1,
    seed: int = 0,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
    start_epoch: int = 0,
    overwrite: bool = False,
    s3: storage.S3Options | None = None,
    read_rows: int = 16384,
    lance_format: str = DEFAULT_LANCE_FORMAT,
    ray_address: str | None = None,
    num_cpus: int | None = None,
) -> dict[str, Any]:
    """Materializes epochs ``[start_epoch, start_epoch + epochs)`` of a shuffle plan.

    Args:
        table: prepared Lance table (local path or ``s3://``).
        output: output directory (local path or ``s3://``).
        epochs: number of epochs to write in this run (>= 1).
        splits: number of splits (default 48: world sizes 1,2,3,4,6,8,12,16,24,48).
        strategy: ``random`` (default), ``hash``, ``sequential`` or ``round-robin``.
        hash_columns: columns whose values the ``hash`` strategy hashes (default ``id``).
        clump: rows per shuffled block (default 1).
        seed: plan seed (default 0).
        filter: Lance SQL filter; only matching rows are materialized (default: all).
        columns: columns to write (default: all).
        start_epoch: first epoch of this run (default 0).
        overwrite: replace an output that holds a different plan (default False).
        s3: S3 endpoint/keys (default: the AWS environment).
        read_rows: rows per read and per written batch (default 16384).
        lance_format: data storage version of the split datasets (default ``"2.0"``:
            cheapest to write and scan; ``"2.2"`` compresses ~2.5x, for remote storage).
        ray_address: Ray cluster to join (default ``RAY_ADDRESS``, else a local Ray).
        num_cpus: CPUs for a local Ray (default: all).

    Returns:
        The manifest that was written.

    Raises:
        PrepError: missing/empty table, bad filter or plan arguments, or an
            output directory that holds a different plan.
    """
    import ray

    from prep.ray_runtime import init_ray

    if epochs < 1:
        raise PrepError(f"epochs={epochs} must be >= 1")
    if start_epoch < 0:
        raise PrepError(f"start_epoch={start_epoch} must be >= 0")
    if read_rows < 1:
        raise PrepError(f"read_rows={read_rows} must be >= 1")
    s3 = (s3 or storage.S3Options()).resolved()
    source_uri = table if storage.is_remote(table) else os.path.abspath(table)
    output = output if storage.is_remote(output) else os.path.abspath(output)
    plan.validate(num_rows=0, num_splits=splits, strategy=strategy, seed=seed, clump=clump)
    if not storage.is_remote(source_uri) and not os.path.exists(source_uri):
        raise PrepError(f"--table {table}: no such path; pass a prepared Lance table (see `prep pretokenize`)")
    source = lance_io.open_table(source_uri, storage_options=storage.lance_storage_options(source_uri, s3))
    version, total = source.version, source.count_rows()
    if total == 0:
        raise PrepError(f"table {source_uri} (version {version}) is empty: there is nothing to shuffle")
    names = source.schema.names
    out_columns = list(columns) if columns else names
    unknown = [c for c in out_columns if c not in names]
    if unknown:
        raise PrepError(f"--columns {unknown} are not in {source_uri}; it has {names}")
    if strategy == "hash":
        missing = [c for c in hash_columns if c not in names]
        if not hash_columns or missing:
            raise PrepError(f"--hash-columns {list(hash_columns)} must name columns of {source_uri}; it has {names}")
    p = {"num_splits": splits, "strategy": strategy, "hash_columns": list(hash_columns), "clump": clump,
         "seed": seed, "filter": filter or None, "columns": list(columns) if columns else None}
    fingerprint = plan.plan_fingerprint(source_uri, version, p)
    _check_output(output, fingerprint, p, source_uri, version, overwrite, s3)
    job = Job(source=source_uri, version=version, columns=tuple(out_columns), plan=p, num_selected=total,
              output=output, fingerprint=fingerprint, s3=s3, read_rows=read_rows, lance_format=lance_format,
              run_id=uuid.uuid4().hex)
    storage.write_json_atomic(
        storage.join(output, PLAN_FILE),
        {"fingerprint": fingerprint, "plan": p, "source": {"uri": source_uri, "version": version}}, s3,
    )
    if filter:
        sel = storage.join(output, WORK, "selection.lance")
        meta = lance_io.prep_metadata(_dataset(job, sel)) if lance_io.table_exists(sel, job.lance_options(sel)) else {}
        if meta.get("fingerprint") == fingerprint:
            selected = _dataset(job, sel).count_rows()
        else:
            selected = _write_selection(job, source, sel)
        if selected == 0:
            raise PrepError(f"--filter {filter!r} matched none of the {total:,} rows of {source_uri}; check the column values")
        job = replace(job, selection=sel, num_selected=selected)
    if job.num_selected < splits:
        log.warning("only %d selected rows for %d splits: some splits will be empty", job.num_selected, splits)
    run_epochs = range(start_epoch, start_epoch + epochs)
    done = _done_records(job, run_epochs)
    todo = [(e, s) for e in run_epochs for s in range(splits) if (e, s) not in done]
    log.info("plan %s: %d selected rows, %d of %d splits to write", fingerprint, job.num_selected, len(todo), len(run_epochs) * splits)
    if todo:
        init_ray(ray_address, num_cpus=num_cpus)
        remote = ray.remote(num_cpus=1, max_retries=2)(_run_task)
        keys = hash_keys_for(job, source) if strategy == "hash" else None
        hash_ref = ray.put(keys) if keys is not None else None
        t0 = time.time()
        pieces = _gather_pieces(job, source, remote, hash_ref) if _gather_mode(p) else []
        refs = [
            remote.remote(_write_split, f"epoch {e} split {s}", job, e, s, hash_ref, *[chunk[s] for chunk in pieces])
            for e, s in todo
        ]
        del pieces  # the running tasks hold what they still need
        try:
            for ref in refs:
                rec = ray.get(ref)
                done[(rec["epoch"], rec["split"])] = rec
        except ray.exceptions.RayTaskError as exc:
            for ref in refs:
                ray.cancel(ref)
            cause = exc.cause if isinstance(getattr(exc, "cause", None), PrepError) else None
            raise PrepError(str(cause) if cause else str(exc).splitlines()[-1]) from None
        log.info("wrote %d splits in %.1fs", len(todo), time.time() - t0)
    manifest = _manifest(job, source, run_epochs, done, s3)
    storage.write_json_atomic(storage.join(output, MANIFEST), manifest, s3)
    fs, work = storage.filesystem(storage.join(output, WORK), s3)
    if fs.exists(work):
        fs.rm(work, recursive=True)
    return manifest


def _manifest(job: Job, source: Any, run_epochs: range, done: dict, s3: storage.S3Options) -> dict[str, Any]:
    old = {}
    uri = storage.join(job.output, MANIFEST)
    if storage.exists(uri, s3):
        prev = storage.read_json(uri, s3)
        if prev.get("fingerprint") == job.fingerprint:
            old = {e["epoch"]: e for e in prev["epochs"]}
    for e in run_epochs:
        old[e] = {
            "epoch": e,
            "splits": [
                {k: done[(e, s)][k] for k in ("split", "path", "num_rows", "checksum")}
                for s in range(job.plan["num_splits"])
            ],
        }
    return {
        "format": FORMAT,
        "prep_version": prep_version,
        "fingerprint": job.fingerprint,
        "source": {"uri": job.source, "version": job.version, "num_rows": source.count_rows(),
                   "metadata": lance_io.prep_metadata(source)},
        "plan": job.plan,
        "num_selected_rows": job.num_selected,
        "columns": list(job.columns),
        "epochs": [old[e] for e in sorted(old)],
    }
