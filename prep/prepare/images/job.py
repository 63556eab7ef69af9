"""The decode-images job: image sources -> a Lance table of fixed-size pixel rows (+ rejects).

The same :func:`run_decode_images` runs under ``ray job submit`` (it joins the
cluster through ``RAY_ADDRESS``), from ``python pipelines/decode_images.py`` and
from ``prep decode-images`` (both start or join a local Ray). It follows the
pretokenize job step by step: plan on the driver, decode chunks as Ray Data tasks
that write uncommitted fragments, commit rejects then the table once, in chunk order.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

import torchvision

import prep
from prep import storage
from prep.config import config_hash
from prep.errors import PrepError
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.sources import plan
from prep.prepare.images.worker import ImageChunkWorker, table_schema
from prep.prepare.isolation import Limits
from prep.prepare.job import commit_outputs, drop_old_versions, prepare_outputs, run_chunks, start_ray, total_counts

__all__ = ["run_decode_images", "format_summary", "split_counts"]

log = logging.getLogger(__name__)


def split_counts(counts: Counter) -> tuple[dict[str, int], dict[str, int]]:
    """``(plain counters, formats seen)``: workers count formats as ``format:<NAME>`` keys."""
    plain = {k: int(v) for k, v in sorted(counts.items()) if ":" not in k}
    formats = {k.split(":", 1)[1]: int(v) for k, v in sorted(counts.items()) if k.startswith("format:")}
    return plain, formats


def run_decode_images(cfg: ImagesConfig) -> dict[str, Any]:
    """Runs the job; returns a summary (rows, rejects, bytes, paths, timings).

    Raises:
        PrepError: bad input paths or columns, an existing table without ``overwrite``,
            a failed chunk, or counts that do not reconcile.
    """
    t0 = time.perf_counter()
    s3 = cfg.s3.options().resolved()
    opts = prepare_outputs(cfg, s3)
    planned = plan(cfg, s3)
    ray_seconds = start_ray(cfg)
    t_run = time.perf_counter()
    worker = ImageChunkWorker(cfg, planned.labels, s3)
    results = run_chunks(planned.chunks, worker, output_uri=cfg.output, rejects_uri=cfg.rejects_uri, storage_options=opts, limits=Limits.of(cfg))
    counts = total_counts(results, ())
    plain, formats = split_counts(counts)
    for key in ("rows_read", "rows_accepted", "rows_rejected", "rows_written", "files_rejected", "decoded_with_pil", "bytes_read"):
        plain.setdefault(key, 0)
    if plain["rows_read"] != plain["rows_written"] + plain["rows_rejected"]:
        raise PrepError(f"row accounting failed: read {plain['rows_read']} != written {plain['rows_written']} + rejected {plain['rows_rejected']}")
    h, w, c = cfg.shape
    labels = list(planned.labels.names or [])
    metadata = {
        "format": "prep.table/1",
        "prep_version": prep.__version__,
        "kind": "images",
        "config": cfg.model_dump(mode="json", exclude={"s3"}),
        "config_hash": config_hash(cfg),
        "image": {"shape": [h, w, c], "layout": "HWC", "dtype": "uint8"} if cfg.store_pixels else None,
        "encoded": {"format": cfg.encode, "quality": cfg.quality, "shape": [h, w, c]} if cfg.encode != "none" else None,
        "labels": labels,
        "source_kind": planned.kind,
        "decoder": {"library": f"torchvision {torchvision.__version__}", "fallback": "Pillow", "formats": formats},
        "sources": planned.sources,
        "counts": plain,
        "rejects_uri": cfg.rejects_uri,
    }
    commit_outputs(results, schema=table_schema(cfg), output_uri=cfg.output, rejects_uri=cfg.rejects_uri, metadata=metadata, storage_options=opts)
    if cfg.overwrite:
        drop_old_versions(cfg, s3)
    t_end = time.perf_counter()
    bytes_written = _table_bytes(cfg.output, s3)
    return {
        "table": cfg.output,
        "rejects": cfg.rejects_uri,
        "kind": "images",
        "source_kind": planned.kind,
        "shape": [h, w, c],
        "labels": labels,
        "chunks": len(planned.chunks),
        "sources": len(planned.sources),
        **{k: plain[k] for k in ("rows_read", "rows_written", "rows_rejected", "files_rejected", "decoded_with_pil")},
        "formats": formats,
        "bytes_written": bytes_written,
        "bytes_per_image": round(bytes_written / plain["rows_written"]) if plain["rows_written"] else 0,
        "images_per_s": round(plain["rows_read"] / (t_end - t_run), 1) if t_end > t_run else 0.0,
        "seconds": {"ray_init": round(ray_seconds, 2), "job": round(t_end - t_run, 2), "total": round(t_end - t0, 2)},
        "counts": plain,
    }


def _table_bytes(uri: str, s3: storage.S3Options) -> int:
    """Bytes under the table's directory (data files of the committed version after ``overwrite``)."""
    fs, path = storage.filesystem(uri, s3)
    try:
        return int(sum(info.get("size") or 0 for info in fs.find(path, detail=True).values()))
    except (OSError, FileNotFoundError):
        return 0


def format_summary(summary: dict[str, Any]) -> str:
    """A few lines a person reads after a run (also what docs/images.md shows)."""
    s = summary
    h, w, c = s["shape"]
    formats = ", ".join(f"{k} {v:,}" for k, v in s["formats"].items()) or "none"
    lines = [
        f"wrote {s['table']} (images {h}x{w}x{c}, {s['source_kind']}, {len(s['labels'])} classes)",
        f"  images: read {s['rows_read']:,} = written {s['rows_written']:,} + rejected {s['rows_rejected']:,}"
        + (f" ({s['files_rejected']} unreadable containers)" if s["files_rejected"] else ""),
        f"  formats: {formats}" + (f"; {s['decoded_with_pil']:,} decoded by the Pillow fallback" if s["decoded_with_pil"] else ""),
        f"  size: {s['bytes_written']:,} bytes ({s['bytes_per_image']:,} per image)",
        f"  rejects: {s['rejects']}",
        f"  time: {s['seconds']['total']}s (ray start {s['seconds']['ray_init']}s, job {s['seconds']['job']}s, "
        f"{s['images_per_s']:,} images/s) over {s['chunks']} chunks",
    ]
    return "\n".join(lines)
