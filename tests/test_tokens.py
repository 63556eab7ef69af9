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
