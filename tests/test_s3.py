"""Reading sources from and writing tables to s3:// on a real S3-compatible endpoint (moto_server)."""

import boto3
import lance
import pytest

from prep.io import storage
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize

pytestmark = [pytest.mark.s3, pytest.mark.usefixtures("ray_local")]


def test_pretokenize_reads_and_writes_s3(s3_env, s3_bucket, tokenizer_dir, shared_data):
    s3 = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    with open(shared_data / "gsm8k" / "train.jsonl", "rb") as f:
        body = b"".join(next(f) for _ in range(400))
    s3.put_object(Bucket=s3_bucket, Key="raw/gsm8k/part-0.jsonl", Body=body[: len(body) // 2 + body[len(body) // 2:].index(b"\n") + 1])
    s3.put_object(Bucket=s3_bucket, Key="raw/gsm8k/part-1.jsonl", Body=body[len(body) // 2 + body[len(body) // 2:].index(b"\n") + 1:])
    out = f"s3://{s3_bucket}/prepared/gsm8k.lance"
    cfg = PretokenizeConfig.model_validate(dict(
        input=f"s3://{s3_bucket}/raw/gsm8k/", output=out, tokenizer=tokenizer_dir, format="sft", chunk_bytes=32 << 10))
    s = run_pretokenize(cfg)
    assert s["sources"] == 2 and s["chunks"] > 2 and s["rows_written"] == 400
    ds = lance.dataset(out, storage_options=storage.lance_storage_options(out))
    assert ds.count_rows() == 400 and len(set(ds.to_table(columns=["id"])["id"].to_pylist())) == 400
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket, Prefix="prepared/")["Contents"]]
    assert any(k.startswith("prepared/gsm8k.lance/_versions/") for k in keys)
    assert any(k.startswith("prepared/gsm8k.rejects.lance/") for k in keys)
