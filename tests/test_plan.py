"""The shuffle plan: one invariant checker over every strategy, plus the O(1) paths."""

from __future__ import annotations

import numpy as np
import pytest

from prep import plan

from prep.plan import order
from prep.errors import PrepError
from prep.plan import hash as plan_hash
from prep.plan import permutation
from prep.plan.spec import PlanSpec

SHAPES = [(1000, 7, 1), (1003, 48, 4), (5, 8, 1), (97, 3, 10), (1, 1, 1), (4096, 48, 64)]


def _keys(n: int) -> np.ndarray:
    return permutation.mix64(np.arange(n, dtype=np.uint64) + np.uint64(12345))


def _epoch(strategy: str, n: int, splits: int, clump: int, epoch: int, seed: int = 0) -> list[np.ndarray]:
    return [
        plan.split_rows(
            num_rows=n, num_splits=splits, split=s, epoch=epoch, strategy=strategy, seed=seed, clump=clump, hash_keys=_keys(n)
        )
        for s in range(splits)
    ]


def check_plan_invariants(strategy: str, n: int, splits: int, clump: int) -> None:
    """The contract every strategy keeps (see prep/plan/__init__.py)."""
    epochs = [_epoch(strategy, n, splits, clump, e) for e in range(3)]
    for parts in epochs:
        # each epoch is a permutation of the selected rows
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))
        for s, rows in enumerate(parts):
            assert rows.dtype == np.int64
            assert len(rows) == plan.split_size(
                num_rows=n, num_splits=splits, split=s, strategy=strategy, clump=clump, hash_keys=_keys(n)
            )
    for s in range(splits):
        # membership is fixed across epochs
        members = [set(parts[s].tolist()) for parts in epochs]
        assert members[0] == members[1] == members[2]
    # determinism: same arguments, same plan
    again = _epoch(strategy, n, splits, clump, 0)
    assert all(np.array_equal(a, b) for a, b in zip(again, epochs[0]))
    # the order changes across epochs (when a split has more than one clump to reorder)
    movable = [s for s in range(splits) if len(epochs[0][s]) > 3 * clump]
    if movable:
        assert any(not np.array_equal(epochs[0][s], epochs[1][s]) for s in movable)


@pytest.mark.parametrize("strategy", sorted(plan.STRATEGIES))
@pytest.mark.parametrize("n,splits,clump", SHAPES)
def test_every_strategy_keeps_plan_invariants(strategy, n, splits, clump):
    check_plan_invariants(strategy, n, splits, clump)


@pytest.mark.parametrize("strategy", sorted(plan.STRATEGIES))
def test_different_seeds_give_different_orders(strategy):
    a = np.concatenate(_epoch(strategy, 2000, 4, 1, 0, seed=0))
    b = np.concatenate(_epoch(strategy, 2000, 4, 1, 0, seed=1))
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("strategy", ["random", "hash"])
def test_different_seeds_assign_different_members(strategy):
    a = set(_epoch(strategy, 2000, 4, 1, 0, seed=0)[0].tolist())
    b = set(_epoch(strategy, 2000, 4, 1, 0, seed=1)[0].tolist())
    assert a != b


def test_clump_keeps_runs_of_consecutive_rows_together():
    rows = plan.split_rows(num_rows=10_000, num_splits=4, split=2, epoch=1, strategy="random", clump=64)
    runs = rows.reshape(-1, 64)  # 10_000 rows -> 157 blocks, the short one is not in split 2 here
    assert np.all(np.diff(runs, axis=1) == 1)
    assert np.all(runs[:, 0] % 64 == 0)


def test_sequential_clump_as_large_as_a_split_reads_in_table_order():
    for epoch in range(3):
        rows = plan.split_rows(num_rows=1000, num_splits=4, split=1, epoch=epoch, strategy="sequential", clump=250)
        assert rows.tolist() == list(range(250, 500))


def test_hash_assignment_is_stable_when_rows_are_appended():
    keys = _keys(3000)
    before = plan_hash.split_of(keys[:2000], 8, seed=5)
    after = plan_hash.split_of(keys, 8, seed=5)
    assert np.array_equal(before, after[:2000])
    old = plan.split_rows(num_rows=2000, num_splits=8, split=3, epoch=0, strategy="hash", hash_keys=keys[:2000])
    new = plan.split_rows(num_rows=3000, num_splits=8, split=3, epoch=0, strategy="hash", hash_keys=keys)
    assert set(old.tolist()) <= set(new.tolist())


