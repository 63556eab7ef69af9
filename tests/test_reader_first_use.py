"""What a new user tries first: a prepared table read without a plan, and torch's usual DataLoader(ds, batch_size=8)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader

from common.tiny import tiny_prepared
from prep.contracts.marker import JOB_MARKER
from prep.errors import PrepError
from prep.plan.spec import PlanSpec
from prep.reader import ReaderDataset


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A finished prepared table, with the job marker a prepare run leaves (the old message took it for a crash)."""
    path = tiny_prepared(str(tmp_path_factory.mktemp("first") / "gsm.lance"), num_rows=200)
    (Path(path) / JOB_MARKER).write_text(json.dumps({"job": "pretokenize"}))
    return path


def test_a_prepared_table_without_a_plan_is_read_through_the_default_plan(prepared):
    ds = ReaderDataset(prepared, global_batch_size=48)
    explicit = ReaderDataset(prepared, global_batch_size=48, plan={})
    assert ds.layout.num_splits == PlanSpec().num_splits and ds.state_dict() == explicit.state_dict()
    assert ds.layout.fingerprint == PlanSpec().fingerprint(os.path.abspath(prepared), ds.layout.source_version)
    got, want = list(ds), list(explicit)
    assert len(got) == len(want) == 4  # 200 rows, 48 splits of 4-5 rows: 48 * 4 // 48 steps, one epoch
    assert all(np.array_equal(a.ids, b.ids) for a, b in zip(got, want))


def test_a_prepared_table_with_a_cache_dir_says_the_cache_needs_a_materialized_output(prepared, tmp_path):
    with pytest.raises(PrepError, match="cache_dir works with a materialized output, not with a prepared table"):
        ReaderDataset(prepared, global_batch_size=48, cache_dir=str(tmp_path / "cache"))


def test_an_unfinished_materialization_is_not_called_a_table_and_a_table_not_an_unfinished_run(prepared, tmp_path):
    from prep.io.materialized import read_manifest

    with pytest.raises(PrepError) as err:
        read_manifest(prepared)
    message = str(err.value)
    assert "has not finished" not in message and "--output " + prepared not in message
    assert "prepared Lance table" in message and f"--table {prepared}" in message
    started = tmp_path / "out"
    started.mkdir()
    (started / JOB_MARKER).write_text(json.dumps({"job": "materialize"}))
    with pytest.raises(PrepError, match="a run was started there but has not finished"):
        ReaderDataset(str(started), global_batch_size=48)


def test_dataloader_with_a_batch_size_is_one_line_naming_batch_size_none(prepared):
    loader = DataLoader(ReaderDataset(prepared, global_batch_size=48), batch_size=8)
    with pytest.raises(PrepError) as err:
        next(iter(loader))
    message = str(err.value)
    assert "batch_size=None" in message and len(message.splitlines()) == 1
    assert next(iter(DataLoader(ReaderDataset(prepared, global_batch_size=48), batch_size=None)))["input_ids"].shape[0] == 48
