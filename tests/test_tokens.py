import numpy as np
import pytest

from prep.prepare.text.tokens import TokenRows, limit_length, pack


def rows_of(lengths):
    lengths = np.asarray(lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return TokenRows(np.arange(offsets[-1], dtype=np.int32), np.ones(offsets[-1], np.int8), offsets)


def test_reject_policy_drops_only_long_rows_and_reports_sources():
    out, source, piece = limit_length(rows_of([3, 9, 2]), 4, "reject")
    assert out.lengths.tolist() == [3, 2] and source.tolist() == [0, 2] and piece.tolist() == [0, 0]


def test_truncate_policy_keeps_prefixes():
    out, source, _ = limit_length(rows_of([3, 9, 2]), 4, "truncate")
    assert out.lengths.tolist() == [3, 4, 2]
    assert out.ids[3:7].tolist() == [3, 4, 5, 6]
    assert source.tolist() == [0, 1, 2]


def test_split_policy_keeps_every_token():
    rows = rows_of([3, 9, 2])
    out, source, piece = limit_length(rows, 4, "split")
    assert out.lengths.tolist() == [3, 4, 4, 1, 2]
    assert source.tolist() == [0, 1, 1, 1, 2] and piece.tolist() == [0, 0, 1, 2, 0]
    assert np.concatenate([out.ids[a:b] for a, b in zip(out.offsets[:-1], out.offsets[1:])]).tolist() == rows.ids.tolist()


@pytest.mark.parametrize("seq_len", [4, 7, 16, 64])
def test_packing_accounts_for_every_token(seq_len):
    rng = np.random.default_rng(seq_len)
    rows = rows_of(rng.integers(1, 20, size=50))
    p = pack(rows, seq_len, pad_id=-1)
    real = p.input_ids.ravel()[: len(rows.ids)]
    assert real.tolist() == rows.ids.tolist()
    assert int(p.length.sum()) == len(rows.ids)
    assert p.pad_tokens == p.input_ids.size - len(rows.ids) < seq_len
    assert (p.loss_mask.ravel()[len(rows.ids):] == 0).all()


def test_position_ids_restart_at_documents_and_sequence_starts():
    p = pack(rows_of([3, 6]), 4, pad_id=0)
    assert p.position_ids.tolist() == [[0, 1, 2, 0], [0, 1, 2, 3], [0, 0, 0, 0]]
    assert p.length.tolist() == [4, 4, 1] and p.pad_tokens == 3


# Contents that probe the ids-only mask: the template's own special tokens (whole, partial, doubled), other added
# tokens, nothing at all, characters the model spells in bytes, and whitespace that SentencePiece treats specially.
HOSTILE = ["[/INST]", "[INST]", "</s>", "<s>", "[/INST][/INST]", "[/INST", "INST]", "<unk>", "[control_8]", "",
           " ", "\n", "  spaced  ", "emoji \U0001f600 \u00fc \u4e2d\u6587", "\u00a0nbsp", "a[/INST]b</s>c", "</s></s>",
           "[TOOL_CALLS] [IMG]", "\u200b", "x" * 300]


def sft_segments(tokenizer_dir, shared_data):
    """GSM8K rows, hostile single- and multi-turn rows and a system prompt, through the Mistral chat template."""
    import itertools
    import json

    from prep.prepare.text.formats import RowError, Segments, SFTFormatter
    from prep.prepare.text.tokenizer import resolve_tokenizer

    tok = resolve_tokenizer(tokenizer_dir)
    formatter, segments = SFTFormatter(tok), Segments()
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        rows = [json.loads(next(f)) for _ in range(200)]
    u, a = "user", "assistant"
    chats = [[{"role": u, "content": r["question"]}, {"role": a, "content": r["answer"]}] for r in rows]
    chats += [[{"role": u, "content": q}, {"role": a, "content": r}] for q, r in itertools.product(HOSTILE, HOSTILE)]
    chats += [[{"role": u, "content": q}, {"role": a, "content": r}, {"role": u, "content": r}, {"role": a, "content": q}]
              for q, r in zip(HOSTILE, HOSTILE[3:] + HOSTILE[:3])]
    for chat in chats:
        try:
            segments.add_row(formatter({"messages": chat}))
        except RowError:  # an empty assistant turn, say: not this test's subject
            pass
    return tok, segments


def test_masks_found_in_the_ids_equal_masks_from_offsets(tokenizer_dir, shared_data):
    """The ids-only mask (edges at special tokens) against character offsets for every row, byte for byte."""
    from prep.prepare.text.tokens import Cuts, _encode

    tok, segments = sft_segments(tokenizer_dir, shared_data)
    for q, r in zip(HOSTILE, HOSTILE[1:]):  # format strings: edges inside plain text, so these rows need offsets
        segments.add_row([(f"Q: {q}\nA:", False), (f" {r}</s>", True)])
    backend = tok.backend()
    cuts, none = Cuts.of(backend), Cuts({}, {}, True)
    texts, spans = segments.rows()
    needs_offsets = [cuts.edges(t, s) is None for t, s in zip(texts, spans)]
    assert sum(needs_offsets) == len(HOSTILE) - 1 and all(needs_offsets[-(len(HOSTILE) - 1):])  # one batch, both kinds
    assert all(none.edges(t, s) is None for t, s in zip(texts, spans) if s and s != [(0, len(t))])
    fast, slow = _encode(backend, segments, None, cuts), _encode(backend, segments, None, none)
    assert fast.offsets.tolist() == slow.offsets.tolist()
    assert fast.ids.tobytes() == slow.ids.tobytes() and fast.mask.tobytes() == slow.mask.tobytes()
    assert 0 < int(fast.mask.sum()) < len(fast.ids)


def test_a_row_whose_ids_disagree_with_its_text_gets_its_mask_from_offsets(tokenizer_dir):
    """The per-row check: cuts that trust a token the tokenizer does not cut at (here "ab", not an added token of
    this tokenizer) give ids that do not add up, and the row falls back to offsets."""
    from prep.prepare.text.formats import Segments
    from prep.prepare.text.tokenizer import resolve_tokenizer
    from prep.prepare.text.tokens import Cuts, _encode

    backend = resolve_tokenizer(tokenizer_dir).backend()
    wrong = Cuts({"ab": {"id": 700, "content": "ab", "normalized": False}}, {"type": "BPE", "merges": []}, True)
    segments = Segments()
    segments.add_row([("xx ab", False), ("yy ab zz", True)])
    assert wrong.edges("xx abyy ab zz", [(5, 13)]) is not None  # it believes it can find the edge in the ids
    out = _encode(backend, segments, None, wrong)
    expected = _encode(backend, segments, None, Cuts({}, {}, True))
    assert out.ids.tolist() == expected.ids.tolist() and out.mask.tolist() == expected.mask.tolist()
    assert 0 < int(out.mask.sum()) < len(out.ids)


def test_cuts_refuse_tokens_a_tokenizer_may_not_cut_at():
    """Added tokens whose text can be matched otherwise, overlapped, stripped or built by the model do not qualify."""
    from prep.prepare.text.tokens import Cuts

    def token(i, content, **flags):
        return content, {"id": i, "content": content, "normalized": False, **flags}

    added = dict([token(1, "[/INST]"), token(2, "<x>", lstrip=True), token(3, "<y>", single_word=True),
                  token(4, "<norm>", normalized=True), token(5, "abab"), token(6, "<z>"), token(7, "z>!"),
                  token(8, "<m>"), token(9, "<0x0A>"), token(10, "<big[/INST]>")])
    cuts = Cuts(added, {"type": "BPE", "merges": [["<", "m>"]]}, True)
    assert cuts._qualify("[/INST]") is None  # contained in "<big[/INST]>"
    assert [cuts._qualify(t) for t in ("<x>", "<y>", "abab", "<z>", "<m>", "<0x0A>")] == [None] * 6
    assert cuts._qualify("<big[/INST]>") == 10
    assert Cuts(added, {"type": "Unigram"}, True)._qualify("<big[/INST]>") is None
    assert Cuts(added, {"type": "BPE", "ignore_merges": True}, True)._qualify("<big[/INST]>") is None
    assert Cuts(added, {"type": "BPE"}, False).edges("<big[/INST]>a", [(12, 13)]) is None  # special tokens not split
