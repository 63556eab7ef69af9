"""Builders for the reader tests: real tokenized GSM8K rows and materialized outputs
written directly in the documented layout (docs/architecture.md, "Materialized epochs")."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from prep.contracts.table import METADATA_KEY, TABLE_FORMAT, TableMetadata
from prep.contracts.manifest import Epoch, Manifest, Source, SplitFile, split_path
from prep.io.materialized import write_manifest
from prep.plan import split_rows
from prep.plan.spec import PlanSpec

SHARED_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
TOKENIZER_DIR = SHARED_DATA / "tokenizers" / "mistral-v3"
GSM8K = SHARED_DATA / "gsm8k" / "train.jsonl"


@functools.lru_cache(maxsize=4)
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


def row_ids(n: int, salt: int = 0) -> np.ndarray:
    """Distinct, scattered uint64 ids (like the pipeline's hashed ids)."""
    x = np.arange(n, dtype=np.uint64) + np.uint64(salt) * np.uint64(1 << 32)
    return (x * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0x5DEECE66D)


def sft_metadata(num_rows: int, tokens: int) -> dict:
    tok = tokenizer()
    return {
        "format": TABLE_FORMAT, "prep_version": "0.1.0", "kind": "sft", "config": {}, "config_hash": "0" * 64,
        "tokenizer": {"name": "mistral-v3", "hash": "test", "vocab_size": len(tok), "eos_id": tok.eos_token_id,
                      "bos_id": tok.bos_token_id, "pad_id": tok.pad_token_id},
        "seq_len": None, "sources": [{"uri": str(GSM8K), "size": 0, "mtime": ""}],
        "counts": {"rows_read": num_rows, "rows_written": num_rows, "rows_rejected": 0, "tokens": tokens},
        "rejects_uri": "",
    }


@functools.lru_cache(maxsize=4)
def gsm8k_sft(num_rows: int) -> pa.Table:
    """``num_rows`` real GSM8K rows tokenized with mistral-v3: prompt masked, answer + eos trained."""
    with open(GSM8K) as f:
        docs = [json.loads(line) for _, line in zip(range(num_rows), f)]
    tok = tokenizer()
    q = tok([d["question"] for d in docs])["input_ids"]
    a = tok([d["answer"] for d in docs], add_special_tokens=False)["input_ids"]
    rows = [np.array(p + r + [tok.eos_token_id], np.int32) for p, r in zip(q, a)]
    masks = [np.r_[np.zeros(len(p), np.int8), np.ones(len(r) + 1, np.int8)] for p, r in zip(q, a)]
    lengths = np.array([len(r) for r in rows], np.int32)
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    return pa.table({
        "id": pa.array(row_ids(len(rows))),
        "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(rows))),
        "loss_mask": pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(masks))),
        "length": pa.array(lengths),
    })


def write_table(uri: str, table: pa.Table, metadata: dict) -> None:
    import lance

    meta = {**(table.schema.metadata or {}), METADATA_KEY: json.dumps(metadata, sort_keys=True)}
    lance.write_dataset(table.replace_schema_metadata(meta), uri, mode="create")


def write_materialized(out: str, table: pa.Table, metadata: dict, *, num_splits: int, epochs: int,
                       strategy: str = "random", seed: int = 0, source_uri: str = "prepared.lance",
                       source_version: int = 1) -> Manifest:
    """Materializes ``table`` under ``out`` with ``prep.plan.split_rows``; returns the manifest."""
    plan = PlanSpec(num_splits=num_splits, strategy=strategy, seed=seed)
    entries = []
    for epoch in range(epochs):
        splits = []
        for split in range(num_splits):
            rows = split_rows(num_rows=table.num_rows, split=split, epoch=epoch, **plan.split_args())
            rel = split_path(epoch, split)
            write_table(os.path.join(out, rel), table.take(rows), metadata)
            digest = hashlib.sha256(np.ascontiguousarray(rows).tobytes()).hexdigest()
            splits.append(SplitFile(split=split, path=rel, num_rows=int(len(rows)), checksum=digest))
        entries.append(Epoch(epoch=epoch, splits=tuple(splits)))
    manifest = Manifest(
        prep_version="0.1.0", fingerprint=plan.fingerprint(source_uri, source_version),
        source=Source(uri=source_uri, version=source_version, num_rows=table.num_rows,
                      metadata=TableMetadata.from_json(metadata, source_uri)),
        plan=plan, num_selected_rows=table.num_rows, columns=tuple(table.column_names), epochs=tuple(entries),
    )
    write_manifest(out, manifest)
    return manifest


def sft_output(out: str, *, num_rows: int, num_splits: int, epochs: int, seed: int = 0) -> Manifest:
    table = gsm8k_sft(num_rows)
    meta = sft_metadata(num_rows, int(np.asarray(table.column("length")).sum()))
    return write_materialized(out, table, meta, num_splits=num_splits, epochs=epochs, seed=seed)


