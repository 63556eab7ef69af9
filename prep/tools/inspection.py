"""``prep inspect``: what a prepared table, a rejects table or a materialized output holds.

Every figure is measured from the data or read from the metadata the output
carries (docs/architecture.md), never recomputed from the config: a report is
a plain dict (``--json`` prints it as is) and :func:`format_report` words it.
Bad paths are one-line :class:`~prep.errors.PrepError`\\ s: not a table, a table
in a format a newer prep wrote, a materialized output missing a split.
"""

from __future__ import annotations

from collections import Counter
from importlib import metadata as dist
from typing import Any, Literal

import lance
import numpy as np
import pyarrow.compute as pc

import prep
from prep.io import lance_tables
from prep.io import storage
from prep.errors import PrepError
from prep.contracts.table import RejectsMetadata, Step, TableMetadata, read_metadata, read_table_metadata
from prep.contracts.manifest import MANIFEST, Manifest, MixtureTable
from prep.io.materialized import read_manifest
from prep.contracts.marker import JOB_MARKER
from prep.prepare.rejects import reason_group

__all__ = ["Kind", "is_materialized", "open_prepared", "inspect_path", "decode_rows", "reason_group", "format_report", "to_json", "PERCENTILES"]

Kind = Literal["table", "rejects", "materialized"]
PERCENTILES = (50, 90, 99)
_EXAMPLES_PER_REASON = 2
_GALLERY = 16  # sample images kept for the plot
_MAX_SOURCES = 20  # more distinct values in a `source` column are files, not the parts of a mixture


def is_materialized(path: str, s3: storage.S3Options | None = None) -> bool:
    """Whether ``path`` is (or was started as) an output of ``prep materialize-shuffle``."""
    if storage.exists(storage.join(path, MANIFEST), s3):
        return True
    return storage.exists(storage.join(path, JOB_MARKER), s3) and not storage.exists(storage.join(path, "_versions"), s3)


def open_prepared(path: str, s3: storage.S3Options | None = None) -> tuple[Kind, lance.LanceDataset]:
    """A table prep wrote (``"table"`` or ``"rejects"``), opened.

    Raises:
        PrepError: ``path`` is not a Lance table, is one prep did not write, or a prep
            newer than this one wrote it.
    """
    if not storage.exists(storage.join(path, "_versions"), s3):
        what = "does not exist" if not storage.exists(path, s3) else "is not a Lance table or a materialized output"
        raise PrepError(f"{path} {what}: `prep inspect` takes a table from `prep pretokenize`/`prep decode-images`, "
                        f"its .rejects.lance table, or an output of `prep materialize-shuffle`")
    ds = lance_tables.open_table(path, storage_options=storage.lance_storage_options(path, s3))
    meta = read_metadata(ds.schema.metadata, path)
    if isinstance(meta, RejectsMetadata):
        return "rejects", ds
    if meta is None:
        raise PrepError(f"{path} is a Lance table prep did not write (no prep metadata in its schema): "
                        "inspect it with Lance itself, e.g. lance.dataset(path).head(5); `prep materialize-shuffle` "
                        "and the reader take it when it has token or image columns")
    return "table", ds


def inspect_path(path: str, *, rows: int = 0, s3: storage.S3Options | None = None) -> dict[str, Any]:
    """The report for ``path`` (``rows``: how many sample rows to decode), as a JSON-ready dict."""
    if is_materialized(path, s3):
        return _materialized(path, rows, s3)
    kind, ds = open_prepared(path, s3)
    report = _table(path, ds, rows, s3) if kind == "table" else _rejects(path, ds, rows, s3)
    return {"kind": kind, "path": path, **report}


# --- prepared tables -------------------------------------------------------------------------------

def _versions(meta: TableMetadata) -> dict[str, str]:
    return {"written_by_prep": meta.prep_version, "this_prep": prep.__version__, "pylance": dist.version("pylance")}


def _table(path: str, ds: lance.LanceDataset, rows: int, s3: storage.S3Options | None) -> dict[str, Any]:
    meta = read_table_metadata(ds, path)
    report: dict[str, Any] = {
        "table_kind": meta.kind,
        "version": ds.version,
        "num_rows": ds.count_rows(),
        "schema": {f.name: str(f.type) for f in ds.schema},
        "counts": meta.counts.to_json(),
        "config": dict(meta.config),
        "config_hash": meta.config_hash,
        "sources": len(meta.sources),
        "history": [h.to_json() for h in meta.history],
        "versions": _versions(meta),
    }
    if meta.kind == "images":
        report.update(_images(ds, meta, rows))
    else:
        report.update(_text(ds, meta, rows))
    rejects_uri = meta.rejects_uri
    if rejects_uri and storage.exists(storage.join(rejects_uri, "_versions"), s3):
        rej = lance_tables.open_table(rejects_uri, storage_options=storage.lance_storage_options(rejects_uri, s3))
        report["rejects"] = {"path": rejects_uri, **_rejects(rejects_uri, rej, 0, s3)}
    else:
        report["rejects"] = {"path": rejects_uri, "missing": True}
    return report


