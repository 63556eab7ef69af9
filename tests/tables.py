"""Builders for small, real prepared tables (the contract of docs/architecture.md).

- :func:`gsm8k_rows`: GSM8K tokenized with the real mistral-v3 tokenizer
  (prompt tokens masked), ``id`` a stable hash of the row position.
- :func:`write_prepared`: writes any such Arrow data as a prepared Lance table
  with ``prep`` metadata, through ``prep.io.lance_tables`` (fragments + one commit).
- :func:`gsm8k_table`: the GSM8K rows repeated with fresh ids, to any size
  (the benchmark uses ~1M rows), written in streaming batches.
- :func:`synthetic_table`: random token rows, no tokenizer needed.

Also used by ``benchmarks/materialize.py``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from prep.io import lance_tables
from prep.io.table_checksums import checksums_for
from prep.contracts.table import TABLE_FORMAT, TableMetadata
from prep.plan.permutation import mix64

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
GSM8K = SHARED_DATA / "gsm8k" / "train.jsonl"
TOKENIZER_DIR = SHARED_DATA / "tokenizers" / "mistral-v3"

SCHEMA = pa.schema(
    [
        ("id", pa.uint64()),
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("length", pa.int32()),
    ]
)


def have_real_data() -> bool:
    return GSM8K.is_file() and TOKENIZER_DIR.is_dir()


def ids_for(positions: np.ndarray, salt: int = 0) -> np.ndarray:
    """Stable uint64 ids for row positions (``salt`` makes repeated copies distinct)."""
    return mix64(np.asarray(positions, dtype=np.uint64) ^ mix64(np.array([salt + 0x5EED], dtype=np.uint64))[0])


def _rows(input_ids: list[np.ndarray], masks: list[np.ndarray], ids: np.ndarray) -> pa.Table:
    lengths = np.array([len(x) for x in input_ids], dtype=np.int32)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat_ids = np.concatenate(input_ids).astype(np.int32) if input_ids else np.zeros(0, np.int32)
    flat_mask = np.concatenate(masks).astype(np.int8) if masks else np.zeros(0, np.int8)
    return pa.table(
        [
            pa.array(ids, pa.uint64()),
            pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat_ids)),
            pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat_mask)),
            pa.array(lengths),
        ],
        schema=SCHEMA,
    )


@functools.lru_cache(maxsize=4)
def gsm8k_rows(limit: int | None = None) -> pa.Table:
    """GSM8K (first ``limit`` rows) tokenized with the real tokenizer: question masked, answer + eos trained."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    with open(GSM8K) as f:
        records = [json.loads(line) for _, line in zip(range(limit or 10**9), f)]
    q = tok([r["question"] + "\n" for r in records], add_special_tokens=False)["input_ids"]
    a = tok([r["answer"] for r in records], add_special_tokens=False)["input_ids"]
    bos, eos = tok.bos_token_id, tok.eos_token_id
    input_ids = [np.array([bos, *qi, *ai, eos], np.int32) for qi, ai in zip(q, a)]
    masks = [np.r_[np.zeros(1 + len(qi), np.int8), np.ones(len(ai) + 1, np.int8)] for qi, ai in zip(q, a)]
    return _rows(input_ids, masks, ids_for(np.arange(len(records))))


def metadata(kind: str = "sft", rows: int = 0, tokens: int = 0, **extra) -> dict:
    """``prep`` table metadata following docs/architecture.md."""
    return {
        "format": TABLE_FORMAT,
        "prep_version": "0.1.0",
        "kind": kind,
        "config": {"builder": "tests/tables.py"},
        "config_hash": "0" * 64,
        "tokenizer": {"name": "mistral-v3", "hash": "0" * 64, "vocab_size": 32768, "eos_id": 2, "bos_id": 1, "pad_id": 0},
        "seq_len": None,
        "sources": [{"uri": str(GSM8K), "size": 0, "mtime": ""}],
        "counts": {"rows_read": rows, "rows_written": rows, "rows_rejected": 0, "tokens": tokens},
        "rejects_uri": "",
        **extra,
    }


