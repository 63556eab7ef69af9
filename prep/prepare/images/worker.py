"""One chunk of images -> Arrow rows + rejects + counts. Runs inside a chunk's sandbox.

Per image (:func:`prep.prepare.images.row.image_row`): resolve the label, decode by
content, fit to the target size, lay out as HWC, optionally re-encode; anything raised
for one image rejects that image alone. Only failures that are not about one image
(reading the chunk, writing) fail the chunk. The rows of a chunk are gathered into one
contiguous buffer and handed to Arrow as a ``fixed_size_list<uint8>`` without a per-row copy.

The driver builds the worker and its schema but never runs it, so this module imports
neither torch nor the decoders (~4 CPU-s in every driver); the sandbox does, in ``row``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

from prep.contracts.counts import FORMAT_PREFIX
from prep.io import storage
from prep.prepare.ids import stable_ids
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.labels import LabelMap
from prep.prepare.images.samples import Sample
from prep.prepare.images.sources import read_chunk
from prep.prepare.isolation import NO_PROGRESS, Progress
from prep.prepare.chunk_runner import ChunkOutput
from prep.prepare.rejects import Reject

if TYPE_CHECKING:
    from prep.prepare.images.row import ImageRow

__all__ = ["ImageChunkWorker", "table_schema", "BLOB_METADATA", "RAW_METADATA"]

BLOB_METADATA = {b"lance-encoding:blob": b"true"}
# Decoded pixels and JPEG/WebP bytes do not shrink under Lance's general-purpose
# compression (measured: same bytes on the photos), and trying costs about half of the
# write time: store them as they are.
RAW_METADATA = {b"lance-encoding:compression": b"none"}


def table_schema(cfg: ImagesConfig) -> pa.Schema:
    """The prepared image table's Arrow schema for ``cfg`` (docs/architecture.md)."""
    h, w, c = cfg.shape
    fields = [pa.field("id", pa.uint64())]
    if cfg.store_pixels:
        fields.append(pa.field("image", pa.list_(pa.uint8(), h * w * c), metadata=RAW_METADATA))
    fields += [pa.field("label", pa.int32()), pa.field("label_name", pa.string()), pa.field("source", pa.string())]
    if cfg.encode != "none":
        fields.append(pa.field("encoded", pa.binary(), metadata=RAW_METADATA))
    if cfg.keep_original:
        fields.append(pa.field("original", pa.large_binary(), metadata=BLOB_METADATA))
    return pa.schema(fields)


def _ids(keys: list[str], positions: list[int]) -> np.ndarray:
    """``stable_ids`` row by row, one vectorized call per distinct key (one per chunk, usually)."""
    out = np.empty(len(keys), np.uint64)
    pos = np.array(positions, dtype=np.uint64)
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    for key, rows in groups.items():
        out[rows] = stable_ids(key, pos[rows])
    return out


def _source(item: Any) -> str:
    return item.source


