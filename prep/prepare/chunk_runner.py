"""Run a prepare job's chunks, as Ray tasks or on this machine, then commit once.

Every prepare job has the same shape: the driver cuts the input into chunks
(deterministically: the unit of parallelism and of row order), a task per chunk
(a Ray task on a cluster, a local worker thread otherwise; both
run it in a sandbox process) turns it into Arrow rows and writes them as
uncommitted Lance fragments, and the driver commits all fragments in chunk order.
The row order therefore never depends on scheduling, the driver holds only
fragment metadata (its memory does not grow with the corpus), and a job that dies
before the commit leaves no table.
"""

from __future__ import annotations

import logging
import pickle
import time
import traceback
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Iterable, Sequence

import pyarrow as pa

from prep.contracts.counts import Counts
from prep.io import storage
from prep.runtime.config import JobConfig
from prep.errors import PrepError, one_line
from prep.prepare.isolation import Limits, Progress, dumps, run_isolated, hooks_from_env
from prep.prepare.rejects import Reject, rejects_table
from prep.runtime.executor import LocalRunner, RayRunner, Resolved, Runner

__all__ = [
    "ChunkOutput", "ChunkResult", "ChunkWorker", "start_ray", "run_chunks", "total_counts", "drop_old_versions",
]

log = logging.getLogger(__name__)


@dataclass
class ChunkOutput:
    """What a chunk worker returns: rows (a table, or a stream of batches whose reading
    completes ``rejects`` and ``counts``), rejects and counters (under the names of
    :class:`~prep.contracts.counts.Counts`'s fields; ``format:<NAME>`` for image formats)."""

    table: pa.Table | pa.RecordBatchReader
    rejects: list[Reject] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)


@dataclass
class ChunkResult:
    """What a Ray task sends back to the driver: fragment metadata only, never rows."""

    index: int
    fragments: list[Any]
    reject_fragments: list[Any]
    counts: Counts
    seconds: float


ChunkWorker = Callable[[Any, Progress], ChunkOutput]
"""``worker(chunk, progress) -> ChunkOutput``: walks its items through ``progress.items`` (prep.prepare.isolation)."""


def _run_chunk(
    progress: Progress,
    *,
    index: int,
    blob: bytes,
    worker: bytes,
    output_uri: str,
    rejects_uri: str,
    storage_options: dict[str, str] | None,
    max_rows_per_file: int,
    fresh: bool,
) -> tuple[bytes | None, str | None]:
    """One chunk, inside the sandbox: ``(pickled ChunkResult, None)`` or ``(None, error)``.

    ``worker`` is the pickled :data:`ChunkWorker`: only the sandbox unpickles it, so the process
    that feeds the sandbox (a Ray worker) never imports what it needs (a tokenizer, torch), nor Lance.
    A probe (``progress.probe``) reads the worker's rows and writes nothing: ``(None, None)``.
    """
    from prep.io import lance_tables

    chunk = pickle.loads(blob)
    t0 = time.perf_counter()
    raised: list[BaseException] = []
    try:
        out = pickle.loads(worker)(chunk, progress)
        table = _keeping_errors(out.table, raised)
        if progress.probe:
            for _ in table if isinstance(table, pa.RecordBatchReader) else ():
                pass
            return None, None
        try:
            frags = lance_tables.write_fragments(
                table, output_uri, storage_options=storage_options, max_rows_per_file=max_rows_per_file, fresh=fresh
            ) if isinstance(table, pa.RecordBatchReader) or table.num_rows else []
        except Exception:
            if raised:  # the worker's own error, which the writer re-raises wrapped in its own words and traceback
                raise raised[0] from None
            raise
        rej = lance_tables.write_fragments(
            rejects_table(out.rejects), rejects_uri, storage_options=storage_options, fresh=fresh
        ) if out.rejects else []
        counts = Counts.from_json(dict(out.counts), "the worker's") + Counts(rejects_written=len(out.rejects))
        return pickle.dumps(ChunkResult(index, frags, rej, counts, time.perf_counter() - t0)), None
    except PrepError as exc:
        return None, f"{chunk}: {exc}"
    except OSError as exc:  # storage, not prep: its first line says what (Lance's traceback says nothing more)
        return None, f"{chunk}: {type(exc).__name__}: {one_line(exc)}"
    except Exception as exc:  # a bug: wrapped with where it happened, re-raised by the driver
        return None, f"{chunk}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"


def _keeping_errors(table: pa.Table | pa.RecordBatchReader, raised: list[BaseException]) -> pa.Table | pa.RecordBatchReader:
    """``table``, with what a stream of batches raises while the writer reads it appended to ``raised``."""
    if not isinstance(table, pa.RecordBatchReader):
        return table

    def batches() -> Iterable[pa.RecordBatch]:
        try:
            yield from table
        except BaseException as exc:
            raised.append(exc)
            raise

    return pa.RecordBatchReader.from_batches(table.schema, batches())


# What every sandbox's zygote imports besides a job's own modules: _run_chunk's (Lance imported, never run).
_SANDBOX_IMPORTS = ("prep.prepare.chunk_runner", "prep.io.lance_tables")