def write_prepared(
    uri: str,
    data: pa.Table | Iterator[pa.RecordBatch],
    *,
    schema: pa.Schema = SCHEMA,
    fragment_rows: int = 1 << 20,
    storage_options: dict | None = None,
    kind: str = "sft",
) -> str:
    """Writes ``data`` as a prepared table at ``uri`` (fragments, then one commit)."""
    if isinstance(data, pa.Table):
        schema = data.schema
        reader = pa.RecordBatchReader.from_batches(schema, data.to_batches())
    else:
        reader = pa.RecordBatchReader.from_batches(schema, data)
    counted = {"rows": 0, "tokens": 0}

    def counting() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            counted["rows"] += batch.num_rows
            if "length" in batch.schema.names:
                counted["tokens"] += int(np.asarray(batch.column("length")).sum())
            yield batch

    frags = lance_tables.write_fragments(
        pa.RecordBatchReader.from_batches(schema, counting()), uri, storage_options=storage_options, max_rows_per_file=fragment_rows
    )
    lance_tables.commit_table(
        uri, schema, frags, metadata=TableMetadata.from_json(metadata(kind, counted["rows"], counted["tokens"]), uri), storage_options=storage_options,
        checksums=checksums_for(uri, frags, None),  # as prep's writers do: the S3 endpoint of the environment
    )
    return uri


def gsm8k_table(uri: str, *, num_rows: int, base: int | None = None, fragment_rows: int = 1 << 20, batch_rows: int = 8192) -> str:
    """``num_rows`` rows: GSM8K (its first ``base`` rows) repeated, each copy with fresh ids."""
    rows = gsm8k_rows(base)

    def batches() -> Iterator[pa.RecordBatch]:
        done = 0
        while done < num_rows:
            copy, start = divmod(done, rows.num_rows)
            take = min(batch_rows, rows.num_rows - start, num_rows - done)
            piece = rows.slice(start, take)
            ids = ids_for(np.arange(start, start + take), salt=copy)
            yield from piece.set_column(0, "id", pa.array(ids, pa.uint64())).to_batches()
            done += take

    return write_prepared(uri, batches(), fragment_rows=fragment_rows)


def synthetic_table(
    uri: str,
    *,
    num_rows: int,
    seed: int = 0,
    min_len: int = 20,
    max_len: int = 300,
    fragment_rows: int = 1 << 20,
    batch_rows: int = 8192,
    storage_options: dict | None = None,
) -> str:
    """``num_rows`` rows of random tokens (lengths uniform in [min_len, max_len])."""
    rng = np.random.default_rng(seed)

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, num_rows, batch_rows):
            n = min(batch_rows, num_rows - start)
            lengths = rng.integers(min_len, max_len + 1, n)
            tokens = rng.integers(3, 32768, int(lengths.sum()), dtype=np.int32)
            bounds = np.cumsum(lengths)[:-1]
            masks = [np.ones(k, np.int8) for k in lengths]
            yield from _rows(np.split(tokens, bounds), masks, ids_for(np.arange(start, start + n), salt=seed)).to_batches()

    return write_prepared(uri, batches(), fragment_rows=fragment_rows, storage_options=storage_options)


def kill_midway(prep_args: list[str], out: Path, env: dict[str, str] | None = None, records: int = 2) -> None:
    """Runs ``prep *prep_args`` and SIGKILLs its process group once ``records`` split done-records exist under ``out``.

    The 120 s watchdog only keeps a broken run from hanging the suite.
    """
    import glob
    import os
    import signal
    import subprocess
    import sys
    import time

    import pytest

    proc = subprocess.Popen([str(Path(sys.executable).parent / "prep"), *prep_args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    try:
        while len(glob.glob(f"{out}/epoch-*/*.done.json")) < records:
            if proc.poll() is not None:
                pytest.fail(f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}")
            if time.time() > deadline:
                pytest.fail(f"the run wrote fewer than {records} done records in 120 s")
            time.sleep(0.002)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def flip_bytes(path: str | Path, count: int = 10) -> None:
    """Flips ``count`` bytes in the middle of the file at ``path``, keeping its size (damage a size check cannot see)."""
    data = bytearray(Path(path).read_bytes())
    at = len(data) // 2
    for i in range(at, min(at + count, len(data))):
        data[i] ^= 0xFF
    Path(path).write_bytes(bytes(data))


def same_output(a: str, b: str, manifest_a, manifest_b) -> None:
    """Two materialized outputs hold the same epochs: equal manifests (plan, counts, paths, checksums) and, split
    by split, the same ids in the same order."""
    import lance

    assert manifest_a == manifest_b  # same fingerprint, plan, counts, paths and checksums
    for entry in manifest_a.epochs:
        for s in entry.splits:
            ids = [lance.dataset(f"{d}/{s.path}").to_table(columns=["id"]).column("id").to_numpy() for d in (a, b)]
            assert np.array_equal(*ids), f"epoch {entry.epoch} split {s.split} differs"
