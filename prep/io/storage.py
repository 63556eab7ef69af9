"""Local paths and object-store URIs (``s3://``, ``gs://``, ``az://``/``abfss://``, ``hf://``) behind one small API.

fsspec serves file access, Lance needs its own ``storage_options``; both come from
:func:`resolve`, so the endpoint, the credentials and the retry policy are set once
(config, else the usual environment: ``AWS_*`` incl. ``AWS_SESSION_TOKEN`` and
``AWS_PROFILE``; Google and Azure clients read their own environment, and
``STORAGE_EMULATOR_HOST`` points gcsfs and Lance alike at a GCS emulator). Secrets live
in :class:`S3Options` fields that never print (``repr``), and nothing here logs them.
"""

from __future__ import annotations

import json
import os
import posixpath
import uuid
from dataclasses import dataclass, field
from typing import Any

import fsspec

from prep.errors import PrepError
from prep.io.retry import RetryPolicy, retryable

__all__ = [
    "S3Options",
    "Resolved",
    "resolve",
    "shown",
    "fs_path",
    "is_remote",
    "scheme",
    "with_scheme",
    "filesystem",
    "lance_storage_options",
    "join",
    "exists",
    "read_json",
    "write_json_atomic",
]

# Schemes handed to fsspec (and Lance) as they are, credentials from their own environment:
# scheme -> (fsspec's protocol for it, the module that implements it, the extra of prep that installs it).
# Only the spellings both fsspec and Lance open, for inputs and tables alike: gcsfs also takes gcs://
# and adlfs abfs://, Lance neither (it has gs://, az:// and abfss://).
PASS_THROUGH = {
    "gs": ("gs", "gcsfs", "gcs"),
    "az": ("az", "adlfs", "azure"), "abfss": ("abfs", "adlfs", "azure"),
    "hf": ("hf", "huggingface_hub", None),  # inputs only: Lance cannot write there
}
SUPPORTED = ("local paths, file://, s3://, gs:// (pip install 'prep-lance[gcs]'), az:// or abfss:// "
             "(pip install 'prep-lance[azure]'), hf:// (inputs)")


@dataclass(frozen=True, kw_only=True)
class S3Options:
    """Where and how to reach S3 (and S3-compatible stores). Unset fields fall back to the AWS environment.

    Args:
        endpoint_url: e.g. ``http://127.0.0.1:9000`` for MinIO or moto, ``https://<id>.r2.cloudflarestorage.com``
            for R2; None for AWS.
        region: bucket region (default ``us-east-1``).
        access_key_id: access key; None to use the environment / profile / instance role.
        secret_access_key: secret key (never printed).
        session_token: temporary credentials' token (``AWS_SESSION_TOKEN``; never printed).
        profile: a profile of ``~/.aws/credentials`` / ``~/.aws/config`` (``AWS_PROFILE``).
        retry: how every client retries (see :mod:`prep.io.retry`).
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def resolved(self) -> "S3Options":
        """These options with the environment filled in (keys of a profile included), to ship to workers."""
        env = os.environ
        key, secret, token = self.access_key_id, self.secret_access_key, self.session_token
        if not key and not secret:
            key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
            token = token or env.get("AWS_SESSION_TOKEN")
        profile = self.profile or (None if key else env.get("AWS_PROFILE"))
        if profile and not key:
            key, secret, token = _profile_credentials(profile)
        return S3Options(
            endpoint_url=self.endpoint_url or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
            region=self.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            access_key_id=key, secret_access_key=secret, session_token=token, profile=profile, retry=self.retry,
        )


def _profile_credentials(profile: str) -> tuple[str | None, str | None, str | None]:
    """A profile's keys through botocore (files, SSO, assume-role), for clients that only take keys (Lance)."""
    import botocore.session
    from botocore.exceptions import BotoCoreError

    try:
        creds = botocore.session.Session(profile=profile).get_credentials()
    except BotoCoreError as exc:
        raise PrepError(f"AWS profile {profile!r} cannot be used ({type(exc).__name__}): check ~/.aws/config") from None
    if creds is None:
        raise PrepError(f"AWS profile {profile!r} has no credentials: check ~/.aws/credentials")
    frozen = creds.get_frozen_credentials()
    return frozen.access_key, frozen.secret_key, frozen.token


