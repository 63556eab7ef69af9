"""``materialize_shuffle``: resolve, select, run the tasks (Ray or local), finalize.

``manifest.json`` is written last, atomically. A rerun skips splits whose
done record matches the plan's fingerprint, so a killed run is finished,
not redone, and an extended run only adds epochs.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import replace
from typing import Any, Literal, Sequence, get_args

from prep import __version__ as prep_version
from prep.io import lance_tables
from prep.io import storage
from prep.errors import PrepError
from prep.io.jsonfile import read_json_file
from prep.contracts.manifest import MANIFEST, Epoch, Manifest, Source, SplitFile, read_manifest, write_manifest
from prep.materialize.job import DEFAULT_LANCE_FORMAT, Job, _dataset
from prep.contracts.materialized import JOB_FILE, JOB_NAME, WORK, owned_entries
from prep.materialize.local import run_local
from prep.materialize.rows import _write_selection, hash_keys_for
from prep.materialize.write import SplitOutput
from prep.plan.spec import DEFAULT_SPLITS, PlanSpec
from prep.runtime.progress import Bar
from prep.runtime.ray_cluster import use_ray

__all__ = ["materialize_shuffle", "Executor", "EXECUTORS", "existing_output", "check_plan", "done_records",
           "check_run_args"]

Executor = Literal["auto", "ray", "local"]
EXECUTORS: tuple[str, ...] = get_args(Executor)

log = logging.getLogger("prep.materialize")  # the package's name, as printed in `prep -v` logs


def existing_output(output: str, s3: storage.S3Options) -> dict | None:
    """What a prep job left at ``output`` (its job marker or manifest), None when it is new or empty.

    Runs before anything is read or written: a non-empty directory that no prep
    materialize job wrote is an error, with or without --overwrite.
    """
    fs, path = storage.filesystem(output, s3)
    if not fs.exists(path):
        return None
    if not fs.isdir(path):
        raise PrepError(f"--output {output} is a file, not a directory; choose a new or empty directory")
    if not fs.ls(path, detail=False):
        return None
    fix = f"choose another --output (prep never deletes what it did not write), or remove {output} yourself"
    marker = storage.join(output, JOB_FILE)
    if storage.exists(marker, s3):
        doc = read_json_file(marker, s3, fix)
        if isinstance(doc, dict) and doc.get("job") == JOB_NAME:
            return doc
        raise PrepError(f"{marker} was not written by {JOB_NAME}: {fix}")
    manifest = storage.join(output, MANIFEST)
    if storage.exists(manifest, s3):
        return read_manifest(output, s3).to_json()
    raise PrepError(
        f"--output {output} is not empty and holds no prep materialized output (no {MANIFEST} or {JOB_FILE}): {fix}"
    )


def check_plan(output: str, old: dict | None, fingerprint: str, spec: PlanSpec, source_uri: str, version: int,
               overwrite: bool, s3: storage.S3Options) -> None:
    """Resume the same plan; refuse a different one unless --overwrite, which removes only prep's files."""
    if old is None or old.get("fingerprint") == fingerprint:
        return
    if not overwrite:
        old_src = old.get("source", {})
        why = []
        if old_src.get("uri") != source_uri:
            why.append(f"source {old_src.get('uri')} -> {source_uri}")
        if old_src.get("version") != version:
            why.append(f"source version {old_src.get('version')} -> {version} (the table changed since)")
        old_plan = old.get("plan") if isinstance(old.get("plan"), dict) else {}
        why += [f"{k} {old_plan.get(k)!r} -> {v!r}" for k, v in spec.to_json().items() if old_plan.get(k) != v]
        raise PrepError(
            f"output {output} holds a different plan (fingerprint {old.get('fingerprint')}, this run {fingerprint}: "
            f"{'; '.join(why) or 'different'}); pass --overwrite to replace it or choose another --output"
        )
    log.warning("--overwrite: removing the materialized output in %s (only the files prep wrote)", output)
    _remove_owned(output, s3)


def _remove_owned(output: str, s3: storage.S3Options) -> None:
    """Removes the files of the materialize layout under ``output``, and nothing else."""
    fs, root = storage.filesystem(output, s3)
    root = root.rstrip("/")
    top = [n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(root, detail=False)]
    inside = {d: [n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(f"{root}/{d}", detail=False)]
              for d in top if d.startswith("epoch-") and fs.isdir(f"{root}/{d}")}
    owned = owned_entries(top, inside)
    for rel in owned:  # the marker goes last: a crash on the way leaves it, so a rerun may still clean up
        if rel not in (JOB_FILE, MANIFEST):
            fs.rm(f"{root}/{rel}", recursive=True)
    for d in inside:
        if not storage.is_remote(output) and fs.exists(f"{root}/{d}") and not fs.ls(f"{root}/{d}", detail=False):
            fs.rmdir(f"{root}/{d}")
    for name in (MANIFEST, JOB_FILE):
        if name in owned:
            fs.rm(f"{root}/{name}")


