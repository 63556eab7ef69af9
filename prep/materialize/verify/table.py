"""``prep verify``: check a materialized output against its source table.

Checks the source table first: every file of each version the epochs drew from
against the checksums its commit recorded (:mod:`prep.io.table_checksums`; a mixture's
tables are checked as they are opened). Then, per epoch and split: the split dataset exists and holds the planned
number of rows, its content checksum matches the manifest, and (when the
output has an ``id`` column) its ids are exactly the source rows the plan puts
there, in plan order (a problem names the first row that differs), and its token
ids are within the vocabulary the manifest's tokenizer records; per epoch: every
selected row appears exactly once (an order-free fingerprint of all ids,
compared with the source's). Each split is read once for all of it
(:mod:`prep.materialize.verify.scan`). Each epoch is checked against the table version it
drew from (Lance keeps old versions): an output extended onto a table that grew
(``--extend``) checks its old epochs against the old version, its new ones against
the new; a version that cannot be opened any more (cleaned up) is a problem.

A mixture is checked by :mod:`prep.materialize.verify.mixture` (per global batch proportions
against the recomputed plan). The content checksum is :mod:`prep.io.checksum`'s, the manifest is read by
:func:`prep.io.materialized.read_manifest`.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from prep import plan

from prep.io import lance_tables
from prep.io.table_checksums import check_table

from prep.io import storage
from prep.errors import PrepError, one_line
from prep.contracts.manifest import Epoch, Manifest, vocab_size
from prep.io.materialized import read_manifest
from prep.materialize.resolved import resolved_for_manifest
from prep.materialize.rows.selected import hash_keys_for, selected_ids
from prep.plan.permutation import mix64
from prep.contracts.materialized import rerun_command
from prep.materialize.verify.report import Report, first_difference
from prep.materialize.verify.scan import scan_split
from prep.runtime.progress import Bar
from prep.materialize.verify.mixture import check_mixture

__all__ = ["Report", "verify"]

log = logging.getLogger(__name__)


def _id_sums(ids: np.ndarray) -> np.ndarray:
    """Order-free multiset fingerprint of ids: (count, sum mix64(id), sum mix64(mix64(id)))."""
    a = mix64(np.asarray(ids, dtype=np.uint64))
    with np.errstate(over="ignore"):
        return np.array([len(ids), a.sum(dtype=np.uint64), mix64(a).sum(dtype=np.uint64)], dtype=np.uint64)


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
    manifest = read_manifest(path, s3)
    report = Report(path=path, fingerprint=manifest.fingerprint, repair=rerun_command(manifest, path))
    if manifest.plan.mixture is not None:
        report.epochs, report.splits = len(manifest.epochs), manifest.plan.num_splits
        check_mixture(report, manifest, s3=s3, check_ids=check_ids, max_problems=max_problems)
        return report
    src, p = manifest.source, manifest.plan
    opts = storage.lance_storage_options(src.uri, s3)
    latest = lance_tables.open_table(src.uri, storage_options=opts).version
    if latest != src.version:
        report.notes.append(f"source table {src.uri} is at version {latest} now; each epoch is checked against the "
                            f"version it drew from ({', '.join(map(str, manifest.versions))})")
    sources = {}
    for version in manifest.versions:
        try:
            sources[version] = lance_tables.open_table(src.uri, version=version, storage_options=opts)
        except PrepError as exc:
            report.problems.append(f"epochs {[e.epoch for e in manifest.epochs if e.version == version]} drew from "
                                   f"version {version} of {src.uri}, which cannot be opened "
                                   f"({one_line(exc, limit=200)}): they cannot be checked")
            continue
        report.problems += [f"source table {src.uri} (version {version}): {why}" for why in check_table(src.uri, version, s3).problems]
    expected = p.fingerprint(src.uri, manifest.versions[0])
    if expected != manifest.fingerprint:
        report.problems.append(f"manifest fingerprint {manifest.fingerprint} != recomputed {expected}: the manifest was edited")
    has_ids = check_ids and "id" in manifest.columns
    if not has_ids:
        report.notes.append("no id column in the output: per-row identity not checked, checksums and counts only")
    report.splits = p.num_splits
    bar = Bar(len(manifest.epochs) * p.num_splits, f"verify {len(manifest.epochs)} epochs x {p.num_splits} splits", unit="split")
    for version, source in sources.items():
        entries = [e for e in manifest.epochs if e.version == version]
        if not _check_version(report, manifest, entries, path, source, s3, has_ids, bar, max_problems):
            return report
    bar.close()
    return report


def _check_version(report: Report, manifest: Manifest, entries: list[Epoch], path: str, source: Any,
                   s3: storage.S3Options | None, has_ids: bool, bar: Bar, max_problems: int) -> bool:
    """Checks ``entries``, the epochs that drew from the table version ``source``; False once ``max_problems`` are found."""
    p = manifest.plan
    job = resolved_for_manifest(manifest, path, s3, entries[0])
    keys = hash_keys_for(job, source) if p.strategy == "hash" else None
    source_ids = selected_ids(job, source) if has_ids else None  # 8 bytes a selected row
    source_sums = _id_sums(source_ids) if has_ids else None
    vocab = vocab_size(manifest)
    for entry in entries:
        report.epochs += 1
        sums = np.zeros(3, dtype=np.uint64)
        total = 0
        for sp in entry.splits:
            bar.update()
            where = f"epoch {entry.epoch} split {sp.split}"
            uri = storage.join(path, sp.path)
            planned = plan.split_size(split=sp.split, hash_keys=keys, **job.split_kwargs())
            if sp.num_rows != planned:
                report.problems.append(f"{where}: manifest says {sp.num_rows} rows, the plan {planned}")
            try:
                scan = scan_split(uri, s3, ["id"] if has_ids else [])
            except (PrepError, OSError, ValueError) as exc:  # a missing or damaged data file is a finding
                what = "is missing" if not storage.exists(uri, s3) else f"cannot be read ({one_line(exc)})"
                report.problems.append(f"{where}: {uri} {what}: rerun materialize-shuffle to rewrite it")
                continue
            rows = scan.rows
            total += rows
            report.rows += rows
            if rows != planned:
                report.problems.append(f"{where}: {rows} rows on disk, {planned} planned")
            if scan.checksum != sp.checksum:
                report.problems.append(f"{where}: checksum {scan.checksum[:12]}... != manifest {sp.checksum[:12]}...")
            outside = scan.tokens_outside(vocab)
            if outside:
                report.problems.append(f"{where}: {outside}")
            if has_ids:
                got_ids = scan.columns.column("id").to_numpy()
                sums += _id_sums(got_ids)  # uint64 arrays wrap: a sum mod 2^64
                positions = plan.split_rows(split=sp.split, epoch=entry.epoch, hash_keys=keys, **job.split_kwargs())
                differ = first_difference(source_ids[positions], got_ids)
                if differ:
                    report.problems.append(f"{where}: ids differ from the plan ({differ})")
            if len(report.problems) >= max_problems:
                return False
        if total != entry.num_selected_rows:
            report.problems.append(f"epoch {entry.epoch}: {total} rows, {entry.num_selected_rows} selected rows expected "
                                   f"(table version {entry.version})")
        if has_ids and not np.array_equal(sums, source_sums):
            report.problems.append(f"epoch {entry.epoch}: the set of ids is not the selected rows exactly once "
                                   f"(table version {entry.version})")
    return True