def test_hash_row_keys_combine_several_columns_and_strings():
    import pyarrow as pa

    t = pa.table({"id": pa.array([1, 1, 2], pa.uint64()), "name": ["a", "b", "a"]})
    k = plan_hash.row_keys(t, ["id", "name"])
    assert len(set(k.tolist())) == 3
    with pytest.raises(PrepError, match="not in the table"):
        plan_hash.row_keys(t, ["nope"])


@pytest.mark.parametrize("strategy", sorted(plan.STRATEGIES))
def test_locate_row_finds_each_row_in_the_plan(strategy):
    n, splits, clump = 1003, 6, 8
    for split, rows in enumerate(_epoch(strategy, n, splits, clump, 2)):
        for i in range(0, len(rows), 37):
            got = plan.locate_row(
                row=int(rows[i]), num_rows=n, num_splits=splits, epoch=2, strategy=strategy, clump=clump, hash_keys=_keys(n)
            )
            assert got == (split, i)


def test_iter_split_rows_chunks_concatenate_to_the_split():
    full = plan.split_rows(num_rows=5000, num_splits=3, split=1, epoch=4, strategy="random", clump=5)
    chunks = list(plan.iter_split_rows(num_rows=5000, num_splits=3, split=1, epoch=4, strategy="random", clump=5, chunk_rows=100))
    assert len(chunks) > 10
    assert np.array_equal(np.concatenate(chunks), full)


def test_feistel_permutation_is_a_bijection_and_inverts():
    keys = permutation.keys(permutation.ASSIGN, 11)
    for n in (2, 3, 17, 1000, 65537):
        p = permutation.permute(np.arange(n), n, keys)
        assert np.array_equal(np.sort(p), np.arange(n))
        assert np.array_equal(permutation.invert(p, n, keys), np.arange(n))


def test_single_row_of_a_huge_plan_is_located_in_constant_memory():
    n = 10**10
    split, index = plan.locate_row(row=123_456_789, num_rows=n, num_splits=48, epoch=7, strategy="random", seed=3)
    got = plan.split_rows_range(
        num_rows=n, num_splits=48, split=split, epoch=7, strategy="random", seed=3, start=index, stop=index + 1
    )
    assert got.tolist() == [123_456_789]


@pytest.mark.parametrize("strategy", sorted(plan.STRATEGIES))
@pytest.mark.parametrize("start,stop", [(0, 5), (3, 61), (40, 1000), (117, 125)])
def test_split_rows_range_is_a_slice_of_split_rows(strategy, start, stop):
    for split in range(3):
        kw = dict(num_rows=1003, num_splits=3, split=split, epoch=1, strategy=strategy, clump=8, hash_keys=_keys(1003))
        assert np.array_equal(plan.split_rows_range(start=start, stop=stop, **kw), plan.split_rows(**kw)[start:stop])


def test_elastic_determinism_same_rows_per_step_for_every_world_size():
    n, splits, global_batch = 5000, 48, 96
    b = global_batch // splits
    parts = _epoch("random", n, splits, 1, 1)
    steps = min(len(p) for p in parts) // b
    reference = None
    for w in order.valid_world_sizes(splits):
        per_step = []
        for t in range(steps):
            ids = []
            for r in range(w):
                for s in order.splits_for_rank(splits, r, w):
                    ids.extend(parts[s][t * b : (t + 1) * b].tolist())
            assert len(ids) == global_batch
            per_step.append(frozenset(ids))
        reference = reference or per_step
        assert per_step == reference
    assert [1, 2, 3, 4, 6, 8, 12, 16, 24, 48] == order.valid_world_sizes(splits)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_splits=0), "num_splits=0"),
        (dict(strategy="shuffle"), "not one of"),
        (dict(clump=0), "clump=0"),
        (dict(seed=-1), "seed=-1"),
        (dict(split=9), "split=9"),
        (dict(strategy="hash"), "hash_keys"),
    ],
)
def test_bad_plan_arguments_raise_clear_errors(kwargs, match):
    args = dict(num_rows=100, num_splits=4, split=0, epoch=0, strategy="random")
    args.update(kwargs)
    with pytest.raises(PrepError, match=match):
        plan.split_rows(**args)


