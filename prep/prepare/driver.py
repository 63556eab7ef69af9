"""The one driver every prepare job runs: plan, claim outputs, run chunks, commit, reconcile.

A kind of job (text, images; audio or video frames next) is a :class:`PrepareJob`:
it plans its inputs into chunks, names its chunk worker, its schema and its own
metadata. Everything else is here, once: input checks before any output is
touched, output ownership (:mod:`prep.io.claims`, :mod:`prep.io.lease`), Ray, the ordered commit,
row accounting measured on each side, old-version cleanup and the summary.

Row accounting compares counts taken where they happen, never derived from each
other: rows parsed and rows accepted (counted by the workers as they read and as
they emit rows), rejected rows (counted in the committed rejects table) and table
rows (counted in the committed table, against the rows the fragments hold).

The commit order is rejects, then (within the reject budget) the table, so a job
stopped between the two (killed, or over ``max_reject_fraction``) leaves a rejects
table whose table was never committed: the plain rerun takes it for this job's
leftovers and replaces it. The commit points call :func:`prep.prepare.faults.maybe_raise`
(``commit``: ``claimed``, ``rejects``, ``table``, ``cleaned``) so tests can kill a job at each.

A job that grows a table (``append``/``update``, :mod:`prep.prepare.growth`) is the same
run over the files the table does not hold yet (and, with ``update``, the changed ones):
its rejects and its table are each committed on top of the versions the table's last step
recorded (:class:`prep.contracts.table.Step`), with the replaced files' rows and rejects
deleted in that same commit (:func:`prep.io.lance_tables.commit_grown` says when Lance
needs two). A job whose inputs are too many for the metadata (image folders) lists them
in the step's file index (:mod:`prep.contracts.file_index`), written before the commit. A
step killed between its rejects and its table left a rejects version no table step names:
the rerun builds on the one the table names, so nothing is counted twice. The table's metadata holds the totals and the history of steps.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import pyarrow as pa

import prep
from prep.io import lance_tables
from prep.io import storage
from prep.io.table_checksums import checksums_for
from prep.io.file_index import drop_unreferenced, write_index
from prep.contracts.counts import REQUIRED_COUNTS, Counts
from prep.contracts.source import SourceEntry
from prep.contracts.table import TABLE_FORMAT, RejectsMetadata, Step, TableMetadata, read_metadata
from prep.runtime.config import JobConfig, config_hash
from prep.errors import PrepError
from prep.runtime.progress import Bar
from prep.prepare import faults
from prep.prepare.growth import Growth, Prior, read_prior, reject_counts, rejects_base, without_sources
from prep.prepare.isolation import Limits
from prep.prepare.chunk_runner import ChunkResult, ChunkWorker, drop_old_versions, run_chunks, start_ray, total_counts
from prep.io.lease import Lease, hold
from prep.io.claims import claim_outputs
from prep.prepare.rejects import REJECTS_SCHEMA, check_budget
from prep.runtime.executor import resolve

__all__ = ["ChunkPlan", "PrepareJob", "run_prepare", "check_apart",
           "rejects_without_table", "commit_and_reconcile"]

log = logging.getLogger(__name__)


@dataclass
class ChunkPlan:
    """What a job decided on the driver before any output is touched.

    Args:
        chunks: the units of work, in output order.
        sources: provenance of every input this run prepares (uri, size, mtime or a listing digest).
        details: anything the job's metadata and summary need later (labels, tokenizer...).
        chunk_sources: the URI of the one source each chunk reads, when no chunk mixes files:
            then each source records its rows and data files, which ``update`` needs.
        replaced: the files whose rows in the table this run replaces (``update``).
        unchanged: listed files the table already holds as they are, left alone (``append``).
        file_index: the identity of every file this run reads, when ``sources`` records folders of
            them (image folders: one file per row, too many for the metadata): the driver writes
            them as the step's file index (:mod:`prep.contracts.file_index`); ``replaced`` among them.
        removed: held files whose rows this run removes with no file of that URI in their place (moved
            to a listed file, or gone from the inputs with ``remove_missing``); ``moved`` the
            ``(was, now)`` pairs among them; ``missing``: held files not listed now, whose rows stay.
    """

    chunks: list[Any]
    sources: list[SourceEntry]
    details: dict[str, Any] = field(default_factory=dict)
    chunk_sources: list[str] | None = None
    replaced: list[str] = field(default_factory=list)
    unchanged: int = 0
    file_index: list[SourceEntry] | None = None
    removed: list[str] = field(default_factory=list)
    moved: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


class PrepareJob(Protocol):
    """What a kind of prepare job provides; :func:`run_prepare` does the rest."""

    name: str  # the command, e.g. "pretokenize": in the output marker and in messages
    sandbox_imports: tuple[str, ...]  # what its worker imports in a sandbox: loaded once per sandbox (run_chunks' preload)

    @property
    def cfg(self) -> JobConfig: ...

    def plan(self, s3: storage.S3Options, prior: Prior | None) -> ChunkPlan:
        """Lists and checks the inputs and cuts chunks; raises PrepError on bad input. Writes nothing.
        With ``prior`` (an append), lists under its id root and plans only what it selects."""

    def worker(self, plan: ChunkPlan, s3: storage.S3Options) -> ChunkWorker:
        """The picklable callable a Ray task runs on one chunk."""

    def schema(self) -> pa.Schema:
        """The table's Arrow schema."""

    def metadata(self, plan: ChunkPlan, counts: Counts) -> dict[str, Any]:
        """The job's own metadata keys (kind, tokenizer, image shape...), merged into the common ones."""

    def summary(self, plan: ChunkPlan, counts: Counts) -> dict[str, Any]:
        """The job's own summary keys (tokens, formats...), merged into the common ones."""