def _text(ds: lance.LanceDataset, meta: TableMetadata, rows: int) -> dict[str, Any]:
    lengths = ds.to_table(columns=["length"])["length"].to_numpy()
    out: dict[str, Any] = {
        "tokenizer": meta.tokenizer.to_json() if meta.tokenizer else None,
        "seq_len": meta.seq_len,
        "tokens": int(lengths.sum()),
        "tokens_trained": meta.counts.tokens_trained if meta.inferred is None else None,  # a table prep did not write counted none
        "length": {"min": int(lengths.min()) if len(lengths) else 0, "max": int(lengths.max()) if len(lengths) else 0,
                   **{f"p{q}": float(np.percentile(lengths, q)) if len(lengths) else 0.0 for q in PERCENTILES}},
        "lengths": lengths,  # for the plot; dropped from --json
    }
    if rows:
        out["samples"] = decode_rows(ds.head(rows).to_pylist(), meta.tokenizer.name if meta.tokenizer else None)
    return out


def decode_rows(rows: list[dict[str, Any]], tokenizer: str | None) -> list[dict[str, Any]]:
    """Rows back to text, in runs of trained (loss_mask 1) and masked (0) tokens; ids only without a tokenizer."""
    tok = None
    if tokenizer:
        from prep.prepare.text.tokenizer import load_tokenizer

        tok = load_tokenizer(tokenizer)
    out = []
    for row in rows:
        ids = [int(i) for i in row["input_ids"]]
        mask = [int(m) for m in row.get("loss_mask") or [1] * len(ids)]
        runs = []
        start = 0
        for i in range(1, len(ids) + 1):
            if i == len(ids) or mask[i] != mask[start]:
                piece = ids[start:i]
                runs.append({"trained": bool(mask[start]),
                             "text": tok.decode(piece) if tok is not None else " ".join(map(str, piece))})
                start = i
        out.append({"id": int(row["id"]), "length": len(ids), "runs": runs})
    return out


def _images(ds: lance.LanceDataset, meta: TableMetadata, rows: int) -> dict[str, Any]:
    names = list(meta.images.labels) if meta.images else []
    labels = ds.to_table(columns=["label"])["label"].to_numpy()
    counts = Counter(int(x) for x in labels)
    out: dict[str, Any] = {
        "image": meta.image.to_json() if meta.image else None,
        "labels": {_label(names, k): n for k, n in sorted(counts.items())},
    }
    shape = meta.image.shape if meta.image else None
    head = ds.head(max(rows, _GALLERY), columns=[c for c in ("id", "label", "source", "image") if c in ds.schema.names])
    samples = []
    for row in head.to_pylist():
        pixels = np.asarray(row.get("image") or [], np.uint8)
        samples.append({"id": int(row["id"]), "label": _label(names, row["label"]), "source": row.get("source"),
                        "mean_pixel": round(float(pixels.mean()), 1) if pixels.size else None,
                        "pixels": pixels.reshape(shape) if shape and pixels.size else None})
    out["gallery"], out["samples"] = samples, samples[:rows]
    return out


def _label(names: list[str], label: int) -> str:
    return names[label] if 0 <= label < len(names) else str(label)


# --- rejects ---------------------------------------------------------------------------------------

def _rejects(path: str, ds: lance.LanceDataset, rows: int, s3: storage.S3Options | None) -> dict[str, Any]:
    t = ds.to_table(columns=["source", "position", "reason", "raw"])
    groups: dict[str, dict[str, Any]] = {}
    for source, position, reason, raw in zip(*(t[c].to_pylist() for c in ("source", "position", "reason", "raw"))):
        g = groups.setdefault(reason_group(reason), {"count": 0, "examples": []})
        g["count"] += 1
        if len(g["examples"]) < max(_EXAMPLES_PER_REASON, rows):
            g["examples"].append({"source": source, "position": position, "reason": reason, "raw": (raw or "")[:160]})
    ordered = dict(sorted(groups.items(), key=lambda kv: -kv[1]["count"]))
    meta = read_metadata(ds.schema.metadata, path)
    of = meta.of if isinstance(meta, RejectsMetadata) else None
    return {"num_rows": t.num_rows, "of": of, "table_committed": bool(of) and storage.exists(storage.join(of, "_versions"), s3),
            "files_rejected": int(pc.sum(pc.equal(t["position"], "file")).as_py() or 0), "reasons": ordered}