@dataclass(frozen=True)
class ImageChunkWorker:
    """Decodes one chunk. Picklable: the driver builds it, Ray ships it to every task.

    Args:
        cfg: the job config.
        labels: the label mapping the driver fixed for the whole job.
        s3: S3 options resolved by the driver (cluster workers do not share its environment).
    """

    cfg: ImagesConfig
    labels: LabelMap
    s3: storage.S3Options

    def __call__(self, chunk: Any, progress: Progress = NO_PROGRESS) -> ChunkOutput:
        """The chunk's rows as a stream of record batches: a task holds one batch of pixels
        at a time, not the whole chunk. ``rejects`` and ``counts`` are complete once the
        stream has been read (the writer reads it before it looks at them)."""
        return self.decode(read_chunk(chunk, self.cfg, self.s3), progress)

    def decode(self, items: Iterable[Sample | Reject], progress: Progress = NO_PROGRESS) -> ChunkOutput:
        """``items`` (a chunk's, or a Ray Data batch's) as :meth:`__call__` returns them."""
        counts: Counter = Counter()
        rejects: list[Reject] = []
        schema = table_schema(self.cfg)
        batches = self._batches(items, progress, schema, rejects, counts)
        return ChunkOutput(pa.RecordBatchReader.from_batches(schema, batches), rejects, counts)

    def _batches(self, items: Iterable[Sample | Reject], progress: Progress, schema: pa.Schema, rejects: list[Reject],
                 counts: Counter) -> Iterator[pa.RecordBatch]:
        from prep.prepare.images.row import image_row  # torch and the decoders: only where images are decoded
        from prep.prepare.images.transform import Fit

        cfg = self.cfg
        fit_ = Fit(*cfg.shape[:2], cfg.resize, cfg.interpolation, cfg.antialias, cfg.pad_value)
        rows = _Rows(cfg)
        for item, poison in progress.items(items, name=_source):
            if isinstance(item, Reject):
                rejects.append(item)
                counts["rows_read" if item.is_row else "files_rejected"] += 1
                counts["rows_rejected"] += item.is_row
                continue
            counts["rows_read"] += 1
            counts["bytes_read"] += len(item.data)
            row = image_row(item, poison, cfg, self.labels, fit_)
            if isinstance(row, str):
                rejects.append(Reject(item.reject_source, item.position, row, repr(item.data[:48])))
                counts["rows_rejected"] += 1
                continue
            counts[FORMAT_PREFIX + row.format] += 1
            counts["decoded_with_pil"] += row.via_pil
            counts["animated_first_frame_kept"] += row.frames > 1
            rows.add(row)
            counts["rows_accepted"] += 1
            if len(rows) == _BATCH_ROWS:
                with progress.idle():  # the writer's time is not this image's
                    yield rows.flush(schema, counts)
        if len(rows):
            yield rows.flush(schema, counts)

_BATCH_ROWS = 64  # images per record batch: bounds a task's memory (64 x 224x224x3 = 9.6 MB of pixels)


class _Rows:
    """The columns of the rows not yet flushed as a record batch."""

    def __init__(self, cfg: ImagesConfig) -> None:
        self.cfg = cfg
        self._clear()

    def _clear(self) -> None:
        self.id_keys: list[str] = []
        self.id_pos: list[int] = []
        self.pixels: list[np.ndarray] = []
        self.labels: list[int] = []
        self.names: list[str] = []
        self.sources: list[str] = []
        self.encoded: list[bytes] = []
        self.originals: list[bytes] = []

    def __len__(self) -> int:
        return len(self.id_keys)

    def add(self, row: ImageRow) -> None:
        cfg, item = self.cfg, row.item
        self.id_keys.append(item.id_key)
        self.id_pos.append(item.id_pos)
        if cfg.store_pixels:
            self.pixels.append(row.hwc.reshape(-1))
        if cfg.encode != "none":
            self.encoded.append(row.encoded)
        if cfg.keep_original:
            self.originals.append(item.data)
        self.labels.append(row.label)
        self.names.append(row.name)
        self.sources.append(item.source)

    def flush(self, schema: pa.Schema, counts: Counter) -> pa.RecordBatch:
        """The pending rows as one record batch (counted as written), and a fresh start."""
        cfg = self.cfg
        h, w, c = cfg.shape
        columns: dict[str, Any] = {"id": pa.array(_ids(self.id_keys, self.id_pos), pa.uint64())}
        if cfg.store_pixels:
            columns["image"] = pa.FixedSizeListArray.from_arrays(pa.array(np.concatenate(self.pixels)), h * w * c)
        columns.update(label=pa.array(self.labels, pa.int32()), label_name=pa.array(self.names, pa.string()),
                       source=pa.array(self.sources, pa.string()))
        if cfg.encode != "none":
            columns["encoded"] = pa.array(self.encoded, pa.binary())
        if cfg.keep_original:
            columns["original"] = pa.array(self.originals, pa.large_binary())
        self._clear()
        batch = pa.RecordBatch.from_pydict(columns, schema=schema)
        counts["rows_written"] += batch.num_rows
        return batch