def expected_steps(out: str, manifest: Manifest, *, global_batch_size: int, epoch: int) -> list[np.ndarray]:
    """Global batch ids per step read straight from the split datasets (split order, b rows each)."""
    import lance

    b = global_batch_size // manifest.plan.num_splits
    ids = [lance.dataset(os.path.join(out, x.path)).to_table(columns=["id"]).column("id").to_numpy()
           for x in manifest.epoch(epoch).splits]
    steps = min(len(x) for x in ids) // b
    return [np.concatenate([x[t * b:(t + 1) * b] for x in ids]) for t in range(steps)]


_BUILT: dict[tuple, tuple[str, Manifest]] = {}


def cached_output(kind: str = "sft48") -> tuple[str, Manifest]:
    """A materialized output built once per test process (read-only: copy it before breaking it)."""
    import atexit
    import shutil
    import tempfile

    if kind not in _BUILT:
        base = tempfile.mkdtemp(prefix=f"prep-reader-{kind}-")
        atexit.register(shutil.rmtree, base, True)
        out = os.path.join(base, "out")
        if kind == "sft48":  # 48 splits of 12-13 rows, 2 epochs: G=96 -> 6 steps an epoch
            manifest = sft_output(out, num_rows=600, num_splits=48, epochs=2)
        elif kind == "sft4":  # 4 splits of 10 rows, 1 epoch
            manifest = sft_output(out, num_rows=40, num_splits=4, epochs=1)
        elif kind == "sft4x2":  # 4 splits of 3 rows, 2 epochs: G=4 -> 3 steps an epoch (the trainer examples)
            manifest = sft_output(out, num_rows=12, num_splits=4, epochs=2)
        elif kind == "sft4-long":  # 4 splits of 1,000 rows, 2 epochs: G=4 -> 1,000 steps an epoch
            manifest = sft_output(out, num_rows=4000, num_splits=4, epochs=2)
        elif kind == "sft4-seed1":  # the same rows under another plan
            manifest = sft_output(out, num_rows=40, num_splits=4, epochs=1, seed=1)
        else:
            raise ValueError(kind)
        _BUILT[kind] = (out, manifest)
    return _BUILT[kind]


def packed_table(num_rows: int, seq_len: int, pad_id: int) -> tuple[pa.Table, dict]:
    """Real GSM8K tokens packed greedily into rows of ``seq_len`` (position ids restart per document)."""
    src = gsm8k_sft(200)
    tokens = np.asarray(src.column("input_ids").combine_chunks().values)
    lm = np.asarray(src.column("loss_mask").combine_chunks().values)
    lengths = np.asarray(src.column("length"))
    pos = np.concatenate([np.arange(n) for n in lengths]).astype(np.int32)
    rows = num_rows * seq_len
    reps = -(-rows // len(tokens))
    tokens, lm, pos = (np.tile(x, reps)[:rows].reshape(num_rows, seq_len) for x in (tokens, lm, pos))
    length = np.full(num_rows, seq_len, np.int32)
    length[::3] = seq_len - 5  # some rows end in padding
    pad = np.arange(seq_len) >= length[:, None]
    tokens, lm, pos = np.where(pad, pad_id, tokens), np.where(pad, 0, lm).astype(np.int8), np.where(pad, 0, pos)
    fsl = lambda a, t: pa.FixedSizeListArray.from_arrays(pa.array(a.ravel(), t), seq_len)  # noqa: E731
    table = pa.table({"id": pa.array(row_ids(num_rows, salt=7)), "input_ids": fsl(tokens.astype(np.int32), pa.int32()),
                      "loss_mask": fsl(lm, pa.int8()), "position_ids": fsl(pos.astype(np.int32), pa.int32()),
                      "length": pa.array(length)})
    meta = {**sft_metadata(num_rows, int(length.sum())), "kind": "packed", "seq_len": seq_len}
    return table, meta


def image_table(num_rows: int, shape: tuple[int, int, int]) -> tuple[pa.Table, dict]:
    """Random uint8 images with labels (the collate path does not care where pixels came from)."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (num_rows, int(np.prod(shape))), dtype=np.uint8)
    table = pa.table({"id": pa.array(row_ids(num_rows, salt=9)),
                      "image": pa.FixedSizeListArray.from_arrays(pa.array(pixels.ravel()), pixels.shape[1]),
                      "label": pa.array(np.arange(num_rows, dtype=np.int32) % 2),
                      "label_name": pa.array(["ants", "bees"] * (num_rows // 2)), "source": pa.array(["x"] * num_rows)})
    meta = {"format": TABLE_FORMAT, "kind": "images", "image": {"shape": list(shape), "layout": "HWC", "dtype": "uint8"},
            "labels": ["ants", "bees"], "counts": {"rows_written": num_rows}}
    return table, meta
