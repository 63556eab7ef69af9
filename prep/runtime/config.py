"""Typed, validated YAML configs shared by every prepare job.

Every job config is a frozen pydantic model that forbids unknown keys. Loading
turns any validation problem into a one-line :class:`PrepError` naming the file,
the key and the value, long before Ray starts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from prep.errors import PrepError
from prep.io.retry import RetryPolicy
from prep.io import storage
from prep.io.storage import S3Options
from prep.runtime.executor import MAX_TASK_RETRIES, Executor

__all__ = ["ConfigModel", "RetryConfig", "S3Config", "RayConfig", "JobConfig", "merge", "load_config", "config_hash"]

T = TypeVar("T", bound="ConfigModel")


class ConfigModel(BaseModel):
    """Base for config sections: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class RetryConfig(ConfigModel):
    """How remote requests are retried (see :class:`prep.io.retry.RetryPolicy`)."""

    max_attempts: int = Field(default=RetryPolicy.max_attempts, ge=1)
    base_s: float = Field(default=RetryPolicy.base_s, gt=0)
    cap_s: float = Field(default=RetryPolicy.cap_s, gt=0)
    connect_timeout_s: float = Field(default=RetryPolicy.connect_timeout_s, gt=0)
    read_timeout_s: float = Field(default=RetryPolicy.read_timeout_s, gt=0)
    total_timeout_s: float = Field(default=RetryPolicy.total_timeout_s, gt=0)