def run_prepare(job: PrepareJob) -> dict[str, Any]:
    """Runs ``job`` to a committed table and rejects table; returns the common summary.

    Raises:
        PrepError: bad inputs (before any output is touched), an output prep may not
            replace, a failed chunk, or counts that do not reconcile.
        LeaseHeld: another run is writing the output or the rejects table.
    """
    cfg = job.cfg
    check_apart(cfg.output, cfg.rejects_uri)  # before the leases: they write beside both paths
    with hold([cfg.output, cfg.rejects_uri], job.name, cfg.s3.options().resolved()) as leases:  # before any input is read
        return _run_leased(job, leases)


def _run_leased(job: PrepareJob, leases: list[Lease]) -> dict[str, Any]:
    cfg = job.cfg
    t0 = time.perf_counter()
    spec = faults.from_env()
    faults.arm(spec)
    s3 = cfg.s3.options().resolved()
    prior = read_prior(cfg.output, s3) if cfg.grows else None
    plan = job.plan(s3, prior)  # inputs first: a typo in --input never reaches the output
    if prior is not None:
        prior.check_made_like(cfg, job.metadata(plan, Counts()))
        if not plan.sources and not plan.removed:
            return _nothing_new(job, prior, plan, t0)
    growth = Growth.of(prior, plan.replaced + plan.removed, cfg.rejects_uri) if prior is not None else None
    orphan = rejects_without_table(cfg.output, cfg.rejects_uri, s3)
    claim_outputs([cfg.output, cfg.rejects_uri], job.name, overwrite=cfg.overwrite or orphan or prior is not None, s3=s3)
    faults.maybe_raise("commit", "claimed")
    opts = storage.lance_storage_options(cfg.output, s3)
    executor = resolve(cfg.executor, cfg.ray.address)
    ray_seconds = start_ray(cfg) if executor == "ray" else 0.0
    t_run = time.perf_counter()
    with Bar(len(plan.chunks), f"{job.name} {cfg.output.rstrip('/').rsplit('/', 1)[-1]}", unit="chunk") as bar:
        results = run_chunks(plan.chunks, faults.Armed(job.worker(plan, s3), spec), output_uri=_absolute(cfg.output),
                             rejects_uri=_absolute(cfg.rejects_uri),
                             storage_options=opts, limits=Limits.of(cfg), executor=executor, local_workers=cfg.ray.num_cpus,
                             on_result=_advance(bar, t_run), resources=cfg.ray.resources, fresh=growth is None,
                             preload=job.sandbox_imports)
    counts = total_counts(results)
    sources = _with_rows(plan, results)
    totals = growth.totals(counts) if growth else counts
    step = _step(plan, counts, growth, _next_version(cfg.output, opts), cfg.output, s3)
    metadata = TableMetadata.from_json({
        "format": TABLE_FORMAT,
        "prep_version": prep.__version__,
        "config": cfg.model_dump(mode="json", exclude={"s3"}),
        "config_hash": config_hash(cfg),
        "sources": [s.to_json() for s in (growth.kept_sources(sources) if growth else []) + sources],
        "counts": totals.without_formats().to_json(),  # an image job keeps the formats in its decoder
        "rejects_uri": cfg.rejects_uri,
        "history": [h.to_json() for h in ((prior.metadata.history if prior else ()) + (step,))],
        **job.metadata(plan, totals),
    }, cfg.output)  # the parser that readers use checks what is written, too
    metadata = commit_and_reconcile(results, counts, schema=job.schema(), metadata=metadata, output=cfg.output,
                         rejects=cfg.rejects_uri, s3=s3, max_reject_fraction=cfg.max_reject_fraction, growth=growth,
                         leases=leases)
    drop_unreferenced(cfg.output, [h.file_index for h in metadata.history if h.file_index], s3)  # a killed step's, a replaced table's
    if cfg.overwrite or orphan:
        drop_old_versions(cfg, s3)
        faults.maybe_raise("commit", "cleaned")
    t_end = time.perf_counter()
    return {
        **_common_summary(job, plan, metadata, executor, metadata.history[-1]),
        **{k: getattr(counts, k) for k in REQUIRED_COUNTS},
        "seconds": {
            "ray_start": round(ray_seconds, 2),
            "job": round(t_end - t_run, 2),
            "total": round(t_end - t0, 2),
            "in_workers": round(sum(r.seconds for r in results), 2),
        },
        "counts": counts.to_json(),
        **job.summary(plan, counts),
    }