# --- materialized outputs --------------------------------------------------------------------------

def _materialized(path: str, rows: int, s3: storage.S3Options | None) -> dict[str, Any]:
    manifest = read_manifest(path, s3)
    missing = [f.path for e in manifest.epochs for f in e.splits if not storage.exists(storage.join(path, f.path, "_versions"), s3)]
    if missing:
        raise PrepError(f"{path}: {len(missing)} split(s) listed in {MANIFEST} are missing, first {storage.join(path, missing[0])}; "
                        f"rerun `prep materialize-shuffle` with the same arguments to rewrite them (or `prep verify {path}`)")
    per_epoch = {e.epoch: [f.num_rows for f in e.splits] for e in manifest.epochs}
    meta = manifest.source.metadata
    report: dict[str, Any] = {
        "kind": "materialized", "path": path,
        "fingerprint": manifest.fingerprint,
        "source": {"uri": manifest.source.uri, "version": manifest.source.version, "num_rows": manifest.source.num_rows},
        "plan": manifest.plan.to_json(), "columns": list(manifest.columns), "num_selected_rows": manifest.num_selected_rows,
        "epochs": sorted(per_epoch), "num_splits": manifest.plan.num_splits,
        "rows_per_epoch": {e: sum(r) for e, r in per_epoch.items()},
        "rows_per_split": per_epoch,
        "table_kind": meta.kind, "tokenizer": meta.tokenizer.to_json() if meta.tokenizer else None,
        "inferred": meta.inferred,
        "versions": {"written_by_prep": manifest.prep_version, "this_prep": prep.__version__, "pylance": dist.version("pylance")},
    }
    if manifest.mixture is not None:
        report["mixture"] = [t.to_json() for t in manifest.mixture]
    shares = _source_shares(path, manifest, s3)
    if shares is not None:
        report["source_shares"] = shares
    if rows:
        first = manifest.epochs[0].splits[0].path
        split = lance_tables.open_table(storage.join(path, first), storage_options=storage.lance_storage_options(path, s3))
        head = split.head(rows).to_pylist()
        if "input_ids" in split.schema.names:
            report["samples"] = decode_rows(head, meta.tokenizer.name if meta.tokenizer else None)
        else:
            report["samples"] = [{"id": r.get("id"), "label": r.get("label")} for r in head]
    return report


def _source_shares(path: str, manifest: Manifest, s3: storage.S3Options | None) -> dict[str, float] | None:
    """Each source's share of the first epoch, when rows carry a ``source`` column naming a few sources (a mixture)."""
    if "source" not in manifest.columns:
        return None
    shares: Counter = Counter()
    for f in manifest.epochs[0].splits:
        t = lance_tables.open_table(storage.join(path, f.path), storage_options=storage.lance_storage_options(path, s3))
        shares.update(t.to_table(columns=["source"])["source"].to_pylist())
    if len(shares) > _MAX_SOURCES:  # one source per row (image files), not the parts of a mixture
        return None
    total = max(1, sum(shares.values()))
    names = {i: f"{i}: {t.uri}" for i, t in enumerate(manifest.mixture or ())}  # a mixture's source column holds indices
    return {str(names.get(k, k)): v / total for k, v in shares.most_common()}


# --- words -----------------------------------------------------------------------------------------

