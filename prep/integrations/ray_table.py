"""A Ray Data pipeline's rows as a prep table, and a prep table as a Ray Dataset.

:class:`~prep.integrations.ray_data.Tokenize` and :class:`~prep.integrations.ray_data.DecodeImages`
emit the table's columns plus two of their own (the *batch contract* below); :func:`write_table`
writes each block as uncommitted Lance fragments on the Ray workers (the rows never reach the
driver, which gets fragment metadata back) and then runs the prepare driver's own commit:
claim, the rejects table, counts reconciled, the reject budget, the lease, the table metadata
and, with ``mode="append"``, a growth step (:func:`prep.prepare.driver.commit_and_reconcile`).

The batch contract: every row carries ``_prep_rows`` (int8: the source rows it accounts for:
1, or 0 for the later pieces of a split row) and ``_prep_reject`` (a struct of the rejects
table's columns; null for a row of the table, set for a reject, whose table columns are null).
The batch's schema metadata (:data:`META_KEY`) names the job: its config and what made the
rows (kind, tokenizer or image shape), so that ``write_table`` needs nothing else.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import prep
from prep.contracts.counts import REQUIRED_COUNTS, Counts
from prep.io.claims import claim_outputs
from prep.io.lease import hold
from prep.contracts.table import TABLE_FORMAT, Step, TableMetadata, read_table_metadata
from prep.errors import PrepError
from prep.io import lance_tables, storage
from prep.prepare import faults
from prep.prepare.chunk_runner import ChunkResult, drop_old_versions, total_counts
from prep.prepare.driver import check_apart, commit_and_reconcile, rejects_without_table
from prep.prepare.growth import Growth, read_prior
from prep.prepare.rejects import REJECTS_SCHEMA, Reject, rejects_table
from prep.runtime.config import JobConfig, S3Config, config_hash
from prep.runtime.executor import MAX_TASK_RETRIES

__all__ = ["write_table", "read_table", "RAY_INPUT", "META_KEY", "ROWS_COLUMN", "REJECT_COLUMN", "with_rejects"]


RAY_INPUT = "ray.data"  # the config's input (and the rejects' source when a row names no file)
META_KEY = b"prep.ray_data"
ROWS_COLUMN = "_prep_rows"
REJECT_COLUMN = "_prep_reject"
_NO_ID = 2**64 - 1
_RESULT_SCHEMA = pa.schema([("fragments", pa.binary()), ("reject_fragments", pa.binary()), ("counts", pa.string()),
                            ("meta", pa.string()), ("first_id", pa.uint64()), ("first_reject", pa.string()),
                            ("seconds", pa.float64())])


def with_rejects(table: pa.Table, first_piece: np.ndarray, rejects: Sequence[Reject], meta: Mapping[str, Any]) -> pa.Table:
    """``table`` (the job's rows) then ``rejects`` as one batch of the batch contract, naming the job ``meta``."""
    n, r = table.num_rows, len(rejects)
    columns = {name: pa.concat_arrays([col.combine_chunks(), pa.nulls(r, col.type)]) for name, col in zip(table.column_names, table.columns)}
    columns[ROWS_COLUMN] = pa.array(np.concatenate([np.asarray(first_piece, np.int8), np.ones(r, np.int8)]), pa.int8())
    cleaned = rejects_table(list(rejects))  # its text rules (lone surrogates, the raw prefix)
    fields = [pa.concat_arrays([pa.array([""] * n, pa.string()), cleaned.column(f.name).combine_chunks()]) for f in REJECTS_SCHEMA]
    mask = pa.array([True] * n + [False] * r)
    columns[REJECT_COLUMN] = pa.StructArray.from_arrays(fields, fields=list(REJECTS_SCHEMA), mask=mask)
    return pa.table(columns).replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})


@dataclass(frozen=True)
class _Job:
    """What the batches say made them: the prepare command, its config and the metadata keys of how."""

    command: Literal["pretokenize", "decode-images"]
    config: Mapping[str, object]  # the command's config, as JSON
    made_with: Mapping[str, object]  # the table metadata keys of how rows were made (kind, tokenizer, image...)

    @classmethod
    def of(cls, raw: bytes | str) -> _Job:
        body = json.loads(raw)
        return cls(body["command"], body["config"], body["made_with"])

    def cfg(self, **update: Any) -> JobConfig:
        """The job's config, as a prepare job of that command has it (``update``: the keys write_table decides)."""
        if self.command == "pretokenize":
            from prep.prepare.text.pretokenize import PretokenizeConfig as model
        else:
            from prep.prepare.images.config import ImagesConfig as model
        return model.model_validate({**self.config, **update})

    def schema(self) -> pa.Schema:
        cfg = self.cfg()
        if self.command == "pretokenize":
            from prep.prepare.text.pretokenize import table_schema
        else:
            from prep.prepare.images.worker import table_schema
        return table_schema(cfg)