def _common_summary(job: PrepareJob, plan: ChunkPlan, metadata: TableMetadata, executor: str, step: Step | None) -> dict[str, Any]:
    cfg = job.cfg
    return {
        "table": cfg.output,
        "rejects": cfg.rejects_uri,
        "kind": metadata.kind,
        "mode": "update" if cfg.update else "append" if cfg.append else "overwrite" if cfg.overwrite else "create",
        "chunks": len(plan.chunks),
        "executor": executor,
        "sources": len(plan.sources),
        "step": {"version": step.version if step else None, "added": step.files_added if step else 0,
                 "replaced": step.files_replaced if step else 0, "unchanged": plan.unchanged,
                 "rows_added": step.rows_added if step else 0, "rows_removed": step.rows_removed if step else 0,
                 "removed": len(plan.removed), "moved": [list(m) for m in plan.moved], "missing": list(plan.missing)},
        "history": [h.to_json() for h in metadata.history],
    }


def _nothing_new(job: PrepareJob, prior: Prior, plan: ChunkPlan, t0: float) -> dict[str, Any]:
    """The summary of an append that found nothing to add: no version is committed."""
    log.info("%s already holds all %d listed file(s) as they are; nothing to append, no version committed",
             job.cfg.output, plan.unchanged)
    counts = Counts()
    seconds = round(time.perf_counter() - t0, 2)
    return {
        **_common_summary(job, plan, prior.metadata, "none", None),
        **counts.to_json(),
        "seconds": {"ray_start": 0.0, "job": 0.0, "total": seconds, "in_workers": 0.0},
        "counts": counts.to_json(),
        **job.summary(plan, counts),
    }


def _step(plan: ChunkPlan, counts: Counts, growth: Growth | None, version: int, output: str,
          s3: storage.S3Options) -> Step:
    """The step this run commits as ``version``; its file index written first, when the plan has one."""
    removed = growth.removed if growth else Counts()
    made = dict(version=version, rows_added=counts.rows_written, tokens_added=counts.tokens,
                rows_removed=removed.rows_written, tokens_removed=removed.tokens)
    if plan.file_index is None:
        return Step(added=tuple(s.uri for s in plan.sources if s.uri not in plan.replaced), replaced=tuple(plan.replaced),
                    removed=tuple(plan.removed), **made)
    return Step(files_added=len(plan.file_index) - len(plan.replaced), files_replaced=len(plan.replaced), files_removed=len(plan.removed),
                file_index=write_index(output, version, plan.file_index, s3, plan.removed), **made)


def _with_rows(plan: ChunkPlan, results: list[ChunkResult]) -> list[SourceEntry]:
    """``plan.sources``, each with the counts and the data files of its rows and of its rejects
    when chunks do not mix files."""
    if plan.chunk_sources is None:
        return list(plan.sources)
    counts = {s.uri: Counts() for s in plan.sources}
    files: dict[str, list[str]] = {s.uri: [] for s in plan.sources}
    rejects: dict[str, list[str]] = {s.uri: [] for s in plan.sources}
    for r in results:
        uri = plan.chunk_sources[r.index]
        counts[uri] += r.counts
        files[uri] += [d.path for f in r.fragments for d in f.files]
        rejects[uri] += [d.path for f in r.reject_fragments for d in f.files]
    return [dataclasses.replace(s, counts=counts[s.uri], data_files=tuple(files[s.uri]),
                                reject_files=tuple(rejects[s.uri])) for s in plan.sources]


