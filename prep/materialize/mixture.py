"""``materialize_mixture``: several tables, by weight, into shuffled epochs of exact global batches.

The same steps as a single-table run (:mod:`prep.materialize.run`): resolve (open,
pin and check the tables, :mod:`prep.materialize.mixture_sources`; check the output;
write the job marker), plan each epoch in the driver (:func:`prep.plan.mixture.epoch_sequence`:
each position's source and row), run one task per missing (epoch, split) on the local
executor or on Ray, and write the manifest last. A rerun skips splits whose done
record matches the fingerprint, so a killed run finishes where it stopped and
writes the same bytes.

Global batch ``t`` of an epoch (``G`` positions) is laid out as ``b = G/S`` rows in
each split (:func:`prep.plan.mixture.split_positions`): the reader's step ``t`` is
that global batch at every world size dividing ``S``. Every row carries its source
index in a ``uint16`` ``source`` column, and every done record counts the rows and
tokens each source put in its split (the manifest sums them per epoch).

Where the rows come from: on the local executor, when all selected rows of all
sources fit in ``HOLD_BYTES``, one scan per source holds them in memory and each
split takes its rows there (like a single-table full random run); otherwise, and on
Ray, each split takes its rows from each table with Lance takes.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from prep import __version__ as prep_version
from prep.io import storage
from prep.errors import PrepError
from prep.contracts.manifest import MANIFEST, Epoch, Manifest, MixtureTable, Source, SplitFile, read_manifest, write_manifest
from prep.materialize.held import Held
from prep.materialize.job import DEFAULT_LANCE_FORMAT
from prep.contracts import ownership
from prep.contracts.materialized import JOB_NAME
from prep.materialize.local import HOLD_BYTES, run_all
from prep.materialize.mixture_sources import (SOURCE_COLUMN, OpenSource, check_repeats, epoch_rows_for, open_sources,
                                              output_schema, plan_sources, row_tokens)
from prep.materialize.run import Executor, check_plan, check_run_args, done_records, existing_output
from prep.materialize.write import write_split_dataset
from prep.plan import mixture as mixplan
from prep.plan.spec import DEFAULT_SPLITS, PlanSpec
from prep.runtime.progress import Bar
from prep.runtime.ray_cluster import use_ray

__all__ = ["materialize_mixture", "MixtureJob", "epoch_plan"]

log = logging.getLogger("prep.materialize")


@dataclass(frozen=True, kw_only=True)
class MixtureJob:
    """What every mixture task shares, by value (the sources pickle as URIs, versions and row addresses)."""

    output: str
    fingerprint: str
    plan: PlanSpec
    sources: tuple[OpenSource, ...]
    schema: pa.Schema
    s3: storage.S3Options = field(default_factory=storage.S3Options)
    read_rows: int = 16384
    lance_format: str = DEFAULT_LANCE_FORMAT

    def lance_options(self, uri: str) -> dict[str, str] | None:
        return storage.lance_storage_options(uri, self.s3)


def epoch_plan(plan: PlanSpec, sources: Sequence[OpenSource], epoch: int) -> mixplan.EpochSequence:
    """Epoch ``epoch`` of a pinned mixture plan: each position's source and row (pure, see :mod:`prep.plan.mixture`)."""
    mix = plan.mixture
    return mixplan.epoch_sequence(plan_sources(mix, sources), global_batch=mix.global_batch, epoch_rows=mix.epoch_rows,
                                  epoch=epoch, seed=plan.seed, clump=plan.clump, unit=mix.weight_by)


