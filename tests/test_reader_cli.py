"""``prep read``: the ids of each batch of one rank."""

from __future__ import annotations

import pytest

import reader_fixtures as rf
from prep.cli import main

pytestmark = pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")


def test_prep_read_ids_only_prints_one_line_per_step_with_the_rank_share_of_the_global_batch(capsys):
    path, manifest = rf.cached_output("sft48")
    assert main(["read", path, "--epoch", "1", "--rank", "2", "--world-size", "4", "--global-batch-size", "96",
                 "--max-steps", "3", "--ids-only"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = rf.expected_steps(path, manifest, global_batch_size=96, epoch=1)
    assert [line.split()[0] for line in lines] == ["0", "1", "2"]
    for t, line in enumerate(lines):
        assert [int(x) for x in line.split()[1:]] == expected[t][48:72].tolist()


def test_prep_read_on_a_wrong_path_is_one_line_error(tmp_path, capsys):
    assert main(["read", str(tmp_path), "--global-batch-size", "96"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("prep read: error: ") and "not a materialized output" in err


def test_prep_read_with_no_full_global_step_is_a_one_line_error_naming_why_and_the_fix(tmp_path, capsys):
    """8 splits over 5 rows (as 512 over 300): a step takes a row from every split and 3 splits are empty."""
    out = str(tmp_path / "out")
    rf.sft_output(out, num_rows=5, num_splits=8, epochs=1)
    assert main(["read", out, "--global-batch-size", "8"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1 and "Traceback" not in err[0], captured
    assert err[0].startswith("prep read: error: ") and "epoch 0 has no full global step" in err[0], err[0]
    assert "smallest split holds 0 rows" in err[0] and "fewer splits" in err[0], err[0]