def done_records(job: SplitOutput, epochs: range) -> dict[tuple[int, int], dict]:
    """The done records of ``epochs`` that match the run's fingerprint (single-table runs and mixtures alike)."""
    fs, root = storage.filesystem(job.output, job.s3)
    done = {}
    for e in epochs:
        folder = f"{root.rstrip('/')}/epoch-{e:05d}"
        if not fs.exists(folder):
            continue
        for name in fs.ls(folder, detail=False):
            if not name.endswith(".done.json"):
                continue
            try:
                rec = storage.read_json(storage.with_scheme(job.output, name), job.s3)
            except ValueError:  # a damaged record: the split is written again
                continue
            if isinstance(rec, dict) and rec.get("fingerprint") == job.fingerprint:
                done[(rec["epoch"], rec["split"])] = rec
    return done


def materialize_shuffle(
    *,
    table: str,
    output: str,
    epochs: int,
    splits: int = DEFAULT_SPLITS,
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
    executor: Executor = "auto",
    ray_resources: dict[str, float] | None = None,
) -> Manifest:
    """Materializes epochs ``[start_epoch, start_epoch + epochs)`` of a shuffle plan.

    Four steps: resolve (check the arguments, the source and the output; write
    the job marker), select (the ``--filter`` sidecar), run the missing
    (epoch, split) tasks, finalize (manifest last, then drop ``_work``).

    Args:
        table: prepared Lance table (local path or ``s3://``).
        output: output directory (local path or ``s3://``).
        epochs: number of epochs to write in this run (>= 1).
        splits, strategy, hash_columns, clump, seed, filter, columns: the plan
            (:class:`prep.plan.spec.PlanSpec`, which checks them and documents them).
        start_epoch: first epoch of this run (default 0).
        overwrite: replace an output that holds a different plan (default False).
        s3: S3 endpoint/keys (default: the AWS environment).
        read_rows: rows per read and per written batch (default 16384).
        lance_format: data storage version of the split datasets (default ``"2.0"``:
            cheapest to write and scan; ``"2.2"`` compresses ~2.5x, for remote storage).
        ray_address: Ray cluster to join (default ``RAY_ADDRESS``).
        num_cpus: CPUs of a local Ray, or threads of the local executor (default: all).
        ray_resources: custom Ray resources each task asks for (pins tasks to the nodes offering them).
        executor: ``"auto"`` (default: Ray when there is a cluster, see
            :func:`prep.runtime.ray_cluster.use_ray`, else this process), ``"ray"`` (a
            local Ray is started when there is no cluster) or ``"local"``. Both
            write identical outputs.

    Returns:
        The manifest that was written.

    Raises:
        PrepError: missing/empty table, bad filter or plan arguments, or an
            output directory that holds a different plan.
    """
    check_run_args(epochs=epochs, start_epoch=start_epoch, read_rows=read_rows, executor=executor)
    spec = PlanSpec(num_splits=splits, strategy=strategy, hash_columns=tuple(hash_columns), clump=clump, seed=seed,
                    filter=filter or None, columns=tuple(columns) if columns else None)
    job, source = _resolve(table, output, spec, overwrite=overwrite, s3=s3, read_rows=read_rows, lance_format=lance_format)
    job = _select(job, source)
    run_epochs = range(start_epoch, start_epoch + epochs)
    on_ray = executor == "ray" or (executor == "auto" and use_ray(ray_address))
    done = _run_tasks(job, source, run_epochs, on_ray=on_ray, ray_address=ray_address, num_cpus=num_cpus,
                      resources=ray_resources)
    return _finalize(job, source, run_epochs, done)


def check_run_args(*, epochs: int, start_epoch: int, read_rows: int, executor: str) -> None:
    """The arguments of the run that are not the plan's (the plan checks its own)."""
    if executor not in EXECUTORS:
        raise PrepError(f"executor={executor!r} is not one of {list(EXECUTORS)}")
    if epochs < 1:
        raise PrepError(f"epochs={epochs} must be >= 1")
    if start_epoch < 0:
        raise PrepError(f"start_epoch={start_epoch} must be >= 0")
    if read_rows < 1:
        raise PrepError(f"read_rows={read_rows} must be >= 1")


def _resolve(table: str, output: str, spec: PlanSpec, *, overwrite: bool, s3: storage.S3Options | None, read_rows: int,
             lance_format: str) -> tuple[Job, Any]:
    """Checks the source and the output against ``spec``; writes the job marker. Returns the job and the open source."""
    s3 = (s3 or storage.S3Options()).resolved()
    source_uri = table if storage.is_remote(table) else os.path.abspath(table)
    output = output if storage.is_remote(output) else os.path.abspath(output)
    old = existing_output(output, s3)
    if not storage.is_remote(source_uri) and not os.path.exists(source_uri):
        raise PrepError(f"--table {table}: no such path; pass a prepared Lance table (see `prep pretokenize`)")
    source = lance_tables.open_table(source_uri, storage_options=storage.lance_storage_options(source_uri, s3))
    version, total = source.version, source.count_rows()
    if total == 0:
        raise PrepError(f"table {source_uri} (version {version}) is empty: there is nothing to shuffle")
    names = source.schema.names
    out_columns = list(spec.columns or names)
    unknown = [c for c in out_columns if c not in names]
    if unknown:
        raise PrepError(f"--columns {unknown} are not in {source_uri}; it has {names}")
    if spec.strategy == "hash" and any(c not in names for c in spec.hash_columns):
        raise PrepError(f"--hash-columns {list(spec.hash_columns)} must name columns of {source_uri}; it has {names}")
    fingerprint = spec.fingerprint(source_uri, version)
    check_plan(output, old, fingerprint, spec, source_uri, version, overwrite, s3)
    job = Job(source=source_uri, version=version, columns=tuple(out_columns), plan=spec, num_selected=total,
              output=output, fingerprint=fingerprint, s3=s3, read_rows=read_rows, lance_format=lance_format,
              run_id=uuid.uuid4().hex)
    storage.write_json_atomic(
        storage.join(output, JOB_FILE),
        {"job": JOB_NAME, "fingerprint": fingerprint, "plan": spec.to_json(), "source": {"uri": source_uri, "version": version}},
        s3,
    )
    return job, source


