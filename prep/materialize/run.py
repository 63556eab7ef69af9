"""The one run path of materialize, for a single table and a mixture alike.

:func:`materialize` takes what to materialize (a :class:`Run`: :class:`prep.materialize.table.TableRun`
or :class:`prep.materialize.mixture.run.MixtureRun`) and the run's options
(:class:`prep.materialize.options.RunOptions`) and goes through the same steps:

1. resolve: look at the output (read only), open and pin the sources, fix the plan and its fingerprint;
2. claim: the output holds nothing, or this plan (resumed), or another plan (replaced
   only with ``overwrite``); the job marker is written (:func:`claim`);
3. prepare: what the tasks need written first (the filter sidecar), checks of every epoch;
4. tasks: the (epoch, split) pairs without a sound done record (:mod:`prep.materialize.rerun`)
   are written by an executor (local threads or Ray, the same calls);
5. manifest: written last, atomically, then ``_work`` is removed.

A rerun thus finishes what a killed run left, rewrites a split that is missing or
damaged, and an extended run only adds epochs. A table that grew since is refused,
unless ``extend``: the new epochs are then planned over its newest version and the
others kept as they are (:mod:`prep.materialize.versions`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import fields, replace
from typing import Callable, Mapping, Protocol, Sequence

from prep.io import storage
from prep.errors import PrepError
from prep.io.jsonfile import read_json_file
from prep.io import claims, lease
from prep.contracts.done import DoneRecord
from prep.contracts.manifest import MANIFEST, Epoch, Manifest, SplitFile
from prep.io.materialized import read_manifest, write_manifest
from prep.contracts.marker import JOB_MARKER, JobMarker, PinnedSource
from prep.contracts.materialized import JOB_NAME, WORK, owned_entries
from prep.materialize.faults import kill_point
from prep.materialize.resolved import TaskExecutor
from prep.materialize.options import RunOptions
from prep.materialize.rerun import sound_done_records
from prep.materialize.versions import Lineage, check_kept, lineage
from prep.plan.spec import MixtureSpec, PlanSpec
from prep.runtime.progress import Bar
from prep.runtime.executor import resolve

__all__ = ["Run", "ResolvedRun", "materialize", "existing_output", "claim", "executor_for"]

log = logging.getLogger("prep.materialize")  # the package's name, as printed in `prep -v` logs


class ResolvedRun(Protocol):
    """What the run path needs of a run's job (:class:`prep.materialize.resolved.ResolvedTable`, :class:`prep.materialize.mixture.run.ResolvedMixture`)."""

    output: str
    fingerprint: str
    plan: PlanSpec
    s3: storage.S3Options
    lance_format: str
    source: str  # the (first) source table's URI and pinned version: named by the marker and the manifest
    version: int

    def lance_options(self, uri: str) -> dict[str, str] | None: ...


class Run(Protocol):
    """What a run materializes. One object per run: it keeps the open tables between the steps."""

    name: str  # in the log: "plan" or "mixture"

    def resolve(self, output: str, options: RunOptions, s3: storage.S3Options) -> ResolvedRun:
        """Opens and pins the sources, fixes the plan and its fingerprint; reads, never writes."""

    def prepare(self, job: ResolvedRun, epochs: range) -> ResolvedRun:
        """After the claim: writes what the tasks read (the filter sidecar); checks every epoch of the run."""

    def write(self, job: ResolvedRun, todo: Sequence[tuple[int, int]], executor: TaskExecutor,
              on_done: Callable[[], None]) -> list[DoneRecord]:
        """Writes the (epoch, split) pairs in ``todo`` with ``executor``; returns their done records."""

    def manifest(self, job: ResolvedRun, epochs: tuple[Epoch, ...]) -> Manifest:
        """The manifest holding ``epochs``."""


def materialize(what: Run, options: RunOptions) -> Manifest:
    """Materializes epochs ``options.epoch_range`` of ``what`` (see the module docstring).

    Returns:
        The manifest that was written.

    Raises:
        PrepError: bad sources or plan, or an output that holds something else (one line).
    """
    s3 = (options.s3 or storage.S3Options()).resolved()
    output = options.output if storage.is_remote(options.output) else os.path.abspath(options.output)
    with lease.hold([output], JOB_NAME, s3):  # one writer per output: from before the first read to the end
        return _materialize(what, options, output, s3)


