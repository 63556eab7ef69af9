"""prep retries an S3 listing whole when one of its pages fails (prep.io.s3_listing).

s3fs before 2026.9.0 sent listing pages through botocore's paginator, outside its retry loop: one
throttled page failed ``find``, ``glob``, ``ls`` and with them prep's input listing and materialize's
scans. prep's own retry lifts that, so fsspec/s3fs 2026.2.0 (HF datasets 4.8's cap) can be the floor.
Against the moto endpoint of ``conftest`` behind a proxy that fails the first listing requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import boto3
import pytest

from fault_proxy import FaultProxy
from prep.io import storage
from prep.io.retry import RetryPolicy
from prep.prepare.listing import list_input

pytestmark = [pytest.mark.s3]

FAST = RetryPolicy(base_s=0.01, cap_s=0.05, max_attempts=6)


@dataclass
class FailingLists(FaultProxy):
    """Answers the first ``lists`` listing requests (ListObjectsV2) with ``kind``, forwards everything else."""

    lists: int = 0
    kind: str = "slowdown"

    def decide(self, method: str, path: str, range_: str) -> str | None:
        if "list-type=2" in path and self.lists > 0:
            self.lists -= 1
            self.faults[self.kind] += 1
            return self.kind
        return None


@pytest.fixture
def bucket(s3_env, s3_bucket) -> str:
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    for name in ("a.jsonl", "b.jsonl", "sub/c.jsonl"):
        client.put_object(Bucket=s3_bucket, Key=f"raw/{name}", Body=b'{"text": "x"}\n')
    return s3_bucket


@pytest.mark.parametrize("kind", ["slowdown", "error", "reset"])
def test_a_failed_listing_page_is_retried_and_the_listing_is_whole(s3_env, bucket, kind):
    with FailingLists(s3_env["AWS_ENDPOINT_URL"], lists=2, kind=kind) as proxy:
        opts = storage.S3Options(endpoint_url=proxy.url, retry=FAST)
        listing = list_input(f"s3://{bucket}/raw/", opts)
        assert [f.key for f in listing.files] == ["a.jsonl", "b.jsonl", "sub/c.jsonl"]
        proxy.lists = 2
        fs, path = storage.filesystem(f"s3://{bucket}/raw", opts)
        assert sorted(fs.glob(f"{path}/*.jsonl", refresh=True)) == [f"{bucket}/raw/a.jsonl", f"{bucket}/raw/b.jsonl"]
        proxy.lists = 2
        assert len(fs.ls(path, refresh=True)) == 3  # two files and the folder sub/
        assert proxy.faults[kind] == 6 and proxy.lists == 0


def test_a_single_try_filesystem_leaves_the_retry_to_its_caller(s3_env, bucket):
    """``resolve(retries=False)`` is for callers that retry under prep.io.retry.call: no retry inside it."""
    with FailingLists(s3_env["AWS_ENDPOINT_URL"], lists=1) as proxy:
        fs = storage.resolve(f"s3://{bucket}/raw", storage.S3Options(endpoint_url=proxy.url, retry=FAST),
                             retries=False).fs
        with pytest.raises(OSError):
            fs.find(f"{bucket}/raw")
        assert sorted(fs.find(f"{bucket}/raw")) == [f"{bucket}/raw/{n}" for n in ("a.jsonl", "b.jsonl", "sub/c.jsonl")]


def test_a_listing_of_a_missing_folder_is_still_empty_not_retried(s3_env, bucket):
    with FailingLists(s3_env["AWS_ENDPOINT_URL"]) as proxy:
        fs, path = storage.filesystem(f"s3://{bucket}/nothing-here", storage.S3Options(endpoint_url=proxy.url, retry=FAST))
        assert fs.find(path) == [] and not fs.exists(path)
