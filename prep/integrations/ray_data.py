"""prep inside a Ray Data pipeline: tokenize or decode in ``map_batches``, write a prep table, read one back.

::

    ds = ray.data.read_parquet("s3://lake/chat/")            # any source, any steps of the user's
    ds = ds.map_batches(Tokenize, fn_constructor_kwargs=dict(tokenizer="...", format="sft"),
                        concurrency=1, batch_format="pyarrow")
    summary = write_table(ds, "s3://prep/chat.lance")        # a prep table + its rejects, counts reconciled
    table = read_table("s3://prep/chat.lance")               # a ray.data.Dataset of the committed table

:class:`Tokenize` and :class:`DecodeImages` run prep's own chunk workers
(:class:`~prep.prepare.text.pretokenize.TextChunkWorker`, :class:`~prep.prepare.images.worker.ImageChunkWorker`)
on each batch, so a row comes out as ``prep pretokenize``/``prep decode-images`` would make it;
a row that fails is a reject in the output (never an exception that ends the pipeline). With
``isolate=True`` (the default for images) each batch runs in prep's sandbox
(:mod:`prep.prepare.isolation`): an item that crashes or hangs the decoder is one reject after a
bounded number of tries, and the Ray actor itself never dies of it.

Ids (uint64) are ``stable_ids("prep.ray_data", p)`` (:mod:`prep.prepare.ids`), where ``p`` is the
``id_column`` value when it is an integer in [0, 2**62), else the 62-bit hash of its text; without
``id_column``: the hash of the row (text: its JSON with sorted keys; images: the ``path_column``
value when the batch has one, else the image bytes). So a row keeps its id on every run, whatever
the batching and parallelism; identical rows without ``id_column`` share an id. The pieces of a
split row (``overlong="split"``) get salted ids, as in ``prep pretokenize``.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from prep.errors import PrepError
from prep.integrations.ray_table import RAY_INPUT, read_table, with_rejects, write_table
from prep.prepare.ids import key_hash
from prep.prepare.isolation import NO_PROGRESS, Limits, Progress, dumps, hooks_from_env, run_isolated
from prep.prepare.rejects import Reject
from prep.runtime.config import load_config, merge

__all__ = ["Tokenize", "DecodeImages", "write_table", "read_table", "ID_KEY"]

ID_KEY = "prep.ray_data"
_MASK = (1 << 62) - 1
# Keys of a prepare command that write_table decides (or that say which files to list): refused here.
_NOT_HERE = {"input": "the pipeline reads the rows", "output": "write_table(ds, output)", "rejects": "write_table(rejects=)",
             "overwrite": "write_table(mode='overwrite')", "append": "write_table(mode='append')", "update": "write_table(mode='append')",
             "executor": "Ray Data runs it", "ray": "Ray Data runs it", "ray_address": "ray.init()", "ray_resources": "map_batches(resources=)",
             "max_reject_fraction": "write_table(max_reject_fraction=)", "source": "the pipeline reads the images"}


def _config(model: type, what: str, config: str | Path | None, keys: dict[str, Any], named: dict[str, Any]) -> Any:
    """The job's config as the prepare command would load it, with the keys write_table owns refused."""
    for key, where in _NOT_HERE.items():
        if keys.get(key) is not None and keys.get(key) is not False:
            raise PrepError(f"{what}: {key}= is not a {what} keyword ({where}); see docs/guide.md, \"Ray Data pipelines\"")
    cfg = load_config(model, config, **merge({**keys, "input": RAY_INPUT, "output": RAY_INPUT}, named))
    if getattr(cfg, "pack", None):
        raise PrepError(f"{what}: pack= is not available in a Ray Data pipeline (prep pretokenize packs the rows of a chunk; "
                        "a Ray Data batch is not one): write the unpacked table, or run prep pretokenize with pack")
    return cfg


def _row_hash(text: str | bytes) -> int:
    return key_hash(text if isinstance(text, str) else hashlib.blake2b(text, digest_size=16).hexdigest()) & _MASK


def _id_positions(batch: pa.Table, id_column: str | None, fallback: Callable[[int], str | bytes]) -> tuple[np.ndarray, list[str]]:
    """Each row's id position (module docstring) and its position label for a reject."""
    n = batch.num_rows
    if id_column is None:
        keys = [_row_hash(fallback(i)) for i in range(n)]
        return np.asarray(keys, np.int64), [f"row {k:016x}" for k in keys]
    if id_column not in batch.column_names:
        raise PrepError(f"id_column={id_column!r} is not a column of the batch (columns: {batch.column_names[:10]})")
    values = batch.column(id_column).to_pylist()
    keys = [v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MASK else
            _row_hash(fallback(i)) if v is None else _row_hash(str(v)) for i, v in enumerate(values)]
    return np.asarray(keys, np.int64), [f"{id_column} {v}" for v in values]