def _next_version(uri: str, opts: dict[str, str] | None) -> int:
    """The version the next commit to ``uri`` makes (this run holds its lease: nobody else commits)."""
    return int(lance_tables.open_table(uri, storage_options=opts).latest_version) + 1 if lance_tables.table_exists(uri, opts) else 1


def _advance(bar: Bar, t0: float) -> Callable[[ChunkResult], None]:
    """Moves ``bar`` one chunk per result, showing rows written so far and tokens/s (when the job counts tokens)."""
    totals = [Counts()]

    def on_result(result: ChunkResult) -> None:
        totals[0] += result.counts
        shown: dict[str, Any] = {"rows": totals[0].rows_written}
        if totals[0].tokens:
            shown["tok/s"] = int(totals[0].tokens / max(time.perf_counter() - t0, 1e-9))
        bar.update(1, **shown)

    return on_result


def _absolute(uri: str) -> str:
    """``uri`` as workers must see it: a sandbox or Ray worker outlives this call's working directory."""
    return uri if storage.is_remote(uri) else os.path.abspath(uri)


def _comparable(uri: str) -> str:
    return uri.rstrip("/") if storage.is_remote(uri) else os.path.realpath(os.path.expanduser(uri))


def check_apart(output: str, rejects: str) -> None:
    """Refuses a rejects path equal to the output, or either inside the other: one commit
    would land on the other's files.

    Raises:
        PrepError: naming both paths, before anything is written.
    """
    a, b = _comparable(output), _comparable(rejects)
    if a == b or b.startswith(a + "/") or a.startswith(b + "/"):
        where = "is the output" if a == b else "lies inside the output" if b.startswith(a + "/") else "holds the output"
        raise PrepError(f"rejects: {rejects} {where} ({output}); set rejects to a path of its own, "
                        "or leave it out (default: <output>.rejects.lance beside the output)")


def rejects_without_table(output: str, rejects: str, s3: storage.S3Options) -> bool:
    """True when ``rejects`` holds a rejects table of ``output`` and ``output`` holds no
    committed table: a job that stopped between its two commits (killed, or over its
    reject budget) left it, and the rerun replaces it without ``--overwrite``."""
    rejects_opts = storage.lance_storage_options(rejects, s3)
    if not lance_tables.table_exists(rejects, rejects_opts):
        return False
    meta = read_metadata(lance_tables.open_table(rejects, storage_options=rejects_opts).schema.metadata, rejects)
    if not isinstance(meta, RejectsMetadata) or meta.of != output or lance_tables.table_exists(output, storage.lance_storage_options(output, s3)):
        return False
    log.warning("%s holds the rejects of a job whose table %s was never committed; this job replaces them", rejects, output)
    return True