@dataclass(frozen=True)
class Resolved:
    """One URI, resolved: the fsspec filesystem and path, and Lance's ``storage_options`` (None locally)."""

    fs: fsspec.AbstractFileSystem
    path: str
    lance_options: dict[str, str] | None


def is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def scheme(uri: str) -> str:
    """``s3`` for ``s3://b/k``; ``file`` for a local path or ``file://``.

    Raises:
        PrepError: a scheme prep does not support (``s3a://``...), never read as a local path.
    """
    if not is_remote(uri):
        return "file"
    name = uri.partition("://")[0].lower()
    if name != "s3" and name not in PASS_THROUGH:
        raise PrepError(f"{uri}: unknown scheme '{name}://'; prep supports {SUPPORTED}")
    return name


def with_scheme(uri: str, path: str) -> str:
    """``path`` as fsspec returns it (no scheme) back as a URI of the same store as ``uri``.

    >>> with_scheme("gs://bucket/in", "bucket/in/a.jsonl"), with_scheme("/data/in", "/data/in/a.jsonl")
    ('gs://bucket/in/a.jsonl', '/data/in/a.jsonl')
    """
    return f"{scheme(uri)}://{path}" if is_remote(uri) else path


def resolve(uri: str, s3: S3Options | None = None, *, retries: bool = True) -> Resolved:
    """The filesystem, path and Lance options for ``uri``: the one place URIs and credentials meet.

    Args:
        uri: a local path, ``file://``, ``s3://``, ``gs://``, ``az://``, ``abfss://`` or ``hf://`` URI.
        s3: endpoint, credentials and retry policy (default: the environment).
        retries: False for a filesystem that tries each request once, for callers that retry
            under :func:`prep.io.retry.call` themselves (retries inside retries multiply).

    Raises:
        PrepError: an unknown scheme, or one whose fsspec module (an extra of prep) is not installed.
    """
    protocol = scheme(uri)
    if protocol == "s3":
        opts = (s3 or S3Options()).resolved()
        return Resolved(_s3fs(opts, retries), fs_path(uri), _lance_s3(opts))
    if protocol in PASS_THROUGH:
        fsspec_protocol, module, extra = PASS_THROUGH[protocol]
        emulator = _gcs_emulator() if fsspec_protocol == "gs" else None
        # An emulator checks no credentials (looking them up would query the GCE metadata server); its URL
        # is an argument, so the instance fsspec caches belongs to that emulator.
        emulated = {"token": "anon", "endpoint_url": emulator} if emulator else {}
        try:
            fs = fsspec.filesystem(fsspec_protocol, **emulated)
        except ImportError:  # gcsfs / adlfs are optional: say which one, and how to get it
            install = f"pip install 'prep-lance[{extra}]'" if extra else f"pip install {module}"
            raise PrepError(f"{uri}: {protocol}:// needs the {module} package: {install}") from None
        options = _lance_client((s3 or S3Options()).retry)
        if emulator:
            options |= _lance_gcs_emulator(emulator)
        return Resolved(fs, fs_path(uri), options)
    return Resolved(fsspec.filesystem("file"), fs_path(uri), None)


def shown(uri: str) -> str:
    """``uri`` as an error shows it: a relative local path also as the absolute path it resolved to,
    since relative paths resolve from the current directory (not from a config file's folder).

    >>> shown("s3://bucket/x.jsonl")
    's3://bucket/x.jsonl'
    >>> shown("/data/x.jsonl")
    '/data/x.jsonl'
    """
    if is_remote(uri) or os.path.isabs(uri.removeprefix("file://")):
        return uri
    return f"{uri} (resolved from the current directory {os.getcwd()} to {fs_path(uri)})"


def fs_path(uri: str) -> str:
    """The path fsspec takes for ``uri``: without the scheme remotely, absolute locally."""
    if is_remote(uri):
        return uri.partition("://")[2]
    return os.path.abspath(uri[len("file://"):] if uri.startswith("file://") else uri)


