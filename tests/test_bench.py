"""``prep bench`` and the reader's verdict: each stage slowed on purpose is named as the bound, with its knob.

The verdict is :func:`prep.reader.stats.diagnose`, the one the status line uses;
bench only feeds it the reader's counters. Stages are slowed by sleeping inside
them (the I/O read, batch building, the transform, the consumer), so each test
knows which stage must come out as the bound.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import tables
from prep.tools import bench
from prep.cli import main
from prep.materialize import materialize_shuffle
from prep.reader.stages import batcher, source
from prep.reader.stats import KNOBS, StatsSnapshot, diagnose

SLOW = 0.02  # seconds added to the slowed stage per call


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("bench")
    table = tables.synthetic_table(str(root / "t.lance"), num_rows=2000, max_len=40)
    materialize_shuffle(table=table, output=str(root / "out"), epochs=1, splits=4)
    return str(root / "out")


@pytest.mark.parametrize(
    "counters,remote,stage",
    [
        (dict(wait_s=0.2, fetch_s=5, collate_s=5), False, "consumer"),
        (dict(wait_s=6, fetch_s=8, collate_s=1, transform_s=1), False, "local-io"),
        (dict(wait_s=6, fetch_s=8, collate_s=1), True, "remote-io"),
        (dict(wait_s=6, fetch_s=1, collate_s=7, transform_s=2), False, "collate"),
        (dict(wait_s=6, fetch_s=1, collate_s=2, transform_s=7), True, "transform"),
    ],
)
def test_diagnose_names_the_busiest_stage_when_the_consumer_waits(counters, remote, stage):
    v = diagnose(StatsSnapshot(), StatsSnapshot(wall_s=10, **counters), remote=remote, consumer="gpu")
    assert v.stage == stage and v.knob == KNOBS[stage]
    assert v.label == {"consumer": "gpu-bound", "local-io": "io-bound", "remote-io": "io-bound"}.get(stage, "cpu-bound")
    assert v.wait_fraction == counters["wait_s"] / 10


def _slowed(original):
    def slow(*args, **kwargs):
        time.sleep(SLOW)
        return original(*args, **kwargs)

    return slow


def _slow_transform(batch):
    time.sleep(SLOW)
    return dict(batch)


@pytest.mark.parametrize("slowed", ["consumer", "local-io", "collate", "transform"])
def test_bench_names_the_stage_slowed_on_purpose(out, monkeypatch, slowed):
    knobs = dict(read_bytes=1 << 14, batch_threads=1, transform_threads=1)  # small reads: many I/O calls to slow
    if slowed == "local-io":
        monkeypatch.setattr(source.SplitTable, "read", _slowed(source.SplitTable.read))
    if slowed == "collate":
        monkeypatch.setattr(batcher, "collate_steps", _slowed(batcher.collate_steps))
    if slowed == "transform":
        knobs["transform"] = _slow_transform
    r = bench.run_bench(out, global_batch_size=8, consumer_ms=30 if slowed == "consumer" else 0, seconds=0.8, **knobs)
    assert r.verdict.stage == slowed, (r.verdict, r.wait_fraction)
    assert r.steps > 5 and r.first_batch_s is not None and r.rows_per_s > 0
    assert (r.wait_fraction < 0.05) == (slowed == "consumer")
    text = bench.format_result(r)
    assert f"bound by: {slowed}" in text and KNOBS[slowed] in text


def test_bench_cli_prints_json_and_plots(out, tmp_path, capsys):
    png = tmp_path / "b.png"
    assert main(["bench", out, "--global-batch-size", "8", "--seconds", "0.5", "--consumer-ms", "2", "--json",
                 "--plot", str(png)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["verdict"]["stage"] in KNOBS and r["steps"] > 0 and r["samples"][-1]["consumed_rows"] == r["steps"] * 8
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_bench_reads_a_prepared_table_through_an_on_the_fly_plan(out, capsys):
    table = str(Path(out).parent / "t.lance")
    assert main(["bench", table, "--global-batch-size", "8", "--splits", "4", "--seconds", "0.3", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["path"] == table and r["steps"] > 0 and r["local_batch_size"] == 8


@pytest.mark.parametrize(
    "args,names",
    [
        (["--global-batch-size", "6", "--world-size", "4", "--rank", "0"], ["--world-size 4", "--global-batch-size 6"]),
        (["--global-batch-size", "8", "--world-size", "3", "--rank", "0"], ["--world-size 3"]),
        (["--global-batch-size", "8", "--world-size", "2", "--rank", "2"], ["rank 2"]),
        (["--global-batch-size", "8", "--consumer-ms", "-1"], ["--consumer-ms", "must be >= 0"]),
        (["--global-batch-size", "8", "--seconds", "0"], ["--seconds", "must be > 0"]),
        (["--global-batch-size", "0"], ["--global-batch-size"]),
        (["--seconds", "1"], ["--global-batch-size"]),
    ],
)
def test_impossible_arguments_are_a_one_line_usage_error(out, capsys, args, names):
    code = main(["bench", out, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith("prep bench: error: ")
    for name in names:
        assert name in err[0], err[0]


def test_bench_on_a_path_that_is_not_materialized_is_one_line(tmp_path, capsys):
    assert main(["bench", str(tmp_path), "--global-batch-size", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a materialized output" in err[0]


def test_bench_with_no_full_global_step_says_so_instead_of_a_verdict(out, capsys):
    """4,096 splits over 2,000 rows: no step can be built, and 0 rows/s is not "nothing to tune"."""
    table = str(Path(out).parent / "t.lance")
    assert main(["bench", table, "--global-batch-size", "4096", "--splits", "4096", "--seconds", "0.3"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert "nothing to tune" not in captured.out and len(err) == 1 and "Traceback" not in err[0], captured
    assert err[0].startswith("prep bench: error: ") and "no full global step" in err[0], err[0]
    assert "--splits" in err[0], err[0]


def test_docs_tuning_gives_every_stage_its_knob_as_the_verdict_words_it():
    text = (Path(__file__).resolve().parent.parent / "docs" / "tuning.md").read_text()
    for stage, knob in KNOBS.items():
        assert f"| `{stage}` |" in text and knob in text, stage
