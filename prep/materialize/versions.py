"""An output whose table grew: which earlier epochs a run keeps, and the output's fingerprint.

A plan's fingerprint covers the table version it ran over, so a table that grew (its
new rows in a new Lance version, e.g. ``prep pretokenize --append``) gives the same plan
another fingerprint. With ``--extend`` a run goes on with it: the epochs it adds are
planned over the newest version, the epochs already there stay exactly as written
(each records the version it drew from, its done records name its own plan), and the
output keeps the fingerprint it started with, which reader states and caches name, so a
trainer resumes across the boundary. Without ``--extend`` a newer version is refused
in one line naming both versions and the flag. A kept epoch is checked like any done
split, but never rewritten: a damaged one is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from prep.contracts.done import DoneRecord
from prep.contracts.manifest import MANIFEST, Epoch, Manifest
from prep.io.materialized import read_manifest
from prep.contracts.foreign import serving_metadata
from prep.errors import PrepError
from prep.io import lance_tables, storage
from prep.materialize.rerun import check_splits

__all__ = ["Lineage", "lineage", "check_kept"]


@dataclass(frozen=True)
class Lineage:
    """What a run continues.

    Args:
        fingerprint: the output's fingerprint (the plan over the version the output started on).
        previous: the manifest there, when this run continues its plan (same plan and table), else None.
        kept: epochs that drew from an older version than this run's: kept as they are.
    """

    fingerprint: str
    previous: Manifest | None = None
    kept: Mapping[int, Epoch] = field(default_factory=dict)


def lineage(job: Any, epochs: range, *, extend: bool, overwrite: bool) -> Lineage:
    """What the run ``job`` (the table pinned at its newest version) continues at ``job.output``.

    Raises:
        PrepError: the table is newer than the output's epochs and ``extend`` is not set, or
            ``extend`` asks for no epoch that is not there already.
    """
    uri = storage.join(job.output, MANIFEST)
    try:
        prev = read_manifest(job.output, job.s3) if storage.exists(uri, job.s3) else None
    except PrepError:
        if overwrite:  # a damaged manifest: --overwrite writes the output anew
            return Lineage(job.fingerprint)
        raise
    if prev is None or prev.plan != job.plan or prev.source.uri != job.source:
        return Lineage(job.fingerprint)  # a new output, or another plan: the claim decides
    newest = prev.source.version
    if job.version < newest:  # the table was rolled back or recreated: not this plan's data
        return Lineage(job.fingerprint)
    if job.version > newest and not extend:
        if overwrite:
            return Lineage(job.fingerprint)
        raise PrepError(f"table {job.source} is at version {job.version}, the epochs in {job.output} drew from version "
                        f"{newest}: pass --extend to add epochs planned over version {job.version} (the epochs there "
                        "stay as they are), or --overwrite to start over")
    if job.version > newest:
        _same_rows(prev, job)
    kept = {e.epoch: e for e in prev.epochs if e.version != job.version}
    if job.version > newest and all(e in kept for e in epochs):
        raise PrepError(f"--extend: epochs {epochs.start}..{epochs.stop - 1} are all in {job.output} already (drawn "
                        f"from version {newest}); ask for more epochs (--epochs {max(e.epoch for e in prev.epochs) + 2}) "
                        f"to add epochs over version {job.version}")
    return Lineage(prev.fingerprint, prev, kept)


def _same_rows(prev: Manifest, job: Any) -> None:
    """The newest version's rows batch like the old ones: the same columns, kind, tokenizer, row or image shape."""
    meta = serving_metadata(lance_tables.open_table(job.source, job.version, job.lance_options(job.source)), job.source)
    old = prev.source.metadata
    changed = [f"columns {list(prev.columns)} -> {list(job.columns)}"] if tuple(job.columns) != prev.columns else []
    changed += [f"{key} {getattr(old, key)!r} -> {getattr(meta, key)!r}" for key in ("kind", "tokenizer", "seq_len", "image")
                if getattr(old, key) != getattr(meta, key)]
    if changed:
        raise PrepError(f"--extend: version {job.version} of {job.source} does not hold rows like the epochs in "
                        f"{job.output} (version {prev.source.version}): {'; '.join(changed)}; materialize it into "
                        "another --output")


def check_kept(job: Any, line: Lineage, epochs: range) -> None:
    """The kept epochs among ``epochs`` are whole: every split's done record names its epoch's plan and its files are there.

    Raises:
        PrepError: one line naming the first damaged split (it is not rewritten over another version).
    """
    for e in epochs:
        entry = line.kept.get(e)
        if entry is None:
            continue
        found = check_splits(job, e, line.previous.epoch_fingerprint(entry))
        for s in range(job.plan.num_splits):
            why = found.get(s, "its done record is missing")
            if not isinstance(why, DoneRecord):
                raise PrepError(f"epoch {e} split {s} (drawn from version {entry.version} of {job.source}): {why}; "
                                f"a run over version {job.version} does not rewrite it: `prep verify {job.output}` "
                                "says what is wrong; restore it, or start over with --overwrite")