def _materialize(what: Run, options: RunOptions, output: str, s3: storage.S3Options) -> Manifest:
    old = existing_output(output, s3)
    job = what.resolve(output, options, s3)
    epochs = options.epoch_range
    line = lineage(job, epochs, extend=options.extend, overwrite=options.overwrite)
    claim(job, old, overwrite=options.overwrite, continues=line.previous is not None)
    job = what.prepare(job, epochs)
    check_kept(job, line, epochs)
    mine = [e for e in epochs if e not in line.kept]
    done = sound_done_records(job, mine)
    todo = [(e, s) for e in mine for s in range(job.plan.num_splits) if (e, s) not in done]
    on_ray = resolve(options.executor, options.ray_address) == "ray"
    log.info("%s %s: %d of %d splits to write (%s)", what.name, job.fingerprint, len(todo),
             len(epochs) * job.plan.num_splits, "Ray" if on_ray else "local")
    if todo:
        t0 = time.time()
        with Bar(len(todo), f"materialize {what.name} {len(epochs)} epochs x {job.plan.num_splits} splits",
                 unit="split") as bar, executor_for(options, on_ray) as executor:
            done.update({(r.epoch, r.split): r for r in what.write(job, todo, executor, bar.update)})
        log.info("wrote %d splits in %.1fs", len(todo), time.time() - t0)
    manifest = replace(what.manifest(job, _epochs(job, line, mine, done)), fingerprint=line.fingerprint)
    write_manifest(job.output, manifest, job.s3)
    kill_point("manifest")
    fs, work = storage.filesystem(storage.join(job.output, WORK), job.s3)
    if fs.exists(work):
        fs.rm(work, recursive=True)
    return manifest


def executor_for(options: RunOptions, on_ray: bool) -> TaskExecutor:
    """The executor of a run: Ray tasks or threads of this process; both take the same calls."""
    if on_ray:
        from prep.materialize.executors.on_ray import RayExecutor  # imports Ray: only when it is used

        return RayExecutor(options.ray_address, options.num_cpus, options.ray_resources, options.budget)
    from prep.materialize.executors.local import LocalExecutor

    return LocalExecutor(options.num_cpus, options.budget)


def _epochs(job: ResolvedRun, line: Lineage, epochs: Sequence[int],
            done: Mapping[tuple[int, int], DoneRecord]) -> tuple[Epoch, ...]:
    """This run's epochs, from their done records (drawn from this run's version: the manifest fills it
    in), plus those an earlier run of the same plan wrote."""
    out: dict[int, Epoch] = {e.epoch: e for e in line.previous.epochs} if line.previous is not None else {}
    for e in epochs:
        recs = [done[(e, s)] for s in range(job.plan.num_splits)]
        files = tuple(SplitFile(split=r.split, path=r.path, num_rows=r.num_rows, checksum=r.checksum) for r in recs)
        if recs[0].source_rows is None:
            out[e] = Epoch(epoch=e, splits=files)
        else:  # a mixture: the rows and tokens each source put in the epoch
            out[e] = Epoch(epoch=e, splits=files, source_rows=tuple(int(sum(c)) for c in zip(*(r.source_rows for r in recs))),
                           source_tokens=tuple(int(sum(c)) for c in zip(*(r.source_tokens for r in recs))))
    return tuple(out[e] for e in sorted(out))


def existing_output(output: str, s3: storage.S3Options) -> JobMarker | Manifest | None:
    """What a prep job left at ``output`` (its job marker, or the manifest of an output older than
    markers), None when it is new or empty.

    Runs before anything is read or written: a non-empty directory that no prep
    materialize job wrote is an error, with or without --overwrite.
    """
    fs, path = storage.filesystem(output, s3)
    if not fs.exists(path):
        return None
    if not fs.isdir(path):
        raise PrepError(f"--output {output} is a file, not a directory; choose a new or empty directory")
    if not claims.entries(output, s3):  # nothing but this run's lease
        return None
    fix = f"choose another --output (prep never deletes what it did not write), or remove {output} yourself"
    marker = storage.join(output, JOB_MARKER)
    if storage.exists(marker, s3):
        try:
            found = JobMarker.from_json(read_json_file(marker, s3, fix), marker)
        except PrepError as exc:
            raise PrepError(f"{exc}: {fix}") from None
        if found.job == JOB_NAME and found.plan is not None:
            return found
        raise PrepError(f"{marker} was not written by {JOB_NAME} (it marks the output of {found.job}): {fix}")
    manifest = storage.join(output, MANIFEST)
    if storage.exists(manifest, s3):
        return read_manifest(output, s3)
    raise PrepError(
        f"--output {output} is not empty and holds no prep materialized output (no {MANIFEST} or {JOB_MARKER}): {fix}"
    )


