"""Local paths and ``s3://`` URIs behind one small API.

fsspec/s3fs serve file access, Lance needs its own ``storage_options``; both are
derived here from one :class:`S3Options` so the endpoint and keys are set once
(config, else the usual ``AWS_*`` environment variables).
"""

from __future__ import annotations

import json
import os
import posixpath
import uuid
from dataclasses import dataclass
from typing import Any

import fsspec

__all__ = [
    "S3Options",
    "is_remote",
    "filesystem",
    "lance_storage_options",
    "join",
    "exists",
    "read_json",
    "write_json_atomic",
]


@dataclass(frozen=True, kw_only=True)
class S3Options:
    """Where and how to reach S3. Unset fields fall back to the AWS environment.

    Args:
        endpoint_url: e.g. ``http://127.0.0.1:9000`` for MinIO or moto; None for AWS.
        region: bucket region (default ``us-east-1``).
        access_key_id: access key; None to use the environment / instance profile.
        secret_access_key: secret key.
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None

    def resolved(self) -> "S3Options":
        env = os.environ
        return S3Options(
            endpoint_url=self.endpoint_url or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
            region=self.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            access_key_id=self.access_key_id or env.get("AWS_ACCESS_KEY_ID"),
            secret_access_key=self.secret_access_key or env.get("AWS_SECRET_ACCESS_KEY"),
        )


def is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def filesystem(uri: str, s3: S3Options | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """Returns the fsspec filesystem for ``uri`` and the path to use with it."""
    if uri.startswith("s3://"):
        opts = (s3 or S3Options()).resolved()
        client_kwargs: dict[str, Any] = {"region_name": opts.region}
        if opts.endpoint_url:
            client_kwargs["endpoint_url"] = opts.endpoint_url
        fs = fsspec.filesystem(
            "s3",
            key=opts.access_key_id,
            secret=opts.secret_access_key,
            client_kwargs=client_kwargs,
            skip_instance_cache=False,
        )
        return fs, uri[len("s3://"):]
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return fsspec.filesystem("file"), os.path.abspath(uri)


def lance_storage_options(uri: str, s3: S3Options | None = None) -> dict[str, str] | None:
    """Lance's ``storage_options`` for ``uri`` (None for local paths)."""
    if not uri.startswith("s3://"):
        return None
    opts = (s3 or S3Options()).resolved()
    out = {"aws_region": opts.region or "us-east-1"}
    if opts.endpoint_url:
        out["aws_endpoint"] = opts.endpoint_url
        if opts.endpoint_url.startswith("http://"):
            out["allow_http"] = "true"
    if opts.access_key_id:
        out["aws_access_key_id"] = opts.access_key_id
    if opts.secret_access_key:
        out["aws_secret_access_key"] = opts.secret_access_key
    return out


def join(uri: str, *parts: str) -> str:
    """Joins path parts onto a local path or URI with ``/``."""
    return posixpath.join(uri.rstrip("/"), *parts) if is_remote(uri) else os.path.join(uri, *parts)


def exists(uri: str, s3: S3Options | None = None) -> bool:
    fs, path = filesystem(uri, s3)
    return fs.exists(path)


def read_json(uri: str, s3: S3Options | None = None) -> Any:
    fs, path = filesystem(uri, s3)
    with fs.open(path, "rb") as f:
        return json.loads(f.read())


def write_json_atomic(uri: str, obj: Any, s3: S3Options | None = None) -> None:
    """Writes JSON so readers see the old file or the whole new one, never a part.

    Locally: write a temp file beside it, fsync, rename. On S3 a single PUT is
    already atomic.
    """
    data = json.dumps(obj, indent=2, sort_keys=True).encode()
    fs, path = filesystem(uri, s3)
    if is_remote(uri):
        fs.pipe_file(path, data)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