class S3Config(ConfigModel):
    """S3 endpoint and credentials; unset fields fall back to the ``AWS_*`` environment.

    Secrets are ``SecretStr``: printed as ``**********`` in errors and dumps.
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    profile: str | None = None
    retry: RetryConfig = RetryConfig()

    def options(self) -> S3Options:
        def reveal(s: SecretStr | None) -> str | None:
            return None if s is None else s.get_secret_value()

        return S3Options(endpoint_url=self.endpoint_url, region=self.region, access_key_id=self.access_key_id,
                         secret_access_key=reveal(self.secret_access_key), session_token=reveal(self.session_token),
                         profile=self.profile, retry=RetryPolicy(**self.retry.model_dump()))


class RayConfig(ConfigModel):
    """How to reach Ray: ``address`` (else ``RAY_ADDRESS``, else a local Ray with ``num_cpus``);
    ``resources``: custom Ray resources every task asks for, to pin tasks to the nodes that offer them."""

    address: str | None = None
    num_cpus: int | None = Field(default=None, ge=1)
    resources: dict[str, float] = Field(default_factory=dict)


class JobConfig(ConfigModel):
    """Keys every prepare job has.

    Attributes:
        input: a file, directory or glob (local or ``s3://``), or a list of them.
        output: the Lance table to write (local path or ``s3://``).
        rejects: where rejected rows go; default ``<output without .lance>.rejects.lance``.
        overwrite: replace an existing table at ``output`` (otherwise that is an error).
        append: add the input files the table at ``output`` does not hold yet, as one new
            table version (docs/guide.md, "Growing a table"); a file it holds that changed
            since is refused. Exclusive with ``overwrite``.
        update: as ``append``, and a changed file's rows are replaced (deleted and added in
            the same commit) instead of refused, and a renamed or moved file's rows are made anew
            under its new name.
        remove_missing: with ``append``/``update``, the rows of held files that are no longer
            among the inputs are removed in the same commit (otherwise they stay, and the summary
            names those files).
        chunk_bytes: input bytes per task; the unit of parallelism and of determinism.
        executor: where chunks run: ``auto`` (default) uses Ray when there is a cluster to
            join (``ray.address``, ``RAY_ADDRESS``, as under ``ray job submit``) and this
            machine's CPUs without Ray otherwise; ``ray`` starts a local Ray if there is none;
            ``local`` never uses Ray. The output is the same either way.
        item_timeout_s: seconds one item (an image, a row) may take before it is rejected
            as "timed out" (default 60; see docs/architecture.md, "Isolation").
        max_bad_items_per_chunk: items of one chunk that may crash or time out, each
            becoming a reject, before the chunk and the job fail (default 16).
        max_task_retries: retries of a chunk whose worker died outside any single item,
            and of a Ray task whose worker died (default 3,
            :data:`prep.runtime.executor.MAX_TASK_RETRIES`; never unlimited).
        max_reject_fraction: the share of rows read that may be rejected (default 0.1).
            Past it, or when every row is rejected (whatever this is), the job exits 1
            naming the top reasons; the rejects table is committed, the table is not
            (see docs/architecture.md, "Reject budget").
    """

    input: str | list[str]
    output: str
    rejects: str | None = None
    overwrite: bool = False
    append: bool = False
    update: bool = False
    remove_missing: bool = False
    chunk_bytes: int = Field(default=2 << 20, ge=4096)
    executor: Executor = "auto"
    item_timeout_s: float = Field(default=60.0, gt=0)
    max_bad_items_per_chunk: int = Field(default=16, ge=0)
    max_task_retries: int = Field(default=MAX_TASK_RETRIES, ge=0)
    max_reject_fraction: float = Field(default=0.1, ge=0, le=1)
    s3: S3Config = S3Config()
    ray: RayConfig = RayConfig()

    @model_validator(mode="after")
    def _one_way_to_write(self) -> "JobConfig":
        if self.overwrite and (self.append or self.update):
            raise ValueError(f"overwrite and {'update' if self.update else 'append'} are exclusive: overwrite replaces the "
                             "table, append/update add to it; choose one")
        if self.remove_missing and not self.grows:
            raise ValueError("remove_missing removes the rows of files gone from the inputs of a table that grows: "
                             "give it with append or update")
        return self

    @property
    def grows(self) -> bool:
        """True when the job adds to the table at ``output`` (``append`` or ``update``)."""
        return self.append or self.update

    @property
    def inputs(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)

    @property
    def rejects_uri(self) -> str:
        if self.rejects:
            return self.rejects
        base = self.output.rstrip("/")
        return (base[: -len(".lance")] if base.endswith(".lance") else base) + ".rejects.lance"


SECRET_KEYS = frozenset({"secret_access_key", "session_token"})  # values never echoed in errors


def _format_error(source: str, err: ValidationError) -> str:
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    secret = any(part in SECRET_KEYS for part in first["loc"])
    value = "" if first["type"] == "missing" or secret else f" (got {first.get('input')!r:.80})"
    where = "argument" if source == "arguments" else f"{source}: key"  # no file: the keys came as arguments
    return f"{where} '{key}': {first['msg']}{value}{more}"


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with the non-None ``overrides`` on top; a mapping merges into a mapping key by key,
    so ``ray={"address": ...}`` from a flag keeps the config's ``ray.num_cpus``.

    >>> merge({"ray": {"num_cpus": 4}, "input": "a"}, {"ray": {"address": "auto"}, "input": None})
    {'ray': {'num_cpus': 4, 'address': 'auto'}, 'input': 'a'}
    """
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        elif value is not None:
            out[key] = value
    return out


def load_config(model: type[T], path: str | Path | None = None, **overrides: Any) -> T:
    """Loads ``path`` (YAML, optional) into ``model``, applying non-None ``overrides`` on top.

    Overrides are config keys (``input``, ``output``, ``tokenizer``, ``sft={"layout": "qa"}``...),
    so one config serves many data sets, and a one-off job needs no file at all. Relative paths,
    in the file and in overrides alike, resolve from the current directory.

    Raises:
        PrepError: the file is missing or not YAML, or a key is unknown, missing or mistyped.
    """
    data: dict[str, Any] = {}
    source = str(path) if path else "arguments"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise PrepError(f"config file not found: {storage.shown(str(p))}")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise PrepError(f"{p}: not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise PrepError(f"{p}: expected a mapping of keys at the top level, got {type(data).__name__}")
    data = merge(data, overrides)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise PrepError(_format_error(source, err)) from None


# Keys that say where and how a job runs, not what it makes: left out of the hash (and s3, which
# holds secrets). item_timeout_s stays in: it can decide whether a slow item is a row or a reject.
RUNTIME_KEYS = frozenset({"s3", "ray", "executor", "overwrite", "append", "update", "remove_missing", "max_bad_items_per_chunk",
                          "max_task_retries", "max_reject_fraction"})


def config_hash(cfg: BaseModel) -> str:
    """sha256 of the resolved config's canonical JSON without :data:`RUNTIME_KEYS`: configs
    that make the same table hash the same, wherever and however they ran."""
    data = cfg.model_dump(mode="json", exclude=set(RUNTIME_KEYS) & set(type(cfg).model_fields))
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
