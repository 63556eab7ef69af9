"""Token rows as flat NumPy buffers: encode, enforce a length limit, pack.

Rows are held as one ``ids`` buffer, one ``mask`` buffer and ``offsets`` (the
Arrow list layout), so every step after the tokenizer is a handful of vectorized
NumPy operations and the result becomes Arrow without copying row by row.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np
import pyarrow as pa

from prep.prepare import faults
from prep.prepare.text.chat_template import Spans
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

    @property
    def trained(self) -> np.ndarray:
        """Trained tokens (loss mask 1) per row."""
        total = np.concatenate(([0], np.cumsum(self.mask, dtype=np.int64)))
        return total[self.offsets[1:]] - total[self.offsets[:-1]]

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
    """Tokenizes each row's text at once (one batch call per kind, below) and marks the tokens of its trainable segments.

    A row is tokenized as one string, as ``apply_chat_template`` tokenizes a rendered chat (tokenizing
    prompt and response apart gives other ids wherever the tokenizer treats the start of a string
    specially, e.g. SentencePiece's prefix space). A token is trained on when its characters overlap a
    trainable segment: transformers' rule for ``return_assistant_tokens_mask``.

    Character offsets cost about a quarter more than the ids (the tokenizer maps every byte to its
    character), so a row gets them only when it needs them: a row trained throughout or not at all needs
    none, and neither does a row whose every trained span starts and ends at the edge of a special token
    the tokenizer always cuts at (:class:`Cuts`: ``[/INST]``, ``</s>``...): the token index of such an edge
    is where that token's occurrence is in the ids.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (e.g. ``ResolvedTokenizer.backend()``).
        segments: rows as flat segments.
        eos_id: if given, appended to every row (pretraining documents).
    """
    return _encode(tokenizer, segments, eos_id, Cuts.of(tokenizer))


def _encode(tokenizer: Any, segments: Segments, eos_id: int | None, cuts: "Cuts") -> TokenRows:
    """:func:`encode_segments` with the given cuts (tests pass none, to compare with offsets everywhere)."""
    texts, spans = segments.rows()
    trained = segments.trainable
    if all(trained) or not any(trained):  # every token trained on, or none (pretraining): no span to find
        encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        ids, row_len, offsets = _flat_ids(encodings)
        return _with_eos(ids, np.full(len(ids), int(any(trained)), np.int8), row_len, offsets, eos_id)
    edges_of = [cuts.edges(t, s) for t, s in zip(texts, spans)]  # None: this row needs offsets
    slow = [i for i, e in enumerate(edges_of) if e is None]
    encodings = _encode_batches(tokenizer, texts, slow)
    ids, row_len, offsets = _flat_ids(encodings)
    starts, ends, unsure = cuts.locate(edges_of, ids, offsets)
    by_offsets = [(row, encodings[row]) for row in slow]
    by_offsets += [(row, tokenizer.encode(texts[row], add_special_tokens=False)) for row in unsure]  # ids did not add up
    found = [(offsets[row] + lo, offsets[row] + hi) for row, encoding in by_offsets
             for lo, hi in (_overlapping(encoding, int(row_len[row]), s, e) for s, e in spans[row])]
    if found:
        starts, ends = np.concatenate([starts, [f[0] for f in found]]), np.concatenate([ends, [f[1] for f in found]])
    edges = np.zeros(len(ids) + 1, np.int32)  # +1 where a trained run of tokens starts, -1 after it ends
    np.add.at(edges, starts.astype(np.int64), 1)
    np.add.at(edges, ends.astype(np.int64), -1)
    mask = (np.cumsum(edges[:-1]) > 0).astype(np.int8)
    return _with_eos(ids, mask, row_len, offsets, eos_id)


def _flat_ids(encodings: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The encodings' ids end to end, each row's length, and where each row starts (and the end)."""
    seg_ids = [e.ids for e in encodings]
    row_len = np.fromiter(map(len, seg_ids), np.int64, count=len(seg_ids))
    ids = np.fromiter(itertools.chain.from_iterable(seg_ids), np.int32, count=int(row_len.sum()))
    return ids, row_len, _offsets(row_len)


def _with_eos(ids: np.ndarray, mask: np.ndarray, row_len: np.ndarray, offsets: np.ndarray, eos_id: int | None) -> TokenRows:
    """The rows, each with ``eos_id`` (trained on) appended when it is given."""
    if eos_id is not None:
        ids = np.insert(ids, offsets[1:], np.int32(eos_id))
        mask = np.insert(mask, offsets[1:], np.int8(1))
        offsets = _offsets(row_len + 1)
    return TokenRows(ids, mask, offsets)


def _encode_batches(tokenizer: Any, texts: list[str], slow: list[int]) -> list[Any]:
    """Every row's encoding: the rows in ``slow`` with character offsets, the rest without (one batch call each)."""
    if not slow:
        return tokenizer.encode_batch_fast(texts, add_special_tokens=False)
    if len(slow) == len(texts):
        return tokenizer.encode_batch(texts, add_special_tokens=False)
    slow_set = set(slow)
    fast = [i for i in range(len(texts)) if i not in slow_set]
    out: list[Any] = [None] * len(texts)
    for rows, batch in ((fast, tokenizer.encode_batch_fast([texts[i] for i in fast], add_special_tokens=False)),
                        (slow, tokenizer.encode_batch([texts[i] for i in slow], add_special_tokens=False))):
        for i, encoding in zip(rows, batch):
            out[i] = encoding
    return out


# An edge of a trained span, found in the ids: (token id, n, follows, total): the index of the n-th (1-based) token
# with that id, plus ``follows`` (1: the edge follows that token, 0: it precedes it); ``total``: how many times its
# text occurs in the row's text, which the row's ids must agree with.
Edge = tuple[int, int, int, int]
Edges = list[tuple["Edge | int", "Edge | None"]]  # per span: its start (0: the row's start) and end (None: the row's end)


class Cuts:
    """The special tokens at whose edges a tokenizer always cuts, and whose ids come from nothing else.

    ``tokenizers`` splits a text at its added tokens before anything else, so no token spans the edge of one. A
    token ``S`` qualifies when every occurrence of its text is that one token and its id comes from nothing else:
    matched on the raw text (not normalized), with no ``lstrip``/``rstrip``/``single_word`` rule, no other added
    token able to overlap or contain an occurrence, not a text the model can build (a BPE model without
    ``ignore_merges``, subword affixes or dropout, no merge giving ``S``, not its unknown or a byte-fallback token).
    Then the k-th occurrence of ``S`` in a row's text is the k-th ``S`` id in its ids; each row also checks that
    the two counts agree, and is encoded with offsets if they do not.
    """

    def __init__(self, added: dict[str, dict[str, Any]], model: dict[str, Any], special_split: bool) -> None:
        self._added = added
        self._raw = {c for c, t in added.items() if not t.get("normalized", True)}
        self._lengths = sorted({len(c) for c in self._raw}, reverse=True) if special_split else []
        self._model = model
        self._built: set[str] | None = None
        self._ids: dict[str, int | None] = {}
        self._recent: list[tuple[str, int]] = []  # qualifying tokens last found at an edge, the latest first

    @classmethod
    def of(cls, tokenizer: Any) -> "Cuts":
        """The cuts of ``tokenizer`` (worked out once per tokenizer object)."""
        key = id(tokenizer)
        if key not in _CUTS:
            spec = json.loads(tokenizer.to_str())
            added = {t["content"]: t for t in spec.get("added_tokens") or []}
            _CUTS[key] = (tokenizer, cls(added, spec.get("model") or {}, not tokenizer.encode_special_tokens))
        return _CUTS[key][1]

    def _id(self, text: str) -> int | None:
        """The id of added token ``text`` if the tokenizer always cuts at its edges (see the class), else None."""
        if text not in self._ids:
            self._ids[text] = self._qualify(text)
        return self._ids[text]

    def _qualify(self, text: str) -> int | None:
        token, model = self._added[text], self._model
        if (token.get("lstrip") or token.get("rstrip") or token.get("single_word") or len(text) < 2
                or model.get("type") != "BPE" or model.get("ignore_merges") or model.get("dropout")
                or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")
                or text == model.get("unk_token") or _BYTE_TOKEN.fullmatch(text)):
            return None
        if self._built is None:
            self._built = {"".join(m.split(" ") if isinstance(m, str) else m) for m in model.get("merges") or []}
        if text in self._built or _self_overlaps(text):
            return None
        if any(other != text and (text in other or _overlaps(other, text)) for other in self._raw):
            return None
        if sum(t["id"] == token["id"] for t in self._added.values()) != 1:
            return None
        return int(token["id"])

    def _edge(self, text: str, at: int) -> Edge | None:
        """The edge at character ``at``: right after or right before a qualifying token, or None."""
        for piece, token_id in self._recent:  # a frame puts the same tokens at its edges: try those first
            if at >= len(piece) and text.startswith(piece, at - len(piece)):
                before = text.count(piece, 0, at)
                return token_id, before, 1, before + text.count(piece, at)
            if text.startswith(piece, at):
                before = text.count(piece, 0, at)
                return token_id, before + 1, 0, before + text.count(piece, at)
        for size in self._lengths:
            before, after = text[max(0, at - size):at], text[at:at + size]
            for piece, nth_extra, follows in ((before, 0, 1), (after, 1, 0)):
                if len(piece) == size and piece in self._raw:
                    token_id = self._id(piece)
                    if token_id is not None:
                        self._recent = [(piece, token_id)] + self._recent[:7]
                        return token_id, text.count(piece, 0, at) + nth_extra, follows, text.count(piece)
        return None

    def edges(self, text: str, spans: Spans) -> Edges | None:
        """Each span's edges, to be found in the ids; None if one is not at a qualifying token (the row needs offsets)."""
        out: Edges = []
        for start, end in spans:
            lo = 0 if start == 0 else self._edge(text, start)
            hi = None if end == len(text) else self._edge(text, end)
            if lo is None or (hi is None and end != len(text)):
                return None
            out.append((lo, hi))
        return out

    @staticmethod
    def locate(edges_of: list[Edges | None], ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """Where the spans of rows with known edges start and end in ``ids`` (the chunk's, rows at ``offsets``),
        without a Python step per row; and the rows whose ids hold a token another number of times than their
        text holds its text (the per-row check: those rows are left to offsets).

        Returns:
            (starts, ends, unsure): token positions in ``ids`` of every located span, and the unsure rows.
        """
        span_row = np.array([row for row, edges in enumerate(edges_of) for _ in edges or ()], np.int64)
        bounds = [(lo, hi) for edges in edges_of for lo, hi in edges or ()]
        starts, start_ok = _positions([b[0] for b in bounds], span_row, ids, offsets, offsets[:-1])
        ends, end_ok = _positions([b[1] for b in bounds], span_row, ids, offsets, offsets[1:])
        unsure = np.unique(span_row[~(start_ok & end_ok)])
        keep = ~np.isin(span_row, unsure)
        return starts[keep], ends[keep], unsure.tolist()


def _positions(edges: list[Any], span_row: np.ndarray, ids: np.ndarray, offsets: np.ndarray,
               default: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each edge's position in ``ids`` (``default[row]`` for the row's own start or end), and whether its row's ids
    hold its token as many times as the text holds its text."""
    out = default[span_row] if len(span_row) else np.zeros(0, np.int64)
    ok = np.ones(len(span_row), bool)
    at_token = np.array([i for i, e in enumerate(edges) if isinstance(e, tuple)], np.int64)
    if not len(at_token):
        return out, ok
    table = np.array([edges[i] for i in at_token], np.int64)  # columns: token id, n, follows, total
    for token_id in np.unique(table[:, 0]):
        pick = table[:, 0] == token_id
        which, (_, nth, follows, total) = at_token[pick], table[pick].T
        where = np.flatnonzero(ids == token_id)  # every occurrence in the chunk, in order
        counts = np.bincount(np.searchsorted(offsets, where, side="right") - 1, minlength=len(offsets) - 1)
        rows = span_row[which]
        agree = counts[rows] == total
        ok[which] = agree
        if agree.any():
            first = _offsets(counts)[:-1]  # each row's first occurrence, as an index into ``where``
            out[which[agree]] = where[first[rows[agree]] + nth[agree] - 1] + follows[agree]
    return out, ok


_CUTS: dict[int, tuple[Any, Cuts]] = {}  # id(tokenizer) -> (tokenizer, its cuts): the tokenizer is kept so its id is not reused
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _self_overlaps(text: str) -> bool:
    """Whether two occurrences of ``text`` can overlap (a proper prefix equals a proper suffix)."""
    return any(text[:i] == text[-i:] for i in range(1, len(text)))


def _overlaps(a: str, b: str) -> bool:
    """Whether an occurrence of ``a`` can overlap one of ``b`` without either containing the other."""
    return any(a.endswith(b[:i]) for i in range(1, len(b))) or any(b.endswith(a[:i]) for i in range(1, len(a)))


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
