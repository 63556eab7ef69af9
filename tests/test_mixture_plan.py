"""The mixture plan (prep.plan.mixture): exact shares per global batch, streams that use every row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prep.errors import PrepError
from prep.plan.mixture import Source, batch_counts, epoch_sequence, stream_rows

weights_st = st.lists(st.sampled_from([0.01, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 7]), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(weights=weights_st, global_batch=st.integers(1, 300), batches=st.integers(1, 60))
@example(weights=[0.01, 0.01, 0.01, 7, 7], global_batch=31, batches=30)  # the running count lags 1.006 rows
def test_every_batch_holds_floor_or_ceil_of_its_share_and_the_running_count_stays_near_its_target(
        weights, global_batch, batches):
    """The greedy rule keeps the running count within 1.04 rows of its target over 20,000 random mixtures,
    not always within one (the example, found by this test): checked against 1.5 rows, a margin over what
    was measured (not a proven bound)."""
    counts = batch_counts(weights, global_batch, 0, batches)
    share = np.array(weights) / sum(weights) * global_batch
    assert (counts.sum(axis=1) == global_batch).all()
    assert (counts >= np.floor(share - 1e-9)).all() and (counts <= np.ceil(share + 1e-9)).all()
    target = np.outer(np.arange(1, batches + 1), share)
    assert np.abs(np.cumsum(counts, axis=0) - target).max() < 1.5


def test_batch_counts_do_not_depend_on_where_the_caller_starts():
    whole = batch_counts([0.5, 0.3, 0.2], 7, 0, 40)
    assert (batch_counts([0.5, 0.3, 0.2], 7, 25, 15) == whole[25:]).all()


@pytest.mark.parametrize("clump", [1, 3])
def test_a_stream_goes_through_every_row_before_repeating_and_each_pass_has_a_fresh_order(clump):
    n = 10
    stream = stream_rows(n, 0, 3 * n, seed=5, source=2, clump=clump)
    passes = stream.reshape(3, n)
    for p in passes:
        assert sorted(p.tolist()) == list(range(n))
    assert not (passes[0] == passes[1]).all()
    assert (stream_rows(n, 7, 12, seed=5, source=2, clump=clump) == stream[7:19]).all()


def test_epochs_take_the_next_rows_of_each_stream_so_a_downsampled_source_uses_all_its_rows():
    sources = [Source(rows=100, weight=1), Source(rows=7, weight=1)]
    epochs = [epoch_sequence(sources, global_batch=10, epoch_rows=40, epoch=e, seed=3) for e in range(5)]
    big = np.concatenate([e.row[e.source == 0] for e in epochs])  # 20 rows per epoch, 100 over five epochs
    assert sorted(big.tolist()) == list(range(100))
    small = np.concatenate([e.row[e.source == 1] for e in epochs])  # upsampled: 100 rows from 7
    for k in range(len(small) // 7):
        assert sorted(small[7 * k: 7 * k + 7].tolist()) == list(range(7))
    again = epoch_sequence(sources, global_batch=10, epoch_rows=40, epoch=3, seed=3)
    assert (again.row == epochs[3].row).all() and (again.source == epochs[3].source).all()


@settings(max_examples=25, deadline=None)
@given(weights=st.lists(st.sampled_from([0.2, 0.5, 1, 2, 5]), min_size=2, max_size=4), seed=st.integers(0, 2**31))
def test_by_tokens_every_prefix_holds_each_sources_token_share_within_a_few_rows(weights, seed):
    rng = np.random.default_rng(seed)
    sources = [Source(rows=int(rng.integers(5, 80)), weight=w, lengths=rng.integers(1, 50, size=200)) for w in weights]
    sources = [Source(rows=s.rows, weight=s.weight, lengths=s.lengths[: s.rows]) for s in sources]
    seq = epoch_sequence(sources, global_batch=16, epoch_rows=320, epoch=1, seed=seed, unit="tokens")
    tokens = np.array([sources[s].lengths[r] for s, r in zip(seq.source, seq.row)])
    per_source = np.stack([np.cumsum(np.where(seq.source == i, tokens, 0)) for i in range(len(sources))])
    first = seq.taken  # the epoch starts where the earlier epoch left each stream: shares hold from position 0
    earlier = [int(sum(sources[i].lengths[stream_rows(sources[i].rows, 0, int(first[i]), seed=seed, source=i)]))
               for i in range(len(sources))]
    totals = per_source + np.array(earlier)[:, None]
    share = np.array(weights)[:, None] / sum(weights) * totals.sum(axis=0)[None, :]
    max_len = max(int(s.lengths.max()) for s in sources)
    assert np.abs(totals - share).max() <= max_len * (1 + len(sources)) / 2


def test_bad_mixtures_are_one_line_errors():
    with pytest.raises(PrepError, match="multiple of the global batch"):
        epoch_sequence([Source(rows=3, weight=1)], global_batch=4, epoch_rows=6, epoch=0, seed=0)
    with pytest.raises(PrepError, match="weights must be > 0"):
        batch_counts([1, 0], 4, 0, 1)
    with pytest.raises(PrepError, match="token lengths"):
        epoch_sequence([Source(rows=3, weight=1)], global_batch=1, epoch_rows=2, epoch=0, seed=0, unit="tokens")


@pytest.mark.parametrize("weights,G,epoch_rows,epoch,clump,digest", [
    ([3, 1], 96, 960, 2, 1, "9042e87fd6f019ea"),
    ([0.47, 0.46, 0.07], 64, 6400, 1, 4, "11000e579391b1f5"),
    ([0.01, 0.01, 0.01, 7, 7], 31, 3100, 3, 1, "029023be1ff12e99"),
])
def test_plans_stay_what_they_were_when_outputs_were_written(weights, G, epoch_rows, epoch, clump, digest):
    """An output's plan is recomputed by verify, --extend and reruns: a faster planner must give the same
    positions. The digests were taken with the planner before batch_counts and batch_order were rewritten."""
    import hashlib

    sources = [Source(rows=r, weight=w) for r, w in zip([500, 1200, 77, 3000, 41], weights)]
    seq = epoch_sequence(sources, global_batch=G, epoch_rows=epoch_rows, epoch=epoch, seed=7, clump=clump)
    got = hashlib.sha256(seq.source.astype(np.uint16).tobytes() + seq.row.astype(np.int64).tobytes()).hexdigest()[:16]
    assert got == digest