def to_json(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` without the arrays kept for plots (lengths, pixels)."""
    out = {k: v for k, v in report.items() if k not in ("lengths", "gallery")}
    if "samples" in out:
        out["samples"] = [{k: v for k, v in s.items() if k != "pixels"} for s in out["samples"]]
    if "rejects" in out and isinstance(out["rejects"], dict):
        out["rejects"] = to_json(out["rejects"]) if "kind" in out["rejects"] else out["rejects"]
    return out


def format_report(r: dict[str, Any]) -> str:
    """The human report: one block per part, the figures first."""
    if r["kind"] == "rejects":
        head = f"{r['path']}: rejects of {r['of']}"
        if not r["table_committed"]:
            head += (", a table that was never committed (its job stopped after writing these rejects: killed, or over "
                     "max_reject_fraction); rerun that job: it replaces these rejects")
        return "\n".join([head, *_reasons(r)])
    if r["kind"] == "materialized":
        return _format_materialized(r)
    lines = [f"{r['path']}: prepared {r['table_kind']} table, version {r['version']}, {r['num_rows']:,} rows",
             "  schema: " + ", ".join(f"{k} {v}" for k, v in r["schema"].items())]
    if "length" in r:
        L, trained = r["length"], r.get("tokens_trained")
        share = f" ({trained:,} trained on, {trained / max(1, r['tokens']):.1%})" if trained is not None else ""
        lines += [f"  tokens: {r['tokens']:,}{share}; tokenizer {(r['tokenizer'] or {}).get('name')}",
                  f"  length: min {L['min']}, " + ", ".join(f"p{q} {L[f'p{q}']:g}" for q in PERCENTILES) + f", max {L['max']}"]
    if "labels" in r:
        lines.append(f"  images: {r['image']}; labels " + ", ".join(f"{k} {v:,}" for k, v in r["labels"].items()))
    c = r["counts"]
    lines.append(f"  counts: read {c['rows_read']:,} = accepted {c['rows_accepted']:,} + rejected "
                 f"{c['rows_rejected']:,}; {c['rows_written']:,} rows written; files rejected "
                 f"{c['files_rejected']:,} of {r['sources']} source file(s)")
    lines.append(f"  config: {r['config_hash'][:12] if r['config_hash'] else '?'} " + ", ".join(
        f"{k}={v}" for k, v in sorted(r["config"].items()) if v not in (None, [], {}) and k not in ("ray",)))
    lines += ["  history:"] + [f"    {Step.from_json(h, r['path']).describe()}" for h in r.get("history", [])]
    lines.append("  versions: " + ", ".join(f"{k} {v}" for k, v in r["versions"].items()))
    rej = r["rejects"]
    if rej.get("missing"):
        lines.append(f"  rejects: {rej['path']} is missing")
    else:
        lines += [f"  rejects: {rej['path']}", *("  " + line for line in _reasons(rej))]
    lines += _samples(r.get("samples", []))
    return "\n".join(lines)


def _reasons(r: dict[str, Any]) -> list[str]:
    lines = [f"  {r['num_rows']:,} rejected ({r['files_rejected']:,} whole files)"]
    for reason, g in r["reasons"].items():
        lines.append(f"  {g['count']:>8,}  {reason}")
        lines += [f"            e.g. {e['source']} {e['position']}: {e['reason']} | {e['raw'][:80]!r}" for e in g["examples"]]
    return lines


def _samples(samples: list[dict[str, Any]]) -> list[str]:
    """Decoded rows: masked (not trained on) runs in [[...]], trained runs as they are."""
    if not samples:
        return []
    lines = ["  samples ([[...]]: masked out of the loss; the rest is trained on):" if "runs" in samples[0] else "  samples:"]
    for s in samples:
        if "runs" in s:
            text = "".join(run["text"] if run["trained"] else f"[[{run['text']}]]" for run in s["runs"])
            lines.append(f"  - id {s['id']} ({s['length']} tokens): " + text.replace("\n", "\n      "))
        else:
            lines.append("  - " + ", ".join(f"{k} {v}" for k, v in s.items() if k != "pixels"))
    return lines


def _source_lines(r: dict[str, Any]) -> list[str]:
    """The table a plan ran over, or every table of a mixture with its rows available, drawn and repeats."""
    if not r.get("mixture"):
        return [f"  source: {r['source']['uri']} version {r['source']['version']} ({r.get('table_kind') or '?'}), "
                f"{r['num_selected_rows']:,} rows selected", *([f"  {r['inferred']}"] if r.get("inferred") else [])]
    tables = [MixtureTable(**{k: v for k, v in t.items() if k != "repeats"}) for t in r["mixture"]]
    return [f"  mixture of {len(tables)} {r.get('table_kind') or '?'} tables, {r['num_selected_rows']:,} rows an epoch:",
            *(f"    source {i}: {t.describe()}" for i, t in enumerate(tables))]


def _format_materialized(r: dict[str, Any]) -> str:
    per_split = np.array([r["rows_per_split"][e] for e in r["epochs"]])
    plan = r["plan"]
    lines = [
        f"{r['path']}: materialized {len(r['epochs'])} epoch(s) {r['epochs'][0]}..{r['epochs'][-1]} x {r['num_splits']} splits, "
        f"fingerprint {r['fingerprint']}",
        *_source_lines(r),
        "  plan: " + ", ".join(f"{k}={v}" for k, v in sorted(plan.items())),
        f"  columns: {', '.join(r['columns'])}",
        "  rows per epoch: " + ", ".join(f"{e}: {n:,}" for e, n in r["rows_per_epoch"].items()),
        f"  rows per split: min {per_split.min():,}, max {per_split.max():,} (a step takes the same rows of every split; "
        "the rest of a split past the last full step is dropped for that epoch)",
        "  versions: " + ", ".join(f"{k} {v}" for k, v in r["versions"].items()),
    ]
    if r.get("source_shares"):
        lines.append("  sources (epoch 0): " + ", ".join(f"{k} {v:.1%}" for k, v in r["source_shares"].items()))
    return "\n".join(lines + _samples(r.get("samples", [])))