def claim(job: ResolvedRun, old: JobMarker | Manifest | None, *, overwrite: bool, continues: bool = False) -> None:
    """Makes ``job.output`` this run's: the same plan is resumed (``continues``: the same plan over the
    newer version of a table that grew, see :mod:`prep.materialize.versions`); a different one is refused
    unless ``overwrite``, which removes only prep's files; then the job marker is written."""
    if old is not None and old.fingerprint != job.fingerprint and not continues:
        if not overwrite:
            raise PrepError(f"output {job.output} holds a different plan (fingerprint {old.fingerprint}, this run "
                            f"{job.fingerprint}: {_differences(old, job)}); pass --overwrite to replace it or choose another --output")
        log.warning("--overwrite: removing the materialized output in %s (only the files prep wrote)", job.output)
        _remove_owned(job.output, job.s3)
    claims.write_marker(job.output, JobMarker.now(JOB_NAME, fingerprint=job.fingerprint, plan=job.plan,
                                                     source=PinnedSource(job.source, job.version)), job.s3)
    kill_point("marker")


def _differences(old: JobMarker | Manifest, job: ResolvedRun) -> str:
    """What changed between the plan at the output and this run's, for the refusal (the typed plans compared
    field by field, each shown as the manifest writes it)."""
    why = []
    if old.source is not None and old.source.uri != job.source:
        why.append(f"source {old.source.uri} -> {job.source}")
    if old.source is not None and old.source.version != job.version:
        why.append(f"source version {old.source.version} -> {job.version} (the table changed since)")
    moved = _moved_sources(old.plan.mixture if old.plan is not None else None, job.plan.mixture)
    if moved:
        return moved
    why += [f"{f.name} {_shown(getattr(old.plan, f.name, None))!r} -> {_shown(getattr(job.plan, f.name))!r}"
            for f in fields(PlanSpec) if getattr(old.plan, f.name, None) != getattr(job.plan, f.name)]
    return "; ".join(why) or "different"


def _shown(value: object) -> object:
    """A plan field as the manifest writes it (lists, not tuples; a mixture as its JSON block)."""
    if isinstance(value, tuple):
        return list(value)
    return value.to_json() if isinstance(value, MixtureSpec) else value


def _moved_sources(old: MixtureSpec | None, new: MixtureSpec | None) -> str | None:
    """When two mixtures differ only in their tables' versions: which moved, and how to keep the old ones."""
    if old is None or new is None:
        return None

    def unpinned(mix: MixtureSpec) -> MixtureSpec:  # the epoch size follows the versions unless the file gives it
        return replace(mix, epoch_rows=None, sources=tuple(replace(s, version=None) for s in mix.sources))

    if unpinned(old) != unpinned(new):
        return None
    moved = [f"{s.table} version {o.version} -> {s.version}" for o, s in zip(old.sources, new.sources) if o.version != s.version]
    if not moved:
        return None
    if old.epoch_rows != new.epoch_rows:
        moved.append(f"epoch_rows {old.epoch_rows} -> {new.epoch_rows}")
    return ("; ".join(moved) + ": a table grew; to go on drawing from the versions the output holds, name them "
            "(`version: N`) in the mixture file")


def _remove_owned(output: str, s3: storage.S3Options) -> None:
    """Removes the files of the materialize layout under ``output``, and nothing else."""
    fs, root = storage.filesystem(output, s3)
    root = root.rstrip("/")
    top = [n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(root, detail=False)]
    inside = {d: [n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(f"{root}/{d}", detail=False)]
              for d in top if d.startswith("epoch-") and fs.isdir(f"{root}/{d}")}
    claims.remove_owned(output, owned_entries(top, inside), s3)

