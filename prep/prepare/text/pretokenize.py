"""The pretokenize job: text sources -> a tokenized Lance table (+ rejects).

The same :func:`run_pretokenize` runs under ``ray job submit`` (it joins the
cluster through ``RAY_ADDRESS``), from ``python pipelines/pretokenize.py`` and from
``prep pretokenize`` (on this machine unless there is a cluster to join), through
the one prepare driver (:mod:`prep.prepare.driver`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Sequence

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from prep.errors import one_line
from prep.contracts.counts import Counts
from prep.io import storage
from prep.runtime.config import ConfigModel, JobConfig
from prep.prepare import faults
from prep.prepare.text.formats import RowError, Segments, SFTFormatter, TextFormatter
from prep.prepare.driver import ChunkPlan, run_prepare
from prep.prepare.summary import what_it_did, where_it_ran
from prep.prepare.growth import Prior, Selection
from prep.prepare.ids import stable_ids
from prep.prepare.isolation import NO_PROGRESS, Progress
from prep.prepare.chunk_runner import ChunkOutput
from prep.prepare.rejects import RAW_PREFIX_CHARS, Reject
from prep.prepare.text.readers import read_chunk
from prep.prepare.text.sources import Chunk, InputFormat, Records, TextUnit, list_sources, plan_chunks
from prep.prepare.text.tokenizer import ResolvedTokenizer, resolve_tokenizer
from prep.prepare.text.tokens import OverlongPolicy, encode_rows, limit_length, pack

__all__ = ["PretokenizeConfig", "SFTConfig", "PackConfig", "TextJob", "TextChunkWorker", "make_formatter", "run_pretokenize",
           "table_schema", "format_summary", "piece_ids"]

log = logging.getLogger(__name__)

IdRule = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``ids(positions, piece) -> uint64 ids`` of a chunk's unpacked rows (:meth:`TextChunkWorker.encode`)."""


class SFTConfig(ConfigModel):
    """How SFT rows become prompt + response.

    Attributes:
        layout: ``auto`` (per row), ``alpaca`` (instruction/input/output), ``qa`` (question/answer), ``messages``.
        messages_column: the column with a list of ``{role, content}``.
        prompt_template: a format string over ``{prompt}``; with it, the chat template is not used.
        response_template: a format string over ``{response}`` (EOS is appended).
    """

    layout: Literal["auto", "alpaca", "qa", "messages"] = "auto"
    messages_column: str = "messages"
    prompt_template: str | None = None
    response_template: str | None = None


class PackConfig(ConfigModel):
    """Pack rows into fixed ``seq_len`` sequences (document boundaries kept in ``position_ids``)."""

    seq_len: int = Field(ge=8)


class PretokenizeConfig(JobConfig):
    """A pretokenize job (see configs/*.yaml for examples).

    Attributes:
        tokenizer: ``builtin:mistral-v3``, a local directory or a HuggingFace hub id.
        format: ``sft`` (loss on responses only) or ``pretrain`` (documents + EOS).
        input_format: ``auto`` (by extension) or one of jsonl/json/parquet/csv/text.
        text_unit: for plain text files, what a document is: a ``line``, a ``paragraph`` or the ``file``.
        text_column: the document field for structured pretraining rows.
        max_length: the longest row allowed (tokens); None for no limit.
        overlong: what to do with longer rows: ``truncate``, ``reject`` or ``split``.
        pack: pack rows into fixed-length sequences (`pack: {seq_len: N}`, or `pack: N` for short).
        passthrough: source fields copied to the table as strings (not with ``pack``).
    """

    tokenizer: str
    format: Literal["sft", "pretrain"]
    input_format: InputFormat = "auto"
    text_unit: TextUnit = "paragraph"
    text_column: str = "text"
    sft: SFTConfig = SFTConfig()
    max_length: int | None = Field(default=None, ge=1)
    overlong: OverlongPolicy = "reject"
    pack: PackConfig | None = None
    passthrough: list[str] = []

    @field_validator("pack", mode="before")
    @classmethod
    def _pack_seq_len(cls, value: Any) -> Any:
        """``pack: 2048`` (and ``--pack 2048``) is short for ``pack: {seq_len: 2048}``."""
        return {"seq_len": value} if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _check(self) -> "PretokenizeConfig":
        if self.pack and self.passthrough:
            raise ValueError("passthrough columns cannot be kept when packing (a packed row mixes documents)")
        reserved = {"id", "input_ids", "loss_mask", "length", "position_ids"} & set(self.passthrough)
        if reserved:
            raise ValueError(f"passthrough names {sorted(reserved)} clash with prep's columns")
        return self

    @property
    def kind(self) -> str:
        return "packed" if self.pack else self.format


