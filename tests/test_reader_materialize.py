"""prep.reader over the real output of `prep materialize-shuffle` (Ray tasks)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import reader_fixtures as rf
from prep.reader import ReaderDataset

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")]


def test_reader_streams_materialize_output_exactly_once_and_matches_the_on_the_fly_plan(tmp_path, ray_local):
    from prep.materialize import materialize_shuffle

    table = rf.gsm8k_sft(240)
    prepared = str(tmp_path / "prepared.lance")
    rf.write_table(prepared, table, rf.sft_metadata(240, int(np.asarray(table.column("length")).sum())))
    out = str(tmp_path / "out")
    manifest = materialize_shuffle(table=prepared, output=out, epochs=2, splits=12, seed=3)
    g = 24  # 20 rows a split, 2 a step: 10 steps an epoch
    for epoch in (0, 1):
        expected = rf.expected_steps(out, manifest, global_batch_size=g, epoch=epoch)
        got = [b.ids for r in range(3) for b in ReaderDataset(out, global_batch_size=g, rank=r, world_size=3, epochs=[epoch])]
        per_rank = len(expected)
        for r in range(3):
            for t in range(per_rank):
                np.testing.assert_array_equal(got[r * per_rank + t], expected[t][r * 8:(r + 1) * 8])
        delivered = np.concatenate(got)
        assert len(set(delivered.tolist())) == len(delivered) == per_rank * g
    direct = ReaderDataset(prepared, global_batch_size=g, plan=manifest.plan, epochs=2)
    materialized = ReaderDataset(out, global_batch_size=g)
    assert direct.state_dict() == materialized.state_dict()  # same fingerprint: a state taken on one resumes the other
    direct_batches, materialized_batches = list(direct), list(materialized)
    assert len(direct_batches) == len(materialized_batches) == 20
    for a, b in zip(direct_batches, materialized_batches):
        assert (a.epoch, a.step) == (b.epoch, b.step) and np.array_equal(a.ids, b.ids)
        assert torch.equal(a["input_ids"], b["input_ids"])
    assert os.path.exists(os.path.join(out, "manifest.json"))