def _meta_of(block: pa.Table) -> str:
    raw = (block.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise PrepError(f"a block of {block.num_rows} rows with columns {block.column_names[:6]} did not come from prep's "
                        "Tokenize or DecodeImages (no prep.ray_data schema metadata): put one of them last in the pipeline "
                        "before write_table, with batch_format=\"pyarrow\"")
    return raw.decode()


def _write_block(block: pa.Table, *, output: str, rejects: str, output_options: dict[str, str] | None,
                 rejects_options: dict[str, str] | None) -> pa.Table:
    """One block (on a Ray worker): its rows as uncommitted fragments of the table and of the rejects;
    returns one row of fragment metadata and counts (never the rows)."""
    t0 = time.perf_counter()
    if block.num_rows == 0:
        return _RESULT_SCHEMA.empty_table()
    meta = _meta_of(block)
    schema = _Job.of(meta).schema()
    rejected = block.column(REJECT_COLUMN).is_valid()
    kept = block.filter(pc.invert(rejected))
    data = kept.select(schema.names).cast(schema).sort_by("id")  # the order within a fragment: by id, whatever the batching
    rows = block.filter(rejected).column(REJECT_COLUMN).combine_chunks()
    rej = pa.Table.from_arrays(rows.flatten(), schema=REJECTS_SCHEMA).sort_by([("source", "ascending"), ("position", "ascending")])
    frags = lance_tables.write_fragments(data, output, storage_options=output_options) if data.num_rows else []
    rej_frags = lance_tables.write_fragments(rej, rejects, storage_options=rejects_options) if rej.num_rows else []
    source_rows = block.column(ROWS_COLUMN)
    counts = Counts(rows_read=int(pc.sum(source_rows).as_py() or 0), rows_accepted=int(pc.sum(kept.column(ROWS_COLUMN)).as_py() or 0),
                    rows_rejected=rej.num_rows, rows_written=data.num_rows)
    if "length" in schema.names:
        counts = replace(counts, tokens=int(pc.sum(data.column("length")).as_py() or 0),
                         tokens_trained=int(pc.sum(pc.list_flatten(data.column("loss_mask"))).as_py() or 0) if data.num_rows else 0)
    first_reject = f"{rej.column('source')[0].as_py()}\0{rej.column('position')[0].as_py()}" if rej.num_rows else "\uffff"
    return pa.Table.from_pylist([{
        "fragments": pickle.dumps(frags), "reject_fragments": pickle.dumps(rej_frags), "counts": json.dumps(counts.to_json()),
        "meta": meta, "first_id": int(data.column("id")[0].as_py()) if data.num_rows else _NO_ID,
        "first_reject": first_reject, "seconds": time.perf_counter() - t0,
    }], schema=_RESULT_SCHEMA)


def write_table(
    ds: Any,
    output: str,
    *,
    rejects: str | None = None,
    mode: Literal["create", "overwrite", "append"] = "create",
    max_reject_fraction: float = 0.1,
    s3: Mapping[str, Any] | None = None,
    rows_per_fragment: int | None = None,
    num_cpus: float = 0.5,
    max_retries: int = MAX_TASK_RETRIES,
) -> dict[str, Any]:
    """Writes the rows of ``ds`` (a ``ray.data.Dataset`` ending in Tokenize or DecodeImages) as a prep table.

    Each block becomes uncommitted Lance fragments on the worker that holds it; the driver gets
    their metadata, commits the rejects then the table once, fragments ordered by their first id
    (rows within a fragment by id), checks ``rows_read = rows_written + rows_rejected`` on the
    committed tables and the reject budget, and stamps prep's table metadata, so every prep
    command takes the table. A run killed before its commit leaves no table; the plain rerun
    takes its leftovers (docs/architecture.md, "Outputs prep may write").

    Args:
        ds: the pipeline; its last step is ``map_batches(Tokenize | DecodeImages, batch_format="pyarrow")``.
        output: the Lance table (local path or ``s3://``).
        rejects: its rejects table (default ``<output minus .lance>.rejects.lance``).
        mode: ``create`` (the output must be absent or a dead run's leftovers), ``overwrite`` (replace a
            table prep wrote) or ``append`` (a new step in the table's history, made with the same config).
        max_reject_fraction: the share of rows that may be rejected (docs/architecture.md, "Reject budget").
        s3: S3 endpoint and credentials (the keys of ``s3:`` in a config); default: the environment.
        rows_per_fragment: rows per write (Ray Data's ``batch_size``); default: one fragment per block.
        num_cpus: CPUs each write task asks for (keep it below the node's CPUs: issue 44687).
        max_retries: Ray's retries of a write task whose worker died (default
            :data:`prep.runtime.executor.MAX_TASK_RETRIES`; never unlimited).

    Returns:
        A summary: table, rejects, kind, mode, counts, the step committed, seconds.

    Raises:
        PrepError: an output prep may not replace, blocks of two configs, counts that do not reconcile.
        TooManyRejects: over the budget; the rejects are committed, the table is not.
        LeaseHeld: another run writes the output.
    """
    if mode not in ("create", "overwrite", "append"):
        raise PrepError(f"write_table: mode={mode!r} must be 'create', 'overwrite' or 'append'")
    s3_opts = S3Config.model_validate(dict(s3 or {})).options().resolved()
    output = _absolute(output)
    rejects_uri = _absolute(JobConfig.model_construct(output=output, rejects=rejects).rejects_uri)
    check_apart(output, rejects_uri)
    with hold([output, rejects_uri], "write_table", s3_opts) as leases:
        faults.arm(faults.from_env())
        t0 = time.perf_counter()
        prior = read_prior(output, s3_opts) if mode == "append" else None
        orphan = rejects_without_table(output, rejects_uri, s3_opts)
        claim_outputs([output, rejects_uri], "write_table", overwrite=mode == "overwrite" or orphan or prior is not None, s3=s3_opts)
        faults.maybe_raise("commit", "claimed")
        kwargs = dict(output=output, rejects=rejects_uri, output_options=storage.lance_storage_options(output, s3_opts),
                      rejects_options=storage.lance_storage_options(rejects_uri, s3_opts))
        written = ds.map_batches(_write_block, fn_kwargs=kwargs, batch_format="pyarrow", batch_size=rows_per_fragment,
                                 num_cpus=num_cpus, max_retries=max_retries, zero_copy_batch=True).take_all()
        t_written = time.perf_counter()
        return _commit(written, output=output, rejects=rejects_uri, mode=mode, prior=prior, orphan=orphan, s3=s3_opts,
                       max_reject_fraction=max_reject_fraction, leases=leases, seconds={"write": t_written - t0, "start": t0})


def _commit(written: list[dict[str, Any]], *, output: str, rejects: str, mode: str, prior: Any, orphan: bool,
            s3: storage.S3Options, max_reject_fraction: float, leases: list[Any], seconds: dict[str, float]) -> dict[str, Any]:
    """The driver's half: the blocks' fragments in a deterministic order, committed as the prepare driver commits."""
    jobs = sorted({w["meta"] for w in written})
    if len(jobs) > 1:
        first, second = (_Job.of(j) for j in jobs[:2])
        raise PrepError(f"the dataset's blocks come from {len(jobs)} different Tokenize/DecodeImages configs "
                        f"({first.command} {first.made_with.get('kind')} and {second.command} {second.made_with.get('kind')}): "
                        "one table holds rows made one way; write each to its own table")
    if not jobs:
        raise PrepError(f"the dataset gave no rows, so {output} was not written: check the pipeline's input and filters")
    job = _Job.of(jobs[0])
    ordered = sorted(written, key=lambda w: (w["first_id"], w["first_reject"]))
    results = [ChunkResult(i, pickle.loads(w["fragments"]), pickle.loads(w["reject_fragments"]),
                           Counts.from_json(json.loads(w["counts"]), "a block's"), w["seconds"]) for i, w in enumerate(ordered)]
    counts = total_counts(results)
    cfg = job.cfg(output=output, rejects=rejects, overwrite=mode == "overwrite", append=mode == "append")
    opts = storage.lance_storage_options(output, s3)
    version = int(lance_tables.open_table(output, storage_options=opts).latest_version) + 1 if lance_tables.table_exists(output, opts) else 1
    made_with = dict(job.made_with)
    if prior is not None:
        prior.check_made_like(cfg, made_with)
    growth = Growth.of(prior, [], rejects) if prior is not None else None
    totals = growth.totals(counts) if growth else counts
    source = f"{RAY_INPUT}#v{version}"  # one Ray Data step: the files it read are the pipeline's, not prep's to list
    step = Step(version=version, added=(source,), rows_added=counts.rows_written, tokens_added=counts.tokens)
    metadata = TableMetadata.from_json({
        "format": TABLE_FORMAT, "prep_version": prep.__version__,
        "config": cfg.model_dump(mode="json", exclude={"s3"}), "config_hash": config_hash(cfg),
        "sources": [s.to_json() for s in (growth.kept_sources([]) if growth else [])] + [{"uri": source, "counts": counts.to_json()}],
        "counts": totals.to_json(), "rejects_uri": rejects,
        "history": [h.to_json() for h in ((prior.metadata.history if prior else ()) + (step,))],
        **made_with,
    }, output)
    for lease in leases:
        lease.check()  # a run that lost its lease commits nothing
    metadata = commit_and_reconcile(results, counts, schema=job.schema(), metadata=metadata, output=output, rejects=rejects,
                                    s3=s3, max_reject_fraction=max_reject_fraction, growth=growth)
    if mode == "overwrite" or orphan:
        drop_old_versions(cfg, s3)
        faults.maybe_raise("commit", "cleaned")
    return {
        "table": output, "rejects": rejects, "kind": metadata.kind, "mode": mode, "blocks": len(results),
        "step": metadata.history[-1].to_json(), **{k: getattr(counts, k) for k in REQUIRED_COUNTS},
        **({"tokens": counts.tokens, "tokens_trained": counts.tokens_trained} if metadata.kind != "images" else {}),
        "counts": counts.to_json(),
        "seconds": {"write": round(seconds["write"], 2), "total": round(time.perf_counter() - seconds["start"], 2),
                    "in_workers": round(sum(r.seconds for r in results), 2)},
    }


def _absolute(uri: str) -> str:
    """``uri`` as Ray workers must see it: they do not share the driver's working directory."""
    return uri if storage.is_remote(uri) else os.path.abspath(os.path.expanduser(uri))


def read_table(uri: str, columns: list[str] | None = None, version: int | None = None, *,
               s3: Mapping[str, Any] | None = None, **read_lance: Any) -> Any:
    """A committed prep table as a ``ray.data.Dataset`` (``ray.data.read_lance`` with prep's storage options).

    Args:
        uri: the table (local path or ``s3://``).
        columns: the columns to read (default: all).
        version: a version one of the table's steps committed (default: its latest).
        s3: S3 endpoint and credentials (the keys of ``s3:`` in a config); default: the environment.
        **read_lance: passed to ``ray.data.read_lance`` (``filter``, ``override_num_blocks``...).

    Raises:
        PrepError: no table, a table prep did not write, a rejects table, or a version that is not a
            finished step (the rows of a step whose metadata never committed).
    """
    import ray.data

    s3_opts = S3Config.model_validate(dict(s3 or {})).options().resolved()
    uri = _absolute(uri)
    opts = storage.lance_storage_options(uri, s3_opts)
    ds = lance_tables.open_table(uri, version=version, storage_options=opts)
    before = lance_tables.unfinished(ds)
    if before is not None:
        raise PrepError(f"{uri} version {ds.version} holds the rows of a step that did not finish (its metadata never "
                        f"committed): read version={before}, or rerun the step that was interrupted")
    meta = read_table_metadata(ds, uri)
    finished = {h.version for h in meta.history}
    if None not in finished and ds.version not in finished:
        raise PrepError(f"{uri} version {ds.version} is not a step prep committed (steps: {sorted(finished)}); "
                        f"read one of those versions")
    unknown = sorted(set(columns or ()) - set(ds.schema.names))
    if unknown:
        raise PrepError(f"{uri} has no column {unknown[0]!r} (columns: {ds.schema.names})")
    return ray.data.read_lance(uri, columns=columns, version=ds.version, storage_options=opts, **read_lance)
