"""``prep verify`` for a mixture: recompute the plan, check every split and every global batch against it.

Per split: rows and content checksum as the manifest says, the ``source`` column
exactly the plan's sources in read order and (with ``id`` columns) the ids exactly
the planned rows of those sources. Per global batch (``b = G/S`` rows of each split):
the rows of each source are the plan's, and by rows each is ``floor`` or ``ceil`` of
``G*w``. Per epoch: the rows and tokens per source counted on disk equal the
manifest's. A row swapped between sources breaks the first and the second check.
The notes say what every epoch held (shares of rows and tokens per source), so a
user sees the proportions the model will see.
"""

from __future__ import annotations

import numpy as np

from prep.io import lance_tables

from prep.io import storage
from prep.errors import PrepError, one_line
from prep.contracts.manifest import Manifest, vocab_size
from prep.materialize.mixture.run import check_plannable, epoch_plan
from prep.materialize.verify.report import Report, first_difference
from prep.materialize.verify.scan import scan_split
from prep.materialize.mixture.sources import SOURCE_COLUMN, OpenSource, open_sources, row_tokens
from prep.plan import mixture as mixplan
from prep.plan.spec import MixtureSpec

__all__ = ["check_mixture"]

def _selected_ids(s: OpenSource) -> np.ndarray:
    return s.dataset.to_table(columns=["id"], filter=s.spec.filter).column("id").to_numpy()


def check_mixture(out: Report, manifest: Manifest, *, s3: storage.S3Options | None, check_ids: bool,
                  max_problems: int) -> None:
    """Checks the mixture output at ``out.path`` (its manifest already read) against its recomputed plan,
    adding to ``out`` what it checked and found."""
    path = out.path
    p, mix = manifest.plan, manifest.plan.mixture
    check_plannable(mix.epoch_rows, f"{path}: the manifest's mixture")
    for src in mix.sources:
        latest = lance_tables.open_table(src.table, storage_options=storage.lance_storage_options(src.table, s3)).version
        if latest != src.version:  # checked against its pinned version, which Lance keeps
            out.notes.append(f"mixture table {src.table} is at version {latest} now; checked against version "
                             f"{src.version}, which the mixture drew from")
    sources = open_sources(mix, s3 or storage.S3Options())
    first = mix.sources[0]
    if p.fingerprint(first.table, first.version) != manifest.fingerprint:
        out.problems.append("the manifest fingerprint does not match its plan: the manifest was edited")
    for s, t in zip(sources, manifest.mixture):
        if s.selected != t.selected_rows:
            out.problems.append(f"mixture table {t.uri}: {s.selected} rows selected now, the manifest says {t.selected_rows}")
    has_ids = check_ids and "id" in manifest.columns
    ids = [_selected_ids(s) for s in sources] if has_ids else None
    if not has_ids:
        out.notes.append("no id column in the output: rows checked by source and count, not identity")
    g, n = mix.global_batch, len(sources)
    vocab = vocab_size(manifest)
    token_columns = ["length"] if "length" in manifest.columns else ["input_ids"] if "input_ids" in manifest.columns else []
    for entry in manifest.epochs:
        seq = epoch_plan(p, sources, entry.epoch)
        got_source = np.zeros(mix.epoch_rows, dtype=np.int64) - 1
        rows, tokens = np.zeros(n, np.int64), np.zeros(n, np.int64)
        for sp in entry.splits:
            where = f"epoch {entry.epoch} split {sp.split}"
            uri = storage.join(path, sp.path)
            at = mixplan.split_positions(mix.epoch_rows, g, p.num_splits, sp.split)
            try:
                scan = scan_split(uri, s3, [c for c in ("id", SOURCE_COLUMN) if c in manifest.columns] + token_columns)
            except (PrepError, OSError, ValueError) as exc:
                out.problems.append(f"{where}: {uri} cannot be read ({one_line(exc)}): rerun materialize-shuffle")
                continue
            count, table = scan.rows, scan.columns
            out.rows += count
            if scan.checksum != sp.checksum:
                out.problems.append(f"{where}: checksum {scan.checksum[:12]}... != manifest {sp.checksum[:12]}...")
            outside = scan.tokens_outside(vocab)
            if outside:
                out.problems.append(f"{where}: {outside}")
            if count != len(at) or sp.num_rows != len(at):
                out.problems.append(f"{where}: {count} rows on disk, manifest {sp.num_rows}, plan {len(at)}")
                continue
            which = np.asarray(table.column(SOURCE_COLUMN), dtype=np.int64)
            got_source[at] = which
            rows += np.bincount(which, minlength=n)[:n]
            tokens += np.bincount(which, weights=row_tokens(table), minlength=n)[:n].astype(np.int64)
            bad = np.flatnonzero(which != seq.source[at])
            if len(bad):
                out.problems.append(f"{where}: row {bad[0]} is from source {which[bad[0]]}, the plan puts source "
                                    f"{seq.source[at][bad[0]]} there ({len(bad)} rows differ)")
            elif has_ids:
                want = np.empty(len(at), dtype=np.uint64)
                for i in range(n):
                    mine = seq.source[at] == i
                    want[mine] = ids[i][seq.row[at][mine]]
                differ = first_difference(want, table.column("id").to_numpy())
                if differ:
                    out.problems.append(f"{where}: ids differ from the plan ({differ})")
            if len(out.problems) >= max_problems:
                return
        _check_batches(out, entry.epoch, got_source, seq, mix, n)
        if entry.source_rows != tuple(rows) or entry.source_tokens != tuple(tokens):
            out.problems.append(f"epoch {entry.epoch}: rows/tokens per source on disk {rows.tolist()}/{tokens.tolist()}, "
                                f"the manifest says {list(entry.source_rows or ())}/{list(entry.source_tokens or ())}")
        weights = np.array([s.weight for s in mix.sources]) / sum(s.weight for s in mix.sources)
        out.notes.append(f"epoch {entry.epoch}: {mix.epoch_rows // g} global batches of {g}; by {mix.weight_by}, "
                         f"weights {_shares(weights)}; rows {_shares(rows / max(1, rows.sum()))}, "
                         f"tokens {_shares(tokens / max(1, tokens.sum()))}")