@ownership.leased(JOB_NAME)  # one writer per output: held from before the first read to the end
def materialize_mixture(
    *,
    mixture: str | Path | PlanSpec,
    output: str,
    epochs: int,
    splits: int = DEFAULT_SPLITS,
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
    """Materializes epochs ``[start_epoch, start_epoch + epochs)`` of a mixture.

    Args:
        mixture: a mixture file (:mod:`prep.materialize.mixture_file`) or a plan with a mixture.
        splits: splits per epoch when ``mixture`` is a file (its ``global_batch`` must be a multiple).
        output, epochs, start_epoch, overwrite, s3, read_rows, lance_format, ray_address, num_cpus,
            executor, ray_resources: as for :func:`prep.materialize.materialize_shuffle`.

    Returns:
        The manifest that was written.

    Raises:
        PrepError: a bad mixture file, tables that cannot be mixed, a source asked to repeat more
            than its ``max_repeats``, or an output that holds another plan.
    """
    check_run_args(epochs=epochs, start_epoch=start_epoch, read_rows=read_rows, executor=executor)
    plan = mixture if isinstance(mixture, PlanSpec) else _load(mixture, splits)
    if plan.mixture is None:
        raise PrepError("materialize_mixture needs a plan with a mixture; use materialize_shuffle for one table")
    job = _resolve(plan, output, overwrite=overwrite, s3=s3, read_rows=read_rows, lance_format=lance_format)
    run_epochs = range(start_epoch, start_epoch + epochs)
    on_ray = executor == "ray" or (executor == "auto" and use_ray(ray_address))
    done = _run_tasks(job, run_epochs, on_ray=on_ray, ray_address=ray_address, num_cpus=num_cpus, resources=ray_resources)
    manifest = _manifest(job, run_epochs, done)
    write_manifest(job.output, manifest, job.s3)
    return manifest


def _load(path: str | Path, splits: int) -> PlanSpec:
    """The plan of a mixture file (the loader imports pydantic, ~0.3 s of start-up: only when a file is read)."""
    from prep.materialize.mixture_file import load_mixture

    return load_mixture(path, splits)


def _resolve(plan: PlanSpec, output: str, *, overwrite: bool, s3: storage.S3Options | None, read_rows: int,
             lance_format: str) -> MixtureJob:
    """Opens and checks the tables, pins the plan (versions, epoch size), checks the output, writes the job marker."""
    s3 = (s3 or storage.S3Options()).resolved()
    output = output if storage.is_remote(output) else os.path.abspath(output)
    old = existing_output(output, s3)
    sources = tuple(open_sources(plan.mixture, s3))
    schema = output_schema(sources)
    mix = replace(plan.mixture, sources=tuple(s.spec for s in sources), epoch_rows=epoch_rows_for(plan.mixture, sources))
    plan = replace(plan, mixture=mix)
    first = sources[0].spec
    fingerprint = plan.fingerprint(first.table, first.version)
    check_plan(output, old, fingerprint, plan, first.table, first.version, overwrite, s3)
    ownership.write_marker(output, JOB_NAME, s3, fingerprint=fingerprint, plan=plan.to_json(),
                           source={"uri": first.table, "version": first.version})
    return MixtureJob(output=output, fingerprint=fingerprint, plan=plan, sources=sources, schema=schema, s3=s3,
                      read_rows=read_rows, lance_format=lance_format)


def _run_tasks(job: MixtureJob, run_epochs: range, *, on_ray: bool, ray_address: str | None,
               num_cpus: int | None, resources: dict[str, float] | None = None) -> dict[tuple[int, int], dict]:
    """Plans each epoch of the run, then writes the (epoch, split) pairs not done yet; returns all done records."""
    done = done_records(job, run_epochs)
    p, mix = job.plan, job.plan.mixture
    todo = [(e, s) for e in run_epochs for s in range(p.num_splits) if (e, s) not in done]
    log.info("mixture %s: %d sources, %d rows an epoch, %d of %d splits to write (%s)", job.fingerprint, len(job.sources),
             mix.epoch_rows, len(todo), len(run_epochs) * p.num_splits, "Ray" if on_ray else "local")
    calls = []
    for e in run_epochs:  # every epoch is checked, even one already written: a rerun refuses what the first run would
        seq = epoch_plan(p, job.sources, e)
        check_repeats(mix, job.sources, e, np.bincount(seq.source, minlength=len(job.sources)))
        for s in range(p.num_splits):
            if (e, s) not in done:
                at = mixplan.split_positions(mix.epoch_rows, mix.global_batch, p.num_splits, s)
                calls.append((f"epoch {e} split {s}", e, s, seq.source[at], seq.row[at]))
    if not calls:
        return done
    t0 = time.time()
    with Bar(len(calls), f"materialize mixture {len(run_epochs)} epochs x {p.num_splits} splits", unit="split") as bar:
        if on_ray:
            records = _on_ray(job, calls, ray_address, num_cpus, bar.update, resources)
        else:
            records = _local(job, calls, num_cpus, bar.update)
    done.update({(r["epoch"], r["split"]): r for r in records})
    log.info("wrote %d splits in %.1fs", len(calls), time.time() - t0)
    return done


def _local(job: MixtureJob, calls: list[tuple], num_cpus: int | None, on_done: Callable[[], None]) -> list[dict]:
    """The tasks on threads of this process, from rows held in memory when they fit."""
    held = _hold(job) if _held_bytes(job) <= HOLD_BYTES else None
    pool = ThreadPoolExecutor(num_cpus or os.cpu_count() or 1, thread_name_prefix="prep-mixture")
    try:
        return run_all(pool, [(where, _write_split, (job, e, s, src, row, held)) for where, e, s, src, row in calls], on_done)
    finally:  # an error or Ctrl-C: tasks not started are dropped, the running ones finish their split
        pool.shutdown(wait=True, cancel_futures=True)


def _on_ray(job: MixtureJob, calls: list[tuple], address: str | None, num_cpus: int | None,
            on_done: Callable[[], None], resources: dict[str, float] | None) -> list[dict]:
    """The tasks on Ray, each taking its rows from the tables."""
    import ray

    from prep.materialize.on_ray import collect, released
    from prep.runtime.ray_cluster import init_ray

    init_ray(address, num_cpus=num_cpus)
    remote = ray.remote(num_cpus=1, max_retries=2, resources=resources or None)(released)
    job_ref = ray.put(job)
    return collect([remote.remote(_write_split, where, job_ref, e, s, src, row, None) for where, e, s, src, row in calls],
                   on_done)


def _held_bytes(job: MixtureJob) -> int:
    """Arrow bytes of all selected rows of all sources, from their first rows (it only decides holding or not)."""
    total = 0
    for s in job.sources:
        sample = s.take(np.arange(min(256, s.selected)), job.schema.names[:-1])
        total += sample.nbytes * s.selected // max(1, sample.num_rows)
    return total


def _hold(job: MixtureJob) -> tuple[Held, np.ndarray]:
    """All selected rows of every source, one scan each, source after source (with their ``source`` column);
    and where each source starts."""
    parts = []
    for s in job.sources:
        table = s.read_all(job.schema.names[:-1])
        column = pa.array(np.full(table.num_rows, s.index, dtype=np.uint16))
        parts.append(pa.Table.from_arrays([*table.columns, column], schema=job.schema))
    starts = np.cumsum([0] + [s.selected for s in job.sources])[:-1]
    return Held(parts, np.arange(sum(t.num_rows for t in parts))), starts  # held as read: no concatenated copy


def _taken(job: MixtureJob, src: np.ndarray, row: np.ndarray) -> pa.Table:
    """Positions ``(src[i], row[i])`` taken from the tables, in order."""
    parts, where = [], []
    for s in job.sources:
        at = np.flatnonzero(src == s.index)
        if len(at):
            table = s.take(row[at], job.schema.names[:-1])
            column = pa.array(np.full(len(at), s.index, dtype=np.uint16))
            parts.append(pa.Table.from_arrays([*table.columns, column], schema=job.schema))
            where.append(at)
    return pa.concat_tables(parts).combine_chunks().take(pa.array(np.argsort(np.concatenate(where), kind="stable")))


def _split_batches(job: MixtureJob, src: np.ndarray, row: np.ndarray,
                   held: tuple[Held, np.ndarray] | None) -> Iterator[pa.RecordBatch]:
    if held is not None:
        rows, starts = held
        yield from rows.batches(starts[src] + row, job.read_rows)
        return
    for i in range(0, len(src), job.read_rows):
        yield from _taken(job, src[i:i + job.read_rows], row[i:i + job.read_rows]).to_batches(max_chunksize=job.read_rows)


def _write_split(job: MixtureJob, epoch: int, split: int, src: np.ndarray, row: np.ndarray,
                 held: tuple[Held, np.ndarray] | None) -> dict[str, Any]:
    """One (epoch, split): its rows in read order, written with the rows and tokens each source gave it."""
    n = len(job.sources)
    rows, tokens = np.zeros(n, np.int64), np.zeros(n, np.int64)

    def counted() -> Iterator[pa.RecordBatch]:
        for batch in _split_batches(job, src, row, held):
            which = np.asarray(batch.column(SOURCE_COLUMN))
            rows[:] += np.bincount(which, minlength=n)
            tokens[:] += np.bincount(which, weights=row_tokens(batch), minlength=n).astype(np.int64)
            yield batch

    return write_split_dataset(job, epoch, split, job.schema, counted(),
                               lambda: {"source_rows": rows.tolist(), "source_tokens": tokens.tolist()})


def _manifest(job: MixtureJob, run_epochs: range, done: dict[tuple[int, int], dict]) -> Manifest:
    """The manifest of this run's epochs plus those an earlier run of the same plan wrote."""
    epochs: dict[int, Epoch] = {}
    if storage.exists(storage.join(job.output, MANIFEST), job.s3):
        prev = read_manifest(job.output, job.s3)
        if prev.fingerprint == job.fingerprint:
            epochs = {e.epoch: e for e in prev.epochs}
    for e in run_epochs:
        recs = [done[(e, s)] for s in range(job.plan.num_splits)]
        epochs[e] = Epoch(
            epoch=e, splits=tuple(SplitFile(split=r["split"], path=r["path"], num_rows=r["num_rows"], checksum=r["checksum"])
                                  for r in recs),
            source_rows=tuple(int(x) for x in np.sum([r["source_rows"] for r in recs], axis=0)),
            source_tokens=tuple(int(x) for x in np.sum([r["source_tokens"] for r in recs], axis=0)))
    first = job.sources[0]
    return Manifest(
        prep_version=prep_version, fingerprint=job.fingerprint,
        source=Source(uri=first.spec.table, version=first.spec.version, num_rows=first.num_rows, metadata=first.metadata),
        plan=job.plan, num_selected_rows=job.plan.mixture.epoch_rows, columns=tuple(job.schema.names),
        epochs=tuple(epochs[e] for e in sorted(epochs)),
        mixture=tuple(MixtureTable(uri=s.spec.table, version=s.spec.version, num_rows=s.num_rows, selected_rows=s.selected)
                      for s in job.sources))
