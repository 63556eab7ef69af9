"""A real two-node Ray cluster on this machine: every task pinned to the second node, data on S3.

The file's Ray head (``conftest.ray_head``) is joined by a second node (``ray start
--address``, its own temp dir and ports) that alone offers the custom resource
``prep_node2``; pretokenize and materialize-shuffle run as CLI drivers with
``--ray-resources '{"prep_node2": 1}'``, so Ray may place their tasks nowhere else.
Inputs and outputs are on the S3 endpoint: a task that needed a file only the driver
can see would fail. The node is stopped by its process group.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import boto3
import pytest

from conftest import REPO, VENV_BIN, free_port
from prep.io import storage
from prep.io.checksum import dataset_checksum
from prep.materialize.verify import verify

pytestmark = [pytest.mark.s3, pytest.mark.slow]

RESOURCE = "prep_node2"


@pytest.fixture(scope="module")
def second_node(ray_head, s3_env):
    """A second Ray node offering ``prep_node2``; yields its temp dir."""
    temp_dir = tempfile.mkdtemp(prefix="prep-n2-", dir="/tmp")
    env = {**ray_head.env, **s3_env, "PYTHONPATH": str(REPO)}
    ports = [f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
             f"--metrics-export-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
             f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}"]
    start = subprocess.Popen(
        [str(VENV_BIN / "ray"), "start", f"--address={ray_head.gcs_address}", "--num-cpus=2",
         f"--resources={json.dumps({RESOURCE: 4})}", f"--temp-dir={temp_dir}", "--object-store-memory=200000000",
         "--disable-usage-stats", *ports],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out, _ = start.communicate(timeout=120)
    if start.returncode:
        raise RuntimeError(f"ray start (second node) failed:\n{out}")
    try:
        yield temp_dir
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(start.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(1)
        shutil.rmtree(temp_dir, ignore_errors=True)


# One driver for both stages (one Ray job: the second stage reuses the workers the first one started).
DRIVER = """
import json, sys
from prep.materialize import materialize_shuffle
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize
from prep.runtime.config import load_config
bucket, tokenizer, address, resources = sys.argv[1:5]
resources = json.loads(resources)
cfg = load_config(PretokenizeConfig, sys.argv[5], input=f"{bucket}/raw/", output=f"{bucket}/t.lance", tokenizer=tokenizer,
                  executor="ray", ray={"address": address, "resources": resources})
print(run_pretokenize(cfg)["executor"])
m = materialize_shuffle(table=f"{bucket}/t.lance", output=f"{bucket}/shuffled", epochs=1, splits=2, executor="ray",
                        ray_address=address, ray_resources=resources)
print(m.num_selected_rows)
"""


def test_pretokenize_and_materialize_run_on_the_second_node(second_node, ray_head, s3_env, s3_bucket, shared_data,
                                                          tokenizer_dir):
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    with open(shared_data / "gsm8k" / "train.jsonl", "rb") as f:
        client.put_object(Bucket=s3_bucket, Key="raw/a.jsonl", Body=b"".join(next(f) for _ in range(60)))
    bucket = f"s3://{s3_bucket}"
    env = {**ray_head.env, **s3_env, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, bucket, tokenizer_dir, ray_head.gcs_address, json.dumps({RESOURCE: 1}),
         str(REPO / "configs" / "gsm8k-sft.yaml")], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ray", "60"]

    table = f"{bucket}/t.lance"
    assert dataset_checksum(table, storage.lance_storage_options(table))[0] == 60
    report = verify(f"{bucket}/shuffled")
    assert report.ok, report
    # The second node ran Python workers (the head's own workers log under the head's temp dir).
    assert glob.glob(os.path.join(second_node, "session_*", "logs", "worker-*")), os.listdir(second_node)


BOUNDED = """
import sys
from prep.materialize import materialize_shuffle
table, output, address, executor, budget = sys.argv[1:6]
m = materialize_shuffle(table=table, output=output, epochs=1, splits=16, executor=executor,
                        ray_address=address if executor == "ray" else None, max_memory=budget)
print(m.num_selected_rows)
"""


def _lance_bytes(proxy, table_key: str) -> int:
    """Bytes of the table's data files the proxy served to Lance (not to s3fs: the content check's one download)."""
    return sum(n for (path, client), n in proxy.got_bytes.items() if f"/{table_key}/data/" in path and client != "aiobotocore")


def test_two_nodes_within_a_tiny_budget_read_the_table_once_and_write_the_local_epochs(second_node, ray_head, s3_env,
                                                                                     s3_bucket, tmp_path):
    """Both nodes may run holders (no resources asked): the rows are routed once across the cluster (each node a
    share of the segments) through a spill on S3, not read again by every node's holder. Lance reads a table's files
    with some overhead of its own (footers, metadata: ~1.2x the files for this one's 30 small fragments), which a
    one-node run pays too: the cluster must read no more than a one-node run that holds every row."""
    import tables
    from fault_proxy import FaultProxy
    from prep.io.materialized import read_manifest

    table = f"s3://{s3_bucket}/t.lance"
    # ~10 MB in 30 fragments (pretokenize writes a fragment per ~2 MiB of input), a few times the budget
    tables.synthetic_table(table, num_rows=60_000, max_len=60, fragment_rows=2000,
                           storage_options=storage.lance_storage_options(table))
    data_bytes = sum(info["size"] for info in storage.filesystem(table)[0].find(f"{s3_bucket}/t.lance/data", detail=True).values())
    runs = {}
    for name, executor in (("local", "local"), ("bounded", "ray")):
        with FaultProxy(s3_env["AWS_ENDPOINT_URL"]) as proxy:
            env = {**ray_head.env, **s3_env, "AWS_ENDPOINT_URL": proxy.url, "PYTHONPATH": str(REPO)}
            budget = "64GiB" if executor == "local" else "4MiB"
            done = subprocess.run([sys.executable, "-c", BOUNDED, table, f"s3://{s3_bucket}/{name}", ray_head.gcs_address,
                                   executor, budget], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = (_lance_bytes(proxy, "t.lance"), sum(n for (p, c), n in proxy.got_bytes.items()
                                                            if "/t.lance/data/" in p and c == "aiobotocore"))
    (one_node, checked_once), (cluster, checked) = runs["local"], runs["bounded"]
    assert data_bytes <= cluster <= 1.1 * one_node, (runs, data_bytes)  # every node reading it again was 2x
    assert checked <= 1.01 * data_bytes and checked_once <= 1.01 * data_bytes  # the content check: one download
    report = verify(f"s3://{s3_bucket}/bounded")
    assert report.ok, report
    assert [e.splits for e in read_manifest(f"s3://{s3_bucket}/bounded").epochs] == \
        [e.splits for e in read_manifest(f"s3://{s3_bucket}/local").epochs]
    assert glob.glob(os.path.join(second_node, "session_*", "logs", "worker-*"))  # the second node worked
