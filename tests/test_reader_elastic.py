"""Elastic determinism for any global batch: a default materialization (48 splits) and an on-the-fly plan
serve G in {8, 32, 64, 96, 256, 1024} at world sizes 1, 2, 4, 8 with the same global batches, resuming
exactly from every world size onto another. Tiny tables made in tmp_path, two steps each. The on-the-fly plan
runs three of the batches (none of them a multiple of 48: uneven rows per split); it shares the arithmetic
(:class:`prep.plan.order.Share`) and differs only in how a chunk's rows are fetched."""

from __future__ import annotations

import os
from math import gcd

import lance
import numpy as np
import pytest

from common.tiny import tiny_materialized, tiny_prepared
from prep.reader import ReaderDataset

SPLITS = 48
BATCHES = [8, 32, 64, 96, 256, 1024]
WORLDS = [1, 2, 4, 8]
STEPS = 2  # step 0 read fresh, step 1 after a resume (the smallest G has hundreds an epoch)
SMALL = {"read_bytes": 1, "raw_chunks": 1, "prefetch_batches": 1, "batch_threads": 1}  # reads of one step, no read-ahead


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """3,200 rows (66-67 a split): G=1024 has 3 steps an epoch."""
    base = tmp_path_factory.mktemp("elastic")
    prepared = tiny_prepared(str(base / "prepared.lance"), num_rows=3200)
    manifest = tiny_materialized(str(base / "out"), prepared, num_splits=SPLITS, epochs=1)
    ids = [lance.dataset(str(base / "out" / s.path)).to_table(columns=["id"]).column("id").to_numpy()
           for s in manifest.epoch(0).splits]
    return {"materialized": (str(base / "out"), {}), "planned": (prepared, {"plan": {"num_splits": SPLITS}})}, ids


def expected(ids: list[np.ndarray], G: int, t: int) -> np.ndarray:
    """Global batch ``t`` by the documented rule: positions [t*G, (t+1)*G) of the global order
    (position p: row p // S of split sigma(p % S)), presented split after split."""
    g = gcd(G, SPLITS)
    pairs = sorted(((j % g) * (SPLITS // g) + j // g, p // SPLITS) for p in range(t * G, (t + 1) * G) for j in [p % SPLITS])
    return np.array([ids[s][row] for s, row in pairs], dtype=np.uint64)


def read(path: str, G: int, W: int, *, stop: int, state=None, **kw) -> tuple[list[np.ndarray], list[dict]]:
    """Each step's ids over the W ranks (concatenated in rank order), and each rank's state after them."""
    per_rank, states = [], []
    for r in range(W):
        ds = ReaderDataset(path, global_batch_size=G, rank=r, world_size=W, **SMALL, **kw)
        if state is not None:
            ds.load_state_dict(state)
        got = []
        for batch in ds:
            assert len(batch.ids) == G // W
            got.append(batch.ids.copy())
            if len(got) == stop:
                break
        per_rank.append(got)
        states.append(ds.state_dict())
    return [np.concatenate(step) for step in zip(*per_rank)], states


@pytest.mark.parametrize("source,G", [("materialized", G) for G in BATCHES] + [("planned", G) for G in (8, 64, 1024)])
def test_every_world_size_reads_the_same_global_batches_and_resumes_onto_every_other(data, source, G):
    sources, ids = data
    path, kw = sources[source]
    want = [expected(ids, G, t) for t in range(STEPS)]
    first = {W: read(path, G, W, stop=1, **kw) for W in WORLDS}
    for W, (steps, states) in first.items():
        np.testing.assert_array_equal(steps[0], want[0], err_msg=f"W={W} step 0")
        assert all({**s, "world_size": 0} == {**states[0], "world_size": 0} for s in states)
    common = {k: v for k, v in first[1][1][0].items() if k != "world_size"}
    assert all({k: v for k, v in s[1][0].items() if k != "world_size"} == common for s in first.values())
    for i, W in enumerate(WORLDS):  # every world size resumes from every other one's state (they are equal)
        frm = WORLDS[(i + 1) % len(WORLDS)]
        rest, _ = read(path, G, W, stop=STEPS - 1, state=first[frm][1][-1], **kw)
        for t, got in enumerate(rest, start=1):
            np.testing.assert_array_equal(got, want[t], err_msg=f"W={frm} -> W={W} step {t}")


def test_steps_and_dropped_rows_follow_the_global_order(data):
    sources, ids = data
    path, _ = sources["materialized"]
    rows = np.array([len(x) for x in ids])
    for G in BATCHES:
        ranks = [ReaderDataset(path, global_batch_size=G, rank=r, world_size=8) for r in range(8)]
        steps = SPLITS * int(rows.min()) // G
        assert len(ranks[0]) == steps and ranks[0].steps_per_epoch == {0: steps}
        assert sum(ds.dropped_rows for ds in ranks) == int(rows.sum()) - steps * G
        if G % 8 == 0 and SPLITS % 8 == 0:
            assert ranks[3].splits == range(18, 24)
    assert os.path.isdir(path)