def _check_batches(out: Report, epoch: int, got: np.ndarray, seq: mixplan.EpochSequence, mix: MixtureSpec,
                   n: int) -> None:
    """Each global batch's rows per source on disk against the plan (by rows: and against floor/ceil of ``G*w``)."""
    g = mix.global_batch
    if (got < 0).any():
        return  # a split that could not be read is reported already
    per_batch = lambda s: np.stack([np.bincount(x, minlength=n) for x in s.reshape(-1, g)])  # noqa: E731
    achieved, planned = per_batch(got), per_batch(seq.source.astype(np.int64))
    differ = np.flatnonzero((achieved != planned).any(axis=1))
    if len(differ):
        t = int(differ[0])
        out.problems.append(f"epoch {epoch} global batch {t}: rows per source {achieved[t].tolist()}, the plan "
                            f"{planned[t].tolist()} ({len(differ)} global batches differ)")
    if mix.weight_by == "rows":
        share = np.array([s.weight for s in mix.sources], dtype=np.float64)
        share = share / share.sum() * g
        off = (achieved < np.floor(share - 1e-9)) | (achieved > np.ceil(share + 1e-9))
        if off.any():
            t = int(np.flatnonzero(off.any(axis=1))[0])
            out.problems.append(f"epoch {epoch} global batch {t}: rows per source {achieved[t].tolist()} not within "
                                f"floor/ceil of {np.round(share, 2).tolist()}")


def _shares(x: np.ndarray) -> str:
    return "/".join(f"{v:.3f}" for v in x)