def table_schema(cfg: PretokenizeConfig) -> pa.Schema:
    """The prepared table's Arrow schema for ``cfg`` (docs/architecture.md)."""
    if cfg.pack:
        n = cfg.pack.seq_len
        return pa.schema(
            [
                ("id", pa.uint64()),
                ("input_ids", pa.list_(pa.int32(), n)),
                ("loss_mask", pa.list_(pa.int8(), n)),
                ("position_ids", pa.list_(pa.int32(), n)),
                ("length", pa.int32()),
            ]
        )
    fields = [("id", pa.uint64()), ("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8())), ("length", pa.int32())]
    return pa.schema(fields + [(c, pa.string()) for c in cfg.passthrough])


@dataclass(frozen=True)
class TextChunkWorker:
    """Reads, formats, tokenizes (and packs) one chunk. Runs inside Ray tasks.

    Whatever one row raises at any stage (parse, format, template, tokenize, its
    passthrough fields) makes that row a reject naming the stage, the exception's type
    and message; only what is not about one row (reading or writing the chunk, a
    tokenizer that fails on every row) fails the chunk.
    """

    cfg: PretokenizeConfig
    tokenizer: ResolvedTokenizer
    s3: storage.S3Options  # resolved by the driver: cluster workers do not share its environment
    formatter: SFTFormatter | TextFormatter  # made by the driver (make_formatter): its proved frames travel with it

    def __call__(self, chunk: Chunk, progress: Progress = NO_PROGRESS) -> ChunkOutput:
        key = chunk.source.ids_from
        return self.encode(read_chunk(chunk, self.s3, self.cfg.text_unit), chunk.source.uri,
                           lambda positions, piece: piece_ids(key, positions, piece), f"{key}#packed@{chunk.start}", progress)

    def encode(self, records: Records, source: str, ids: IdRule, packed_key: str, progress: Progress = NO_PROGRESS) -> ChunkOutput:
        """``records`` (rows read from ``source``, or handed in by a Ray Data pipeline) as table rows, rejects and counts.

        ``ids(positions, piece)`` gives the ids of unpacked rows from their records' positions and their piece
        numbers (0, or 1, 2... for the later pieces of a split row); packed rows are numbered under ``packed_key``.
        """
        cfg, tok = self.cfg, self.tokenizer
        counts: Counter = Counter()
        rejects = list(records.rejects)
        counts["rows_read"] = len(records.rows) + sum(r.is_row for r in rejects)
        counts["files_rejected"] = sum(not r.is_row for r in rejects)
        counts["blank_lines"] = records.blank_lines

        formatter = self.formatter
        segments, kept, extra = Segments(), [], []
        armed = faults.active()
        for (i, row), poison in progress.items(enumerate(records.rows), name=lambda item: _raw(item[1])):
            try:
                if poison is not None:  # crashed or hung this worker before: rejected, not formatted again
                    raise RowError(poison)
                if armed:
                    faults.maybe_raise("format", _raw(row))
                row_segments = formatter(row)
                passed = [_as_text(row, name) for name in cfg.passthrough]
            except RowError as exc:
                rejects.append(Reject(source, records.position_label(i), str(exc), _raw(row)))
                continue
            except Exception as exc:  # whatever one row raises costs that row only
                rejects.append(Reject(source, records.position_label(i), _failed("format", exc), _raw(row)))
                continue
            segments.add_row(row_segments)
            kept.append(i)
            extra.append(passed)
        rows, failed = encode_rows(tok.backend(), segments, eos_id=tok.eos_id if cfg.format == "pretrain" else None,
                                   name=lambda j: _raw(records.rows[kept[j]]))
        for j, exc in failed.items():
            i = kept[j]
            rejects.append(Reject(source, records.position_label(i), _failed("tokenize", exc, _segments_of(segments, j)), _raw(records.rows[i])))
        if failed:
            kept, extra = [k for j, k in enumerate(kept) if j not in failed], [e for j, e in enumerate(extra) if j not in failed]
        kept_idx = np.asarray(kept, np.int64)

        source_row, piece = np.arange(rows.num_rows), np.zeros(rows.num_rows, np.int64)
        lengths = rows.lengths
        if cfg.max_length is not None:
            over = np.flatnonzero(lengths > cfg.max_length)
            counts[f"rows_over_max_length_{cfg.overlong}"] = len(over)
            if cfg.overlong == "truncate":
                counts["tokens_truncated"] = int((lengths[over] - cfg.max_length).sum())
            if cfg.overlong == "reject":
                rejects += [
                    Reject(source, records.position_label(int(kept_idx[j])), f"{int(lengths[j])} tokens > max_length {cfg.max_length}", _raw(records.rows[int(kept_idx[j])]))
                    for j in over
                ]
            rows, source_row, piece = limit_length(rows, cfg.max_length, cfg.overlong)
        trains = rows.trained > 0
        if not trains.all():  # SFT only: a pretraining row trains on all its tokens
            training = np.isin(source_row, source_row[trains])
            left_out = ~trains & training  # split pieces of prompt only: a row that trains nothing (0/0 in a per-row loss)
            counts["pieces_untrained"] = int(left_out.sum())
            counts["pieces_untrained_tokens"] = int(rows.lengths[left_out].sum())
            rejects += [Reject(source, records.position_label(int(kept_idx[j])), self._untrained(int(lengths[j])),
                               _raw(records.rows[int(kept_idx[j])])) for j in np.unique(source_row[~training])]
            rows, source_row, piece = rows.select(trains), source_row[trains], piece[trains]

        counts["rows_rejected"] = sum(r.is_row for r in rejects)
        counts["rows_accepted"] = len(np.unique(source_row))  # source rows that reached the output, counted on it
        counts["tokens"] = len(rows.ids)
        counts["tokens_trained"] = int(rows.mask.sum())
        positions = records.positions[kept_idx[source_row]] if len(source_row) else np.zeros(0, np.int64)
        if cfg.pack:
            packed = pack(rows, cfg.pack.seq_len, tok.pad_id if tok.pad_id is not None else 0)
            counts["pad_tokens"] = packed.pad_tokens
            n, width = packed.input_ids.shape if packed.input_ids.size else (0, cfg.pack.seq_len)
            table = pa.table(
                {
                    "id": stable_ids(packed_key, np.arange(n)),
                    "input_ids": pa.FixedSizeListArray.from_arrays(packed.input_ids.ravel(), width),
                    "loss_mask": pa.FixedSizeListArray.from_arrays(packed.loss_mask.ravel(), width),
                    "position_ids": pa.FixedSizeListArray.from_arrays(packed.position_ids.ravel(), width),
                    "length": packed.length,
                },
                schema=table_schema(cfg),
            )
        else:
            input_ids, loss_mask = rows.arrow_lists()
            columns: dict[str, Any] = {
                "id": ids(positions, piece),
                "input_ids": input_ids,
                "loss_mask": loss_mask,
                "length": rows.lengths.astype(np.int32),
            }
            for c, name in enumerate(cfg.passthrough):
                columns[name] = [extra[r][c] for r in source_row]
            table = pa.table(columns, schema=table_schema(cfg))
        counts["rows_written"] = table.num_rows
        return ChunkOutput(table, rejects, counts)

    def _untrained(self, length: int) -> str:
        """The reject reason of a row none of whose written tokens is trained on."""
        cfg = self.cfg
        if cfg.max_length is not None and length > cfg.max_length and cfg.overlong == "truncate":
            return (f"no trained token in its first {cfg.max_length} tokens (of {length}): overlong: truncate cut all "
                    "of the response; raise max_length or use overlong: split")
        return "no trained token: the chat template marks none of this row's text for training"


def make_formatter(cfg: PretokenizeConfig, tokenizer: ResolvedTokenizer) -> SFTFormatter | TextFormatter:
    """The job's formatter, with the frame of single-turn rows (qa, alpaca, the commonest messages) proved.

    Raises:
        PrepError: an SFT job without a chat template or format strings, or a template that does not compile.
    """
    if cfg.format != "sft":
        return TextFormatter(cfg.text_column)
    sft = cfg.sft
    formatter = SFTFormatter(tokenizer, schema=sft.layout, messages_column=sft.messages_column,
                             prompt_template=sft.prompt_template, response_template=sft.response_template)
    formatter.prove_frames([("user", "assistant")])
    return formatter


def piece_ids(key: str, positions: np.ndarray, piece: np.ndarray) -> np.ndarray:
    """Piece 0 keeps the row's own id; later pieces of a split row get salted ids."""
    ids = stable_ids(key, positions, 0)
    later = piece > 0
    ids[later] = stable_ids(key, positions[later] * 1_000_003 + piece[later], 1)
    return ids


def _raw(row: Any) -> str:
    """A prefix of the row as text, for its reject (never raises: it describes rows that did)."""
    if isinstance(row, str):
        return row[:RAW_PREFIX_CHARS]
    try:
        return json.dumps(row, ensure_ascii=False, default=str)[:RAW_PREFIX_CHARS]
    except Exception:  # nested past the encoder's limit, or worse
        return f"<a {type(row).__name__} that cannot be shown>"


def _failed(stage: str, exc: BaseException, texts: Sequence[str] = ()) -> str:
    """A reject reason for an exception one row raised at ``stage``."""
    if stage == "tokenize" and any(_has_surrogate(t) for t in texts):
        return "tokenize: the text holds a lone surrogate (e.g. a JSON \\ud800 escape), which is not Unicode text"
    return f"{stage}: {type(exc).__name__}: {one_line(exc, limit=200)}"


def _has_surrogate(text: str) -> bool:
    try:
        text.encode()
        return False
    except UnicodeEncodeError:
        return True


def _segments_of(segments: Segments, row: int) -> list[str]:
    """The texts of ``row`` in ``segments``."""
    start = sum(segments.counts[:row])
    return segments.texts[start:start + segments.counts[row]]


def _as_text(row: Any, name: str) -> str | None:
    """A passthrough field as a string Arrow can store (a row whose field cannot be is rejected)."""
    value = row.get(name) if isinstance(row, dict) else None
    text = value if value is None or isinstance(value, str) else json.dumps(value, default=str)
    if text is not None:
        text.encode()  # a lone surrogate raises here, for this row, not in the chunk's table
    return text


@dataclass(frozen=True)
class TextJob:
    """The pretokenize job for :func:`prep.prepare.driver.run_prepare`."""

    cfg: PretokenizeConfig
    name: str = "pretokenize"
    sandbox_imports: ClassVar[tuple[str, ...]] = ("prep.prepare.text.pretokenize", "tokenizers")

    def plan(self, s3: storage.S3Options, prior: Prior | None = None) -> ChunkPlan:
        cfg = self.cfg
        listed = list_sources(cfg.inputs, cfg.input_format, s3, id_root=prior.id_root() if prior else None)
        picked = prior.select(listed, update=cfg.update, remove_missing=cfg.remove_missing) if prior else Selection.everything(listed)
        tokenizer = resolve_tokenizer(cfg.tokenizer)  # here: a bad tokenizer fails before Ray starts
        formatter = make_formatter(cfg, tokenizer)  # and a missing or broken chat template
        chunks = plan_chunks(picked.files, cfg.chunk_bytes, cfg.text_unit, s3)
        return ChunkPlan(chunks, [s.describe() for s in picked.files], {"tokenizer": tokenizer, "formatter": formatter},
                         chunk_sources=[c.source.uri for c in chunks], replaced=picked.replaced, unchanged=picked.unchanged,
                         removed=picked.removed, moved=picked.moved, missing=picked.missing)

    def worker(self, plan: ChunkPlan, s3: storage.S3Options) -> TextChunkWorker:
        return TextChunkWorker(self.cfg, plan.details["tokenizer"], s3, plan.details["formatter"])

    def schema(self) -> pa.Schema:
        return table_schema(self.cfg)

    def metadata(self, plan: ChunkPlan, counts: Counts) -> dict[str, Any]:
        cfg = self.cfg
        return {"kind": cfg.kind, "tokenizer": plan.details["tokenizer"].identity(), "seq_len": cfg.pack.seq_len if cfg.pack else None}

    def summary(self, plan: ChunkPlan, counts: Counts) -> dict[str, Any]:
        split = self.cfg.max_length is not None and self.cfg.overlong == "split"
        return {"tokens": counts.tokens, "tokens_trained": counts.tokens_trained,
                **({"pad_tokens": counts.pad_tokens} if self.cfg.pack else {}),
                **({"pieces_untrained": counts.pieces_untrained, "pieces_untrained_tokens": counts.pieces_untrained_tokens} if split else {})}


def run_pretokenize(cfg: PretokenizeConfig) -> dict[str, Any]:
    """Runs the job; returns a summary (rows, tokens, rejects, path, timings).

    Raises:
        PrepError: bad input paths, an output prep may not replace, a failed chunk.
    """
    return run_prepare(TextJob(cfg))


def format_summary(summary: dict[str, Any]) -> str:
    """A few lines a person reads after a run (also what the README shows)."""
    s = summary
    if s["step"]["version"] is None and s["mode"] in ("append", "update"):
        return "\n".join(what_it_did(s))
    lines = [
        *what_it_did(s),
        f"  rows: read {s['rows_read']:,} = written {s['rows_accepted']:,} + rejected {s['rows_rejected']:,}"
        + (f" -> {s['rows_written']:,} table rows" if s["rows_written"] != s["rows_accepted"] else ""),
        f"  tokens: {s['tokens']:,} ({s['tokens_trained']:,} trained on)" + (f", {s['pad_tokens']:,} pad" if "pad_tokens" in s else ""),
        *([f"  split: {s['pieces_untrained']:,} piece(s) of prompt only ({s['pieces_untrained_tokens']:,} tokens, none trained) left out"]
          if s.get("pieces_untrained") else []),
        f"  rejects: {s['rejects']}",
        f"  time: {s['seconds']['total']}s ({where_it_ran(s)}job {s['seconds']['job']}s) over {s['chunks']} chunks of {s['sources']} files",
    ]
    return "\n".join(lines)
