"""Token rows as flat NumPy buffers: encode, enforce a length limit, pack.

Rows are held as one ``ids`` buffer, one ``mask`` buffer and ``offsets`` (the
Arrow list layout), so every step after the tokenizer is a handful of vectorized
NumPy operations and the result becomes Arrow without copying row by row.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np
import pyarrow as pa

from prep.prepare import faults
from prep.prepare.text.formats import Segments

__all__ = ["TokenRows", "Packed", "encode_segments", "encode_rows", "limit_length", "pack", "OverlongPolicy"]

OverlongPolicy = Literal["truncate", "reject", "split"]


@dataclass
class TokenRows:
    """Variable-length token rows: row ``i`` is ``ids[offsets[i]:offsets[i+1]]``."""

    ids: np.ndarray  # int32
    mask: np.ndarray  # int8, 1 = trained on
    offsets: np.ndarray  # int64, len = rows + 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    def select(self, keep: np.ndarray) -> "TokenRows":
        """The rows where ``keep`` (bool per row) is true."""
        lengths = self.lengths
        token_keep = np.repeat(keep, lengths)
        return TokenRows(self.ids[token_keep], self.mask[token_keep], _offsets(lengths[keep]))

    def arrow_lists(self) -> tuple[pa.Array, pa.Array]:
        offsets = pa.array(self.offsets.astype(np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array(self.ids)), pa.ListArray.from_arrays(offsets, pa.array(self.mask))


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def encode_segments(tokenizer: Any, segments: Segments, eos_id: int | None = None) -> TokenRows:
    """Tokenizes each row's text at once (one batch call) and marks the tokens of its trainable segments.

    A row is tokenized as one string, as ``apply_chat_template`` tokenizes a rendered chat (tokenizing
    prompt and response apart gives other ids wherever the tokenizer treats the start of a string
    specially, e.g. SentencePiece's prefix space). A token is trained on when its characters overlap a
    trainable segment: transformers' rule for ``return_assistant_tokens_mask``.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (e.g. ``ResolvedTokenizer.backend()``).
        segments: rows as flat segments.
        eos_id: if given, appended to every row (pretraining documents).
    """
    texts, spans = segments.rows()
    uniform = all(not s or s == [(0, len(t))] for t, s in zip(texts, spans))
    # offsets cost a third more than the ids: only rows that are partly trained need them
    encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False) if uniform else \
        tokenizer.encode_batch(texts, add_special_tokens=False)
    seg_ids = [e.ids for e in encodings]
    row_len = np.fromiter(map(len, seg_ids), np.int64, count=len(seg_ids))
    ids = np.fromiter(itertools.chain.from_iterable(seg_ids), np.int32, count=int(row_len.sum()))
    offsets = _offsets(row_len)
    edges = np.zeros(len(ids) + 1, np.int32)  # +1 where a trained run of tokens starts, -1 after it ends
    for row, (enc, row_spans) in enumerate(zip(encodings, spans)):
        for start, end in row_spans if not uniform else ((0, 1),) if row_spans else ():
            lo, hi = (0, int(row_len[row])) if uniform else _overlapping(enc, int(row_len[row]), start, end)
            edges[offsets[row] + lo] += 1
            edges[offsets[row] + hi] -= 1
    mask = (np.cumsum(edges[:-1]) > 0).astype(np.int8)
    if eos_id is not None:
        ids = np.insert(ids, offsets[1:], np.int32(eos_id))
        mask = np.insert(mask, offsets[1:], np.int8(1))
        offsets = _offsets(row_len + 1)
    return TokenRows(ids, mask, offsets)


def encode_rows(tokenizer: Any, segments: Segments, eos_id: int | None = None,
                name: Callable[[int], str] = str) -> tuple[TokenRows, dict[int, Exception]]:
    """:func:`encode_segments`, where a row the tokenizer refuses costs that row only.

    The whole chunk is one batch call; only if it raises is each row encoded alone to
    find the rows that raise (a lone surrogate makes the tokenizer raise ``TypeError``),
    and the rest is encoded again without them, so clean chunks pay nothing.

    Args:
        name: names row ``i`` for :func:`prep.prepare.faults.maybe_raise` (tests only).

    Returns:
        (rows, failed): the encoded rows without the failed ones, and ``{row index: exception}``.

    Raises:
        Exception: what the tokenizer raises when no single row is to blame.
    """
    rows = len(segments.counts)
    try:
        if faults.active():
            for i in range(rows):
                faults.maybe_raise("tokenize", name(i))
        return encode_segments(tokenizer, segments, eos_id), {}
    except Exception:
        pass
    failed: dict[int, Exception] = {}
    starts = _offsets(np.asarray(segments.counts, np.int64))
    for i in range(rows):
        try:
            if faults.active():
                faults.maybe_raise("tokenize", name(i))
            tokenizer.encode_batch_fast(segments.texts[starts[i]:starts[i + 1]], add_special_tokens=False)
        except Exception as exc:
            failed[i] = exc
    return encode_segments(tokenizer, _without(segments, starts, failed), eos_id), failed


def _without(segments: Segments, starts: np.ndarray, rows: dict[int, Exception]) -> Segments:
    """``segments`` less the given rows (``starts``: each row's first segment, and the end)."""
    kept = Segments()
    for i in range(len(segments.counts)):
        if i not in rows:
            kept.add_row(list(zip(segments.texts[starts[i]:starts[i + 1]], segments.trainable[starts[i]:starts[i + 1]])))
    return kept


def _overlapping(encoding: Any, n: int, start: int, end: int) -> tuple[int, int]:
    """The tokens ``[lo, hi)`` whose characters overlap ``[start, end)`` (binary searches, no offsets list)."""

    def first(pred: Any) -> int:
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(encoding.token_to_chars(mid)):
                hi = mid
            else:
                lo = mid + 1
        return lo

    return first(lambda chars: chars[1] > start), first(lambda chars: chars[0] >= end)


def limit_length(rows: TokenRows, max_length: int, policy: OverlongPolicy) -> tuple[TokenRows, np.ndarray, np.ndarray]:
    """Applies the over-long policy.

    Returns:
        (rows, source_row, piece): for every output row, the input row it came from
        and its piece number (0 unless ``split`` cut the row). Rows rejected under
        ``reject`` are absent; callers find them as input rows missing from ``source_row``.
    """
    lengths = rows.lengths
    n = rows.num_rows
    if policy == "reject":
        keep = lengths <= max_length
        return rows.select(keep), np.flatnonzero(keep), np.zeros(int(keep.sum()), np.int64)
    if policy == "truncate":
        within = np.arange(len(rows.ids)) - np.repeat(rows.offsets[:-1], lengths)
        keep_tok = within < max_length
        return TokenRows(rows.ids[keep_tok], rows.mask[keep_tok], _offsets(np.minimum(lengths, max_length))), np.arange(n), np.zeros(n, np.int64)
    pieces = np.maximum(1, -(-lengths // max_length))
    source_row = np.repeat(np.arange(n), pieces)
    first_piece = _offsets(pieces)[:-1]
    piece = np.arange(int(pieces.sum())) - np.repeat(first_piece, pieces)
    starts = rows.offsets[source_row] + piece * max_length
    ends = np.minimum(starts + max_length, rows.offsets[source_row + 1])
    return TokenRows(rows.ids, rows.mask, _offsets(ends - starts)), source_row, piece


@dataclass
class Packed:
    """Fixed-length rows: ``[num_rows, seq_len]`` buffers plus real-token counts."""

    input_ids: np.ndarray
    loss_mask: np.ndarray
    position_ids: np.ndarray
    length: np.ndarray
    pad_tokens: int


def pack(rows: TokenRows, seq_len: int, pad_id: int) -> Packed:
    """Concatenates rows into ``seq_len`` sequences, keeping every token.

    A document that crosses a sequence boundary continues in the next sequence.
    ``position_ids`` restart at 0 where a document starts and at each sequence
    start, so attention can be limited to documents. Only the last sequence is
    padded (``pad_id``, loss mask 0, position 0); the pad count is returned.

    >>> r = TokenRows(np.arange(5, dtype=np.int32), np.ones(5, np.int8), np.array([0, 3, 5]))
    >>> p = pack(r, 4, pad_id=0)
    >>> p.input_ids.tolist(), p.position_ids.tolist(), p.length.tolist(), p.pad_tokens
    ([[0, 1, 2, 3], [4, 0, 0, 0]], [[0, 1, 2, 0], [0, 0, 0, 0]], [4, 1], 3)
    """
    total = len(rows.ids)
    num = -(-total // seq_len)
    pad = num * seq_len - total
    token = np.arange(total)
    doc_start = np.repeat(rows.offsets[:-1], rows.lengths)
    row_start = (token // seq_len) * seq_len
    positions = (token - np.maximum(doc_start, row_start)).astype(np.int32)
    length = np.full(num, seq_len, np.int32)
    if num:
        length[-1] = seq_len - pad
    return Packed(
        input_ids=np.concatenate([rows.ids, np.full(pad, pad_id, np.int32)]).reshape(num, seq_len),
        loss_mask=np.concatenate([rows.mask, np.zeros(pad, np.int8)]).reshape(num, seq_len),
        position_ids=np.concatenate([positions, np.zeros(pad, np.int32)]).reshape(num, seq_len),
        length=length,
        pad_tokens=pad,
    )