def _s3fs(opts: S3Options, retries: bool) -> fsspec.AbstractFileSystem:
    """s3fs retries (its own backoff: 0.1 s x 1.7^n, capped at 15 s) what :func:`prep.io.retry.retryable` accepts,
    and prep retries its listings whole (:mod:`prep.io.s3_listing`: s3fs before 2026.9.0 does not retry a
    listing's pages); botocore's retries are off, or the loops would multiply each other."""
    import s3fs  # imported here: only s3:// needs it, and it loads aiobotocore

    from prep.io.s3_listing import S3ListingRetries

    s3fs.core.set_custom_error_handler(retryable)
    client_kwargs: dict[str, Any] = {"region_name": opts.region}
    if opts.endpoint_url:
        client_kwargs["endpoint_url"] = opts.endpoint_url
    policy = opts.retry
    fs = S3ListingRetries(
        key=opts.access_key_id,
        secret=opts.secret_access_key,
        token=opts.session_token,
        client_kwargs=client_kwargs,
        config_kwargs={"retries": {"total_max_attempts": 1, "mode": "standard"},
                       "connect_timeout": policy.connect_timeout_s, "read_timeout": policy.read_timeout_s},
        skip_instance_cache=not retries,  # the single-try instance is not the shared one
    )
    fs.retries = policy.max_attempts if retries else 1  # s3fs's loop around each call (not a constructor argument)
    fs.retry_policy = policy  # the backoff of the listings' retries
    return fs


def _lance_client(policy: RetryPolicy) -> dict[str, str]:
    """Lance's object-store client: retries, and timeouts that turn a stalled request into a retry."""
    return {
        "client_max_retries": str(policy.max_attempts),
        "client_retry_timeout": str(int(policy.total_timeout_s)),
        "connect_timeout": f"{policy.connect_timeout_s:g}s",
        "request_timeout": f"{policy.read_timeout_s:g}s",
    }


def _gcs_emulator() -> str | None:
    """The URL of the GCS emulator ``STORAGE_EMULATOR_HOST`` names (the variable of gcsfs and Google's clients;
    a bare ``host:port`` is http), None for GCS itself."""
    host = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if host in ("", "default"):  # gcsfs reads "default" as unset too
        return None
    return (host if "://" in host else f"http://{host}").rstrip("/")


def _lance_gcs_emulator(url: str) -> dict[str, str]:
    """Lance pointed at the emulator gcsfs uses, so one variable moves both. Lance's object store takes another
    endpoint only as a service account's ``gcs_base_url``, with OAuth off: this key holds no secret."""
    key = {"gcs_base_url": url, "disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""}
    return {"google_service_account_key": json.dumps(key), **({"allow_http": "true"} if url.startswith("http://") else {})}


def _lance_s3(opts: S3Options) -> dict[str, str]:
    out = {"aws_region": opts.region or "us-east-1", **_lance_client(opts.retry)}
    if opts.endpoint_url:
        out["aws_endpoint"] = opts.endpoint_url
        if opts.endpoint_url.startswith("http://"):
            out["allow_http"] = "true"
    if opts.access_key_id:
        out["aws_access_key_id"] = opts.access_key_id
    if opts.secret_access_key:
        out["aws_secret_access_key"] = opts.secret_access_key
    if opts.session_token:
        out["aws_session_token"] = opts.session_token
    return out


def filesystem(uri: str, s3: S3Options | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """Returns the fsspec filesystem for ``uri`` and the path to use with it (see :func:`resolve`)."""
    r = resolve(uri, s3)
    return r.fs, r.path


def lance_storage_options(uri: str, s3: S3Options | None = None) -> dict[str, str] | None:
    """Lance's ``storage_options`` for ``uri`` (None for local paths; see :func:`resolve`)."""
    return resolve(uri, s3).lance_options


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
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:  # a full disk: no temp file is left behind
        if os.path.lexists(tmp):
            os.remove(tmp)