def _isolated_chunk(index: int, blob: bytes, limits: Limits, hooks: dict[str, str], kwargs: dict[str, Any],
                    preload: tuple[str, ...]) -> tuple[bytes | None, str | None]:
    """One chunk in this thread's sandbox: ``(pickled ChunkResult, None)`` or ``(None, one-line error)``.

    The chunk's restarts (prep.prepare.isolation) are added to its counts as ``chunk_restarts``.
    """
    try:
        (result, error), restarts = run_isolated(_run_chunk, dict(index=index, blob=blob, **kwargs), limits, hooks,
                                                 (*_SANDBOX_IMPORTS, *preload))
    except PrepError as exc:
        return None, f"{pickle.loads(blob)}: {exc}"
    if restarts and result is not None:
        counted = pickle.loads(result)
        counted.counts += Counts(chunk_restarts=restarts)
        result = pickle.dumps(counted)
    return result, error


def _chunk_task(index: int, blob: bytes, shared: dict[str, Any]) -> tuple[bytes | None, str | None]:
    """A runner's task (a local thread or a Ray task): one chunk through the sandbox of its thread or
    worker process (``shared``: what :func:`_isolated_chunk` takes besides)."""
    return _isolated_chunk(index, blob, **shared)


def start_ray(cfg: JobConfig) -> float:
    """Joins or starts Ray as the config says; returns the seconds it took."""
    from prep.runtime.ray_cluster import init_ray

    t0 = time.perf_counter()
    init_ray(cfg.ray.address, num_cpus=cfg.ray.num_cpus)
    return time.perf_counter() - t0


def total_counts(results: Iterable[ChunkResult]) -> Counts:
    """The sum of the chunks' counts."""
    return sum((r.counts for r in results), Counts())


def drop_old_versions(cfg: JobConfig, s3: storage.S3Options) -> None:
    """After an overwrite: deletes the replaced versions' files of the table and its rejects."""
    from prep.io import lance_tables

    for uri in (cfg.output, cfg.rejects_uri):
        ds = lance_tables.open_table(uri, storage_options=storage.lance_storage_options(uri, s3))
        ds.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)


def run_chunks(
    chunks: Sequence[Any],
    worker: ChunkWorker,
    *,
    output_uri: str,
    rejects_uri: str,
    storage_options: dict[str, str] | None = None,
    max_rows_per_file: int = 1 << 20,
    num_cpus_per_task: float = 1.0,
    limits: Limits = Limits(),
    executor: Resolved = "ray",
    local_workers: int | None = None,
    on_result: Callable[[ChunkResult], None] | None = None,
    resources: dict[str, float] | None = None,
    fresh: bool = True,
    preload: tuple[str, ...] = (),
) -> list[ChunkResult]:
    """Runs ``worker`` on every chunk; returns results in chunk order.

    ``executor="ray"`` runs a Ray task per chunk on the cluster; ``"local"`` runs
    ``local_workers`` (default: the CPUs) threads on this machine, each feeding its own
    sandbox process (the runners of :mod:`prep.runtime.executor`); ``resources`` are custom Ray
    resources each task asks for. Both run the same :func:`_run_chunk` in the same sandboxes, so the
    output is identical. Each chunk runs isolated (prep.prepare.isolation): items that
    crash or hang the worker become rejects within ``limits``, and Ray retries a task whose
    worker died at most ``limits.max_task_retries`` times.
    ``on_result`` sees each chunk's result as it arrives (the driver's progress bar).
    ``fresh``: the fragments make a new table (not an append), whatever schema the one at ``output_uri`` has.
    ``preload`` names the modules ``worker`` imports in the sandbox (torch, a decoder): each
    sandbox's zygote imports them once, so a sandbox restarted after a crash starts warm.

    Raises:
        PrepError: a chunk cannot finish, or a Ray task kept failing; one line saying which.
    """
    kwargs = dict(worker=_pickled(worker, executor), output_uri=output_uri, rejects_uri=rejects_uri, storage_options=storage_options,
                  max_rows_per_file=max_rows_per_file, fresh=fresh)
    shared = dict(limits=limits, hooks=hooks_from_env(), kwargs=kwargs, preload=tuple(preload))
    arrived = on_result or (lambda result: None)
    runner: Runner
    if executor == "local":
        runner = LocalRunner(local_workers, "prep-chunk", kept=True)  # kept: its threads' sandboxes stay warm
    else:  # plain tasks, not Ray Data: a chunk's rows never travel (benchmarks/executors.py measured its costs)
        runner = RayRunner(num_cpus=num_cpus_per_task, resources=resources, retries=limits.max_task_retries)
    shared_once = runner.put(shared)  # the chunk worker (a tokenizer's config...) once
    results: dict[int, ChunkResult] = {}
    with closing(runner.as_done(_chunk_task, ((i, (i, pickle.dumps(c), shared_once)) for i, c in enumerate(chunks)))) as done:
        for index, (blob, error) in done:
            if error is not None:
                raise PrepError(error.strip())
            results[index] = pickle.loads(blob)
            arrived(results[index])
    missing = sorted(set(range(len(chunks))) - results.keys())
    if missing:
        raise PrepError(f"chunks {missing[:5]} produced no result (a Ray task was lost); rerun the job")
    return [results[i] for i in range(len(chunks))]


def _pickled(worker: ChunkWorker, executor: Resolved) -> bytes:
    """``worker`` as the sandboxes load it (:func:`_run_chunk`): on Ray with Ray's cloudpickle, as Ray
    itself would send it (a worker class defined in a driver script's ``__main__`` travels by value)."""
    if executor == "local":
        return dumps(worker)
    from ray import cloudpickle

    return cloudpickle.dumps(worker)