def _select(job: Job, source: Any) -> Job:
    """With a filter: the selection sidecar (kept from an interrupted run of the same plan) and its row count."""
    filt = job.plan.filter
    if filt:
        sel = storage.join(job.output, WORK, "selection.lance")
        meta = lance_tables.prep_metadata(_dataset(job, sel)) if lance_tables.table_exists(sel, job.lance_options(sel)) else {}
        if meta.get("fingerprint") == job.fingerprint:
            selected = _dataset(job, sel).count_rows()
        else:
            selected = _write_selection(job, source, sel)
        if selected == 0:
            raise PrepError(f"--filter {filt!r} matched none of the {job.num_selected:,} rows of {job.source}; check the column values")
        job = replace(job, selection=sel, num_selected=selected)
    if job.num_selected < job.plan.num_splits:
        log.warning("only %d selected rows for %d splits: some splits will be empty", job.num_selected, job.plan.num_splits)
    return job


def _run_tasks(job: Job, source: Any, run_epochs: range, *, on_ray: bool, ray_address: str | None,
               num_cpus: int | None, resources: dict[str, float] | None = None) -> dict[tuple[int, int], dict]:
    """Writes the (epoch, split) pairs of ``run_epochs`` not done yet, on Ray or in this process; returns all done records."""
    done = done_records(job, run_epochs)
    todo = [(e, s) for e in run_epochs for s in range(job.plan.num_splits) if (e, s) not in done]
    log.info("plan %s: %d selected rows, %d of %d splits to write (%s)", job.fingerprint, job.num_selected, len(todo),
             len(run_epochs) * job.plan.num_splits, "Ray" if on_ray else "local")
    if not todo:
        return done
    t0 = time.time()
    keys = hash_keys_for(job, source) if job.plan.strategy == "hash" else None
    with Bar(len(todo), f"materialize {len(run_epochs)} epochs x {job.plan.num_splits} splits", unit="split") as bar:
        if on_ray:
            from prep.materialize.on_ray import run_on_ray  # imports Ray: only when it is used

            records = run_on_ray(job, source, todo, keys, address=ray_address, num_cpus=num_cpus, on_done=bar.update,
                                 resources=resources)
        else:
            records = run_local(job, source, todo, keys, num_cpus=num_cpus, on_done=bar.update)
    done.update({(rec["epoch"], rec["split"]): rec for rec in records})
    log.info("wrote %d splits in %.1fs", len(todo), time.time() - t0)
    return done


def _finalize(job: Job, source: Any, run_epochs: range, done: dict[tuple[int, int], dict]) -> Manifest:
    """Writes the manifest (last, atomically), then removes ``_work``."""
    manifest = _manifest(job, source, run_epochs, done)
    write_manifest(job.output, manifest, job.s3)
    fs, work = storage.filesystem(storage.join(job.output, WORK), job.s3)
    if fs.exists(work):
        fs.rm(work, recursive=True)
    return manifest


def _manifest(job: Job, source: Any, run_epochs: range, done: dict[tuple[int, int], dict]) -> Manifest:
    """The manifest of this run's epochs plus those an earlier run of the same plan wrote."""
    epochs: dict[int, Epoch] = {}
    if storage.exists(storage.join(job.output, MANIFEST), job.s3):
        prev = read_manifest(job.output, job.s3)
        if prev.fingerprint == job.fingerprint:
            epochs = {e.epoch: e for e in prev.epochs}
    for e in run_epochs:
        files = (done[(e, s)] for s in range(job.plan.num_splits))
        epochs[e] = Epoch(epoch=e, splits=tuple(
            SplitFile(split=r["split"], path=r["path"], num_rows=r["num_rows"], checksum=r["checksum"]) for r in files))
    return Manifest(
        prep_version=prep_version, fingerprint=job.fingerprint,
        source=Source(uri=job.source, version=job.version, num_rows=source.count_rows(), metadata=lance_tables.prep_metadata(source)),
        plan=job.plan, num_selected_rows=job.num_selected, columns=job.columns,
        epochs=tuple(epochs[e] for e in sorted(epochs)),
    )