def test_world_size_not_dividing_splits_is_refused():
    with pytest.raises(PrepError, match="does not divide"):
        order.splits_for_rank(48, 0, 5)


def test_fingerprint_depends_on_source_version_and_plan():
    p = PlanSpec(num_splits=48, strategy="random", seed=0)
    a = p.fingerprint("t.lance", 1)
    assert a == PlanSpec.from_json(dict(reversed(list(p.to_json().items())))).fingerprint("t.lance", 1)
    assert a != p.fingerprint("t.lance", 2)
    assert a != PlanSpec(num_splits=48, strategy="random", seed=1).fingerprint("t.lance", 1)
    assert len(a) == 16 and int(a, 16) >= 0


@pytest.mark.parametrize("strategy", sorted(plan.STRATEGIES))
def test_assign_rows_agrees_with_split_rows(strategy):
    n, splits, clump = 1003, 7, 4
    want = np.empty(n, dtype=np.int64)
    for s, rows in enumerate(_epoch(strategy, n, splits, clump, 0)):
        want[rows] = s
    got = plan.assign_rows(positions=np.arange(n), num_rows=n, num_splits=splits, strategy=strategy, clump=clump, hash_keys=_keys(n))
    assert np.array_equal(got, want)


# (rows, splits, clump): the reported case (119,568 rows, 32 splits, clump 64: sizes 3,664..3,776),
# a short table block with every split holding the same number of full blocks, a table smaller than a clump
CLUMP_SHAPES = [(119_568, 32, 64), (32 * 64 + 5, 32, 64), (1003, 48, 4), (97, 3, 10), (50, 4, 64), (4096, 48, 64)]


@pytest.mark.parametrize("strategy", ["random", "round-robin", "sequential"])
@pytest.mark.parametrize("n,splits,clump", CLUMP_SHAPES)
def test_split_sizes_differ_by_at_most_one_clump(strategy, n, splits, clump):
    """docs/materialize.md: sizes differ by at most one clump, so at most S*clump rows are dropped per epoch."""
    for seed in (0, 1, 7):
        sizes = [
            plan.split_size(num_rows=n, num_splits=splits, split=s, strategy=strategy, seed=seed, clump=clump)
            for s in range(splits)
        ]
        assert sum(sizes) == n
        assert max(sizes) - min(sizes) <= clump, (seed, min(sizes), max(sizes))


@pytest.mark.parametrize("strategy", ["random", "round-robin"])
def test_split_sizes_differ_by_the_partial_clump_when_full_clumps_divide_evenly(strategy):
    """With S dividing the number of full clumps, only the table's partial clump makes sizes differ."""
    n, splits, clump = 32 * 64 * 3 + 5, 32, 64
    sizes = [plan.split_size(num_rows=n, num_splits=splits, split=s, strategy=strategy, clump=clump) for s in range(splits)]
    assert max(sizes) - min(sizes) == 5


def test_hash_split_sizes_do_not_depend_on_the_clump():
    """``hash``: sizes follow the keys (binomial spread); clumps only regroup a split's own rows."""
    n, splits = 5003, 8

    def sizes(clump: int) -> list[int]:
        return [plan.split_size(num_rows=n, num_splits=splits, split=s, strategy="hash", clump=clump, hash_keys=_keys(n))
                for s in range(splits)]

    assert sizes(1) == sizes(64) == sizes(1000)


def test_random_plan_without_a_partial_clump_is_unchanged():
    """Plans whose rows fill whole clumps (every clump-1 plan) keep the membership they always had."""
    n, splits, clump = 4096, 48, 64
    blocks = n // clump
    keys = permutation.keys(permutation.ASSIGN, 0)
    for s in (0, 17, 47):
        lo, hi = s * blocks // splits, (s + 1) * blocks // splits
        want = np.sort(np.concatenate([np.arange(b * clump, (b + 1) * clump) for b in permutation.permute(np.arange(lo, hi), blocks, keys)] or [np.zeros(0, np.int64)]))
        got = np.sort(plan.split_rows(num_rows=n, num_splits=splits, split=s, epoch=0, strategy="random", clump=clump))
        assert np.array_equal(got, want)