def commit_and_reconcile(
    results: list[ChunkResult],
    counts: Counts,
    *,
    schema: pa.Schema,
    metadata: TableMetadata,
    output: str,
    rejects: str,
    s3: storage.S3Options,
    max_reject_fraction: float,
    growth: Growth | None = None,
    leases: Sequence[Lease] = (),
) -> TableMetadata:
    """Commits the rejects, checks every count against its other side and the reject
    budget, then commits the table; returns ``metadata`` as committed (its last step
    naming the versions committed).

    The table is committed last and only when the counts reconcile and the rejects
    are within ``max_reject_fraction``, so a complete-looking table implies complete
    rejects and no lost rows. With ``growth``, both commits build on the versions the
    table's last step names, and the step's counts are checked on the rows it added,
    the whole table's on the totals in ``metadata``.

    Every count is checked before the table commit, so an error never follows a committed table version.
    Each of ``leases`` is checked right before each commit: a run that lost one (it looked dead and another
    run took the output over) commits nothing more.

    Raises:
        TooManyRejects: over the budget, or every row rejected; the rejects stay committed.
        PrepError: a mismatch, naming both numbers; no new table version is committed.
    """
    rejects_opts, output_opts = storage.lance_storage_options(rejects, s3), storage.lance_storage_options(output, s3)
    reject_fragments = [f for r in results for f in r.reject_fragments]
    base = rejects_base(growth.prior if growth else None, rejects, rejects_opts)
    _check_leases(leases)
    if base is None:
        rej = lance_tables.commit_table(rejects, REJECTS_SCHEMA, reject_fragments, metadata=RejectsMetadata(of=output), storage_options=rejects_opts)
        had_rows = had_files = 0
    else:
        gone = growth.removed_reject_files() if growth else set()
        left = [f for f in base.get_fragments() if not gone & {d.path for d in f.metadata.files}]
        keep = without_sources(left, growth.replaced if growth else ())
        had_rows, had_files = reject_counts(left, growth.replaced if growth else ())
        rej = lance_tables.commit_grown(base, REJECTS_SCHEMA, keep, reject_fragments, metadata=lambda _: RejectsMetadata(of=output),
                                        storage_options=rejects_opts)
    faults.maybe_raise("commit", "rejects")
    rejected_rows = rej.count_rows(filter="position != 'file'") - had_rows
    rejected_files = rej.count_rows() - rejected_rows - had_rows - had_files
    fragments = [f for r in results for f in r.fragments]
    in_fragments = sum(f.physical_rows for f in fragments)
    _check("rows read", counts.rows_read, "rows accepted + rows in the rejects table", counts.rows_accepted + rejected_rows)
    _check("rows the workers rejected", counts.rows_rejected, f"rows in {rejects}", rejected_rows)
    _check("files the workers rejected", counts.files_rejected, f"files in {rejects}", rejected_files)
    _check("rows the workers wrote", counts.rows_written, "rows in the written fragments", in_fragments)
    if results or growth is None:  # a step that only removes rows (moved or missing files) reads nothing
        check_budget(counts.rows_read, rejected_rows, lambda: _reasons(rej), max_reject_fraction, output=output, rejects=rejects)
    _check_leases(leases)
    if growth is None:
        metadata = _stamped(metadata, rej.version)
        table = lance_tables.commit_table(output, schema, fragments, metadata=metadata, storage_options=output_opts,
                                          checksums=checksums_for(output, fragments, s3))
        faults.maybe_raise("commit", "table")
        _after_commit(output, in_fragments, table.count_rows())
        return metadata
    base_table = growth.prior.dataset
    gone = growth.removed_data_files()
    kept = without_sources([f for f in base_table.get_fragments() if not gone & {d.path for d in f.metadata.files}], growth.by_rows)
    kept_rows = sum(f.physical_rows - (f.deletion_file.num_deleted_rows if f.deletion_file else 0) for f in kept)
    _check("rows the replaced files gave (recorded or counted)", growth.removed.rows_written, "rows removed from the table",
           base_table.count_rows() - kept_rows)
    _check("rejected rows the replaced files gave (recorded)", growth.removed.rows_rejected, f"their rows in {rejects}",
           reject_counts(base.get_fragments(), ())[0] - had_rows if base is not None else 0)
    _check("rows the table's counts say", metadata.counts.rows_written, "rows kept + rows written", kept_rows + in_fragments)
    _check("rejected rows the table's counts say", metadata.counts.rows_rejected, f"rows in {rejects}",
           rej.count_rows(filter="position != 'file'"))
    _check_leases(leases)
    table = lance_tables.commit_grown(base_table, schema, kept, fragments, metadata=lambda v: _stamped(metadata, rej.version, v),
                                      checksums=checksums_for(output, kept + fragments, s3, base_table), storage_options=output_opts)
    faults.maybe_raise("commit", "table")
    _after_commit(output, kept_rows + in_fragments, table.count_rows())
    return _stamped(metadata, rej.version, table.version)


def _check_leases(leases: Sequence[Lease]) -> None:
    """Raises unless this run still holds every lease (refreshed now): the last word before a commit."""
    for lease in leases:
        lease.check()


def _after_commit(output: str, expected: int, committed: int) -> None:
    """Every count is checked before the table commit; after it, a difference is a warning: the version is committed, so
    an error exit would tell the caller the opposite of what happened."""
    if expected != committed:
        log.warning("%s: committed with %d rows where its fragments hold %d; the version stands: check it with prep verify, "
                    "please report this", output, committed, expected)


def _stamped(metadata: TableMetadata, rejects_version: int, version: int | None = None) -> TableMetadata:
    """``metadata`` with its last step naming the rejects version committed with it (and the version it commits)."""
    if not isinstance(metadata, TableMetadata) or not metadata.history:
        return metadata
    last = dataclasses.replace(metadata.history[-1], rejects_version=int(rejects_version),
                               **({"version": version} if version is not None else {}))
    return dataclasses.replace(metadata, history=metadata.history[:-1] + (last,))


def _reasons(rejects: Any) -> list[str]:
    return rejects.to_table(columns=["reason"], filter="position != 'file'").column("reason").to_pylist()


def _check(left: str, a: int, right: str, b: int) -> None:
    if a != b:
        raise PrepError(f"row accounting failed: {left} = {a:,} but {right} = {b:,}; please report this, then rerun with --overwrite")
