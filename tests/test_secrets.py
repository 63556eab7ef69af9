"""Credentials never leak: not on stdout/stderr, in logs, in files or objects written (table metadata
included), nor in error messages, whether they come from the config file or the environment."""

from __future__ import annotations

import io
import logging
import uuid
from pathlib import Path

import boto3
import pytest

from conftest import REPO
from prep.io import storage
from prep.cli import main as cli_main

pytestmark = [pytest.mark.s3]


@pytest.fixture
def prep_logs():
    """Everything prep logs, at DEBUG."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    logger = logging.getLogger("prep")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield buf
    logger.removeHandler(handler)
    logger.setLevel(old)


def _written(root: Path, skip: set[Path]) -> dict[str, bytes]:
    """Every file under ``root`` but the user's own ``skip`` (the configs holding the secret)."""
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p not in skip}


def test_no_output_of_any_stage_holds_the_secret(s3_env, s3_bucket, shared_data, tokenizer_dir, tmp_path, monkeypatch,
                                                 capfd, prep_logs):
    secret, token = f"SeCrEtKeY{uuid.uuid4().hex}", f"SeSsIoNtOkEn{uuid.uuid4().hex}"
    src = tmp_path / "in.jsonl"
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        src.write_text("".join(next(f) for _ in range(30)))
    config = tmp_path / "job.yaml"
    config.write_text((REPO / "configs" / "gsm8k-sft.yaml").read_text() +
                      f"s3:\n  access_key_id: testing\n  secret_access_key: {secret}\n  session_token: {token}\n")
    bucket = f"s3://{s3_bucket}"
    run = ["--config", str(config), "--tokenizer", tokenizer_dir, "--input", str(src)]
    assert cli_main(["pretokenize", *run, "--output", f"{bucket}/t.lance"]) == 0
    assert cli_main(["pretokenize", *run, "--output", "s3://prep-no-such-bucket-x/t.lance"]) == 2  # an S3 error
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"input: x\noutput: y\ntokenizer: z\ns3:\n  secret_access_key: [{secret}]\n")
    assert cli_main(["pretokenize", "--config", str(bad)]) == 2  # a config error on the secret's own key
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    assert cli_main(["materialize-shuffle", "--table", f"{bucket}/t.lance", "--output", f"{bucket}/m", "--epochs", "1",
                     "--splits", "2"]) == 0
    assert cli_main(["prewarm", f"{bucket}/m", "--cache", str(tmp_path / "cache")]) == 0
    assert cli_main(["read", f"{bucket}/m", "--global-batch-size", "4", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert cli_main(["verify", f"{bucket}/m"]) == 0
    opts = storage.S3Options().resolved()
    assert opts.secret_access_key == secret and secret not in repr(opts) and token not in repr(opts)

    out, err = capfd.readouterr()
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    objects = b"".join(client.get_object(Bucket=s3_bucket, Key=k)["Body"].read() for k in keys)
    assert any(k.startswith("t.lance/_versions/") for k in keys) and any(k.startswith("m/epoch-") for k in keys)
    assert "rows" in out and "prep-no-such-bucket-x" in err and "secret_access_key" in err
    files = _written(tmp_path, skip={config, bad})
    assert any("/cache/epoch-" in p for p in files)
    everything = {"stdout": out.encode(), "stderr": err.encode(), "logs": prep_logs.getvalue().encode(),
                  "objects": objects, **files}
    for value in (secret, token):
        leaked = [where for where, data in everything.items() if value.encode() in data]
        assert not leaked, f"{value[:8]}... found in {leaked}"