@dataclass(frozen=True)
class _Isolation:
    """Runs a batch in this actor thread's sandbox: crashes and hangs become rejects within ``limits``."""

    limits: Limits
    worker: bytes
    hooks: dict[str, str]

    def run(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        result, _restarts = run_isolated(fn, {"worker": self.worker, **kwargs}, self.limits, self.hooks)
        return result


_LOADED: dict[bytes, Any] = {}  # the sandbox's workers, by digest: unpickled (a tokenizer rebuilt) once per process


def _loaded(worker: Any) -> Any:
    if not isinstance(worker, bytes):
        return worker
    digest = hashlib.blake2b(worker, digest_size=16).digest()
    if digest not in _LOADED:
        _LOADED[digest] = pickle.loads(worker)
    return _LOADED[digest]


def _tokenize(progress: Progress, *, worker: Any, records: Any, base: np.ndarray) -> tuple[pa.Table, np.ndarray, list[Reject]]:
    """The text chunk worker on one batch: its rows, which of them are a source row's first piece, its rejects."""
    from prep.prepare.text.pretokenize import piece_ids

    pieces: list[np.ndarray] = []

    def ids(positions: np.ndarray, piece: np.ndarray) -> np.ndarray:
        pieces.append(piece)
        return piece_ids(ID_KEY, base[positions], piece)

    out = _loaded(worker).encode(records, RAY_INPUT, ids, ID_KEY, progress)
    return out.table, (pieces[0] == 0) if pieces else np.ones(out.table.num_rows, bool), out.rejects


class Tokenize:
    """``ds.map_batches(Tokenize, fn_constructor_kwargs=dict(...), batch_format="pyarrow", concurrency=N)``.

    Keywords: those of :func:`prep.pretokenize` (``config=``, ``tokenizer``, ``format``, ``text_column``,
    ``messages_column``, ``max_length``, ``overlong`` and any config key such as ``sft=``,
    ``passthrough=``), except the ones :func:`write_table` owns (output, modes, the reject budget) and
    ``pack``; plus ``id_column`` (ids, module docstring) and ``isolate`` (run each batch in prep's
    sandbox: a row that crashes or hangs the tokenizer becomes a reject; ``item_timeout_s``,
    ``max_bad_items_per_chunk`` and ``max_task_retries`` bound it per batch).

    Each output batch holds the table's rows then the batch's rejects (the batch contract,
    :mod:`prep.integrations.ray_table`); keep ``batch_format="pyarrow"`` (token lists stay ``list<int32>``).
    """

    def __init__(self, *, config: str | Path | None = None, tokenizer: str | None = None, format: str | None = None,
                 text_column: str | None = None, messages_column: str | None = None, max_length: int | None = None,
                 overlong: str | None = None, id_column: str | None = None, isolate: bool = False, **keys: Any) -> None:
        from prep.prepare.text.pretokenize import PretokenizeConfig, TextChunkWorker, make_formatter
        from prep.prepare.text.tokenizer import resolve_tokenizer

        sft = {"messages_column": messages_column} if messages_column else None
        cfg = _config(PretokenizeConfig, "Tokenize", config, keys, dict(tokenizer=tokenizer, format=format, text_column=text_column,
                                                                       sft=sft, max_length=max_length, overlong=overlong))
        tok = resolve_tokenizer(cfg.tokenizer)
        self._worker = TextChunkWorker(cfg, tok, cfg.s3.options().resolved(), make_formatter(cfg, tok))
        self._meta = {"command": "pretokenize", "config": cfg.model_dump(mode="json", exclude={"s3"}),
                      "made_with": {"kind": cfg.kind, "tokenizer": tok.identity(), "seq_len": None}}
        self._id_column = id_column
        self._isolation = _Isolation(Limits.of(cfg), dumps(self._worker), hooks_from_env()) if isolate else None

    def __call__(self, batch: pa.Table) -> pa.Table:
        from prep.prepare.text.sources import Records

        rows = batch.to_pylist()
        base, where = _id_positions(batch, self._id_column, lambda i: json.dumps(rows[i], sort_keys=True, ensure_ascii=False, default=str))
        records = Records(rows, np.arange(len(rows), dtype=np.int64), where=where)
        if self._isolation is not None:
            table, first, rejects = self._isolation.run(_tokenize, records=records, base=base)
        else:
            table, first, rejects = _tokenize(NO_PROGRESS, worker=self._worker, records=records, base=base)
        return with_rejects(table, first, rejects, self._meta)


def _decode(progress: Progress, *, worker: Any, samples: list[Any]) -> tuple[pa.Table, np.ndarray, list[Reject]]:
    """The image chunk worker on one batch's samples: its rows, their source-row flags, its rejects."""
    out = _loaded(worker).decode(samples, progress)
    table = out.table.read_all()  # reading the stream completes its rejects and counts
    return table, np.ones(table.num_rows, bool), out.rejects


class DecodeImages:
    """``ds.map_batches(DecodeImages, fn_constructor_kwargs=dict(...), batch_format="pyarrow", concurrency=N)``.

    Keywords: those of :func:`prep.decode_images` (``config=``, ``size`` and any config key: ``channels``,
    ``resize``, ``encode``, ``labels``...) except the ones :func:`write_table` owns and ``source``;
    plus ``id_column`` and ``isolate`` (default True: a native decoder's crash or hang on one image is
    that image's reject, never a dead actor). Columns read: ``image_column`` (default ``image``, else
    ``bytes`` as ``ray.data.read_binary_files`` names it; raw bytes or a struct with ``bytes``),
    ``label_column`` (default ``label``; absent: unlabeled, -1) and ``path_column`` (default ``path``;
    absent: the rows' ``source`` is ``ray.data``). String labels need ``labels=[...]`` (class names in label order).
    """

    def __init__(self, *, config: str | Path | None = None, size: int | tuple[int, int] | None = None,
                 id_column: str | None = None, isolate: bool = True, **keys: Any) -> None:
        from prep.prepare.images.config import ImagesConfig
        from prep.prepare.images.job import image_keys
        from prep.prepare.images.labels import LabelMap
        from prep.prepare.images.worker import ImageChunkWorker

        cfg = _config(ImagesConfig, "DecodeImages", config, keys, dict(size=size))
        labels = LabelMap(tuple(cfg.labels) if cfg.labels else None)
        self._cfg = cfg
        self._worker = ImageChunkWorker(cfg, labels, cfg.s3.options().resolved())
        self._meta = {"command": "decode-images", "config": cfg.model_dump(mode="json", exclude={"s3"}),
                      "made_with": image_keys(cfg, tuple(labels.names or ()), RAY_INPUT)}
        self._id_column = id_column
        self._isolation = _Isolation(Limits.of(cfg), dumps(self._worker), hooks_from_env()) if isolate else None

    def _image_column(self, batch: pa.Table) -> str:
        name = self._cfg.image_column
        if name in batch.column_names:
            return name
        if "bytes" in batch.column_names:
            return "bytes"
        raise PrepError(f"DecodeImages: the batch has no image column {name!r} (nor 'bytes'); columns: {batch.column_names[:10]}: "
                        "pass image_column=")

    def __call__(self, batch: pa.Table) -> pa.Table:
        from prep.prepare.images.samples import Sample

        cfg = self._cfg
        images = batch.column(self._image_column(batch)).to_pylist()
        data = [v.get("bytes") if isinstance(v, dict) else v for v in images]
        paths = batch.column(cfg.path_column).to_pylist() if cfg.path_column in batch.column_names else None
        labels = batch.column(cfg.label_column).to_pylist() if cfg.label_column and cfg.label_column in batch.column_names else [None] * len(data)
        base, where = _id_positions(batch, self._id_column, lambda i: (paths[i] if paths and paths[i] else data[i] or b""))
        samples: list[Any] = []
        for i, value in enumerate(data):
            source = str(paths[i]) if paths and paths[i] else RAY_INPUT
            position = "image" if paths and paths[i] and self._id_column is None else where[i]
            if not isinstance(value, (bytes, bytearray)) or not value:
                samples.append(Reject(source, position, f"no image bytes in this row (got {type(value).__name__})"))
                continue
            samples.append(Sample(bytes(value), source, ID_KEY, int(base[i]), labels[i], source, position))
        if self._isolation is not None:
            table, first, rejects = self._isolation.run(_decode, samples=samples)
        else:
            table, first, rejects = _decode(NO_PROGRESS, worker=self._worker, samples=samples)
        return with_rejects(table, first, rejects, self._meta)
