"""Every stage, through a proxy that fails >= 10% of S3 requests, makes exactly the fault-free output.

The endpoint is the real moto_server of ``conftest``; :class:`fault_proxy.FaultProxy` sits in
front of it with a seeded schedule of 503 SlowDown, 500, connection resets, stalls past the
clients' timeout and truncated bodies. Each stage runs once straight against the endpoint and
once through the proxy; rows, checksums and batch ids must match (the reader: straight from
the remote, through a cold cache that its fetch stage fills, and from the cache prewarm filled). Inputs are tiny: the point
is the faults, not the volume.
"""

from __future__ import annotations

import boto3
import pytest

import tables
from conftest import HYMENOPTERA
from fault_proxy import KINDS, FaultProxy
from prep.io import storage
from prep.errors import PrepError
from prep.contracts.manifest import Manifest
from prep.materialize import materialize_shuffle
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.job import run_decode_images
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize
from prep.cache.prewarm import prewarm
from prep.reader import ReaderDataset
from prep.io.retry import RetryPolicy
from prep.io.checksum import dataset_checksum

pytestmark = [pytest.mark.s3]

RATE = 0.15
# Every kind of fault, stalls rarer (each costs a timeout): about 2 of every 20 faults.
SCHEDULE = ("slowdown", "error", "reset", "truncate") * 2 + ("stall",)
# Short timeouts and backoffs: a stalled request is dropped after 0.5 s and retried at once.
FAST = {"read_timeout_s": 0.5, "connect_timeout_s": 1.0, "base_s": 0.02, "cap_s": 0.3, "max_attempts": 10}
STALL_S = 0.8


def _opts(endpoint: str) -> storage.S3Options:
    return storage.S3Options(endpoint_url=endpoint, retry=RetryPolicy(**FAST))


def _checksum(uri: str, endpoint: str) -> tuple[int, str]:
    return dataset_checksum(uri, storage.lance_storage_options(uri, _opts(endpoint)))


@pytest.fixture(scope="module")
def inputs(s3_env, tmp_path_factory, shared_data) -> dict[str, str]:
    """A bucket with 120 GSM8K rows in two files, 8 images in two classes and a small prepared table."""
    import uuid

    bucket = f"prep-faults-{uuid.uuid4().hex[:10]}"
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    with open(shared_data / "gsm8k" / "train.jsonl", "rb") as f:
        lines = [next(f) for _ in range(120)]
    client.put_object(Bucket=bucket, Key="raw/text/a.jsonl", Body=b"".join(lines[:60]))
    client.put_object(Bucket=bucket, Key="raw/text/b.jsonl", Body=b"".join(lines[60:]))
    for cls in ("ants", "bees"):
        for p in sorted((HYMENOPTERA / cls).iterdir())[:4]:
            client.upload_file(str(p), bucket, f"raw/images/{cls}/{p.name}")
    table = f"s3://{bucket}/tables/synthetic.lance"
    tables.synthetic_table(table, num_rows=400, max_len=24, storage_options=storage.lance_storage_options(table))
    return {"bucket": f"s3://{bucket}", "endpoint": s3_env["AWS_ENDPOINT_URL"], "table": table}


def _pretokenize(inputs, endpoint: str, name: str, tokenizer_dir: str) -> str:
    out = f"{inputs['bucket']}/out/{name}.lance"
    cfg = PretokenizeConfig.model_validate(dict(
        input=f"{inputs['bucket']}/raw/text/", output=out, tokenizer=tokenizer_dir, format="sft", chunk_bytes=16 << 10,
        s3={"endpoint_url": endpoint, "retry": FAST}))
    assert run_pretokenize(cfg)["rows_written"] == 120
    return out


def _decode(inputs, endpoint: str, name: str) -> str:
    out = f"{inputs['bucket']}/out/{name}.lance"
    cfg = ImagesConfig.model_validate(dict(
        input=f"{inputs['bucket']}/raw/images", output=out, source="imagefolder", size=32, images_per_chunk=3,
        s3={"endpoint_url": endpoint, "retry": FAST}))
    run_decode_images(cfg)
    return out


def _materialize(inputs, endpoint: str, name: str) -> Manifest:
    return materialize_shuffle(table=inputs["table"], output=f"{inputs['bucket']}/out/{name}", epochs=2, splits=4,
                               read_rows=64, s3=_opts(endpoint))


def _epoch_ids(path: str, endpoint: str, **cache) -> list[list[int]]:
    ds = ReaderDataset(path, global_batch_size=16, s3=_opts(endpoint), **cache)
    return [[int(i) for i in batch.ids] for batch in ds]


@pytest.mark.slow
def test_every_stage_through_faults_makes_the_fault_free_output(inputs, tokenizer_dir, tmp_path):
    up = inputs["endpoint"]
    clean = {
        "pretokenize": _checksum(_pretokenize(inputs, up, "text-clean", tokenizer_dir), up),
        "decode": _checksum(_decode(inputs, up, "images-clean"), up),
    }
    manifest = _materialize(inputs, up, "shuffled-clean")
    clean_epochs = _epoch_ids(f"{inputs['bucket']}/out/shuffled-clean", up)
    with FaultProxy(up, rate=RATE, kinds=SCHEDULE, seed=11, stall_s=STALL_S) as proxy:
        faulty = {
            "pretokenize": _checksum(_pretokenize(inputs, proxy.url, "text-faulty", tokenizer_dir), up),
            "decode": _checksum(_decode(inputs, proxy.url, "images-faulty"), up),
        }
        faulty_manifest = _materialize(inputs, proxy.url, "shuffled-faulty")
        summary = prewarm(f"{inputs['bucket']}/out/shuffled-faulty", cache=str(tmp_path / "cache"), rank=0,
                          world_size=1, s3=_opts(proxy.url))
        faulty_epochs = _epoch_ids(f"{inputs['bucket']}/out/shuffled-faulty", proxy.url)
        cold_cache = _epoch_ids(f"{inputs['bucket']}/out/shuffled-faulty", proxy.url, cache_dir=str(tmp_path / "rc"))
        prewarmed = _epoch_ids(f"{inputs['bucket']}/out/shuffled-faulty", proxy.url, cache_dir=str(tmp_path / "cache"))
    assert faulty == clean and clean["pretokenize"][0] == 120 and clean["decode"][0] == 8
    splits = lambda m: [(e.epoch, s.split, s.num_rows, s.checksum) for e in m.epochs for s in e.splits]
    assert splits(faulty_manifest) == splits(manifest) and len(splits(manifest)) == 8
    assert summary["copied"] == 8 and summary["retries"] > 0  # prewarm's own retries, counted
    assert faulty_epochs == cold_cache == prewarmed == clean_epochs and sum(map(len, clean_epochs)) == 2 * 400 // 16 * 16
    assert proxy.fault_fraction >= 0.10, (proxy.requests, dict(proxy.faults))
    assert set(proxy.faults) == set(KINDS), dict(proxy.faults)


def test_an_object_that_always_fails_is_named_in_the_error(inputs, tmp_path):
    up = inputs["endpoint"]
    _materialize(inputs, up, "shuffled-deny")
    target = "out/shuffled-deny/epoch-00001/split-00002.lance"
    with FaultProxy(up, deny=target, deny_kind="slowdown") as proxy:
        with pytest.raises(PrepError, match="split-00002"):
            prewarm(f"{inputs['bucket']}/out/shuffled-deny", cache=str(tmp_path / "cache"), rank=0, world_size=1,
                    s3=_opts(proxy.url))
    assert proxy.faults["slowdown"] >= FAST["max_attempts"]
