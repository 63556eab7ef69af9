"""The decode-images job: image sources -> a Lance table of fixed-size pixel rows (+ rejects).

The same :func:`run_decode_images` runs under ``ray job submit`` (it joins the
cluster through ``RAY_ADDRESS``), from ``python pipelines/decode_images.py`` and
from ``prep decode-images`` (on this machine unless there is a cluster to join). It
is a :class:`~prep.prepare.driver.PrepareJob`: the one prepare driver plans, claims
the outputs, runs chunks, commits rejects then the table once, in chunk order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import version as _version  # the driver never imports torchvision (~4 CPU-s)
from typing import Any, ClassVar, Mapping

import pyarrow as pa

from prep.contracts.counts import Counts
from prep.contracts.images import DecoderInfo, EncodedInfo, ImageInfo, ImageTableInfo
from prep.io import storage
from prep.prepare.driver import ChunkPlan, run_prepare
from prep.prepare.summary import what_it_did, where_it_ran
from prep.prepare.growth import Prior
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.sources import plan
from prep.prepare.images.worker import ImageChunkWorker, table_schema

__all__ = ["ImagesJob", "image_keys", "run_decode_images", "format_summary"]

log = logging.getLogger(__name__)


def image_keys(cfg: ImagesConfig, labels: tuple[str, ...], source_kind: str,
               formats: Mapping[str, int] | None = None) -> dict[str, Any]:
    """An image table's ``made_with`` keys (:mod:`prep.contracts.images`), for the job and for Ray Data's
    :class:`~prep.integrations.ray_data.DecodeImages` alike; ``formats``: the input formats the workers counted."""
    images = ImageTableInfo(
        labels=labels, source_kind=source_kind,
        encoded=EncodedInfo(format=cfg.encode, quality=cfg.quality, shape=cfg.shape) if cfg.encode != "none" else None,
        decoder=DecoderInfo(library=f"torchvision {_version('torchvision')}", fallback="Pillow",
                            formats=dict(formats) if formats is not None else None))
    return {"kind": "images", "image": ImageInfo(shape=cfg.shape).to_json() if cfg.store_pixels else None, **images.to_json()}


@dataclass(frozen=True)
class ImagesJob:
    """The decode-images job for :func:`prep.prepare.driver.run_prepare`."""

    cfg: ImagesConfig
    name: str = "decode-images"
    sandbox_imports: ClassVar[tuple[str, ...]] = ("prep.prepare.images.row",)  # torch, torchvision, PIL: ~4 CPU-s

    def plan(self, s3: storage.S3Options, prior: Prior | None = None) -> ChunkPlan:
        planned = plan(self.cfg, s3, prior)
        return ChunkPlan(planned.chunks, planned.sources, {"labels": planned.labels, "source_kind": planned.kind},
                         chunk_sources=planned.chunk_sources, replaced=planned.replaced, unchanged=planned.unchanged,
                         file_index=planned.file_index, removed=planned.removed, moved=planned.moved, missing=planned.missing)

    def worker(self, plan: ChunkPlan, s3: storage.S3Options) -> ImageChunkWorker:
        return ImageChunkWorker(self.cfg, plan.details["labels"], s3)

    def schema(self) -> pa.Schema:
        return table_schema(self.cfg)

    def metadata(self, plan: ChunkPlan, counts: Counts) -> dict[str, Any]:
        """The image keys (:mod:`prep.contracts.images`); the formats the workers counted go to ``decoder``."""
        return image_keys(self.cfg, tuple(plan.details["labels"].names or ()), plan.details["source_kind"], counts.formats)

    def summary(self, plan: ChunkPlan, counts: Counts) -> dict[str, Any]:
        return {"source_kind": plan.details["source_kind"], "shape": list(self.cfg.shape),
                "labels": list(plan.details["labels"].names or []), "decoded_with_pil": counts.decoded_with_pil,
                "formats": dict(counts.formats), "counts": counts.without_formats().to_json()}


def run_decode_images(cfg: ImagesConfig) -> dict[str, Any]:
    """Runs the job; returns a summary (rows, rejects, bytes, paths, timings).

    Raises:
        PrepError: bad input paths or columns, an output prep may not replace,
            a failed chunk, or counts that do not reconcile.
    """
    summary = run_prepare(ImagesJob(cfg))
    bytes_written = _table_bytes(cfg.output, cfg.s3.options().resolved())
    rows = sum(h["rows_added"] - h["rows_removed"] for h in summary["history"])  # the table's, as bytes_written is
    job_seconds = summary["seconds"]["job"]
    summary.update(
        bytes_written=bytes_written,
        bytes_per_image=round(bytes_written / rows) if rows else 0,
        images_per_s=round(summary["rows_read"] / job_seconds, 1) if job_seconds else 0.0,
    )
    return summary


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
    grew = s["mode"] in ("append", "update")
    if grew and s["step"]["version"] is None:
        return "\n".join(what_it_did(s))
    h, w, c = s["shape"]
    formats = ", ".join(f"{k} {v:,}" for k, v in s["formats"].items()) or "none"
    lines = [
        f"  this step: images {h}x{w}x{c}, {s['source_kind']}, {len(s['labels'])} classes" if grew else
        f"wrote {s['table']} (images {h}x{w}x{c}, {s['source_kind']}, {len(s['labels'])} classes)",
        f"  images: read {s['rows_read']:,} = written {s['rows_written']:,} + rejected {s['rows_rejected']:,}"
        + (f" ({s['files_rejected']} unreadable containers)" if s["files_rejected"] else ""),
        f"  formats: {formats}" + (f"; {s['decoded_with_pil']:,} decoded by the Pillow fallback" if s["decoded_with_pil"] else ""),
        f"  size: {'the table now ' if grew else ''}{s['bytes_written']:,} bytes ({s['bytes_per_image']:,} per image)",
        f"  rejects: {s['rejects']}",
        f"  time: {s['seconds']['total']}s ({where_it_ran(s)}job {s['seconds']['job']}s, "
        f"{s['images_per_s']:,} images/s) over {s['chunks']} chunks",
    ]
    return "\n".join((what_it_did(s) if grew else []) + lines)
