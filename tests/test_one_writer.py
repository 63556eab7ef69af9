"""One writer per output, through the real commands (issue 21, finding 3).

A run that finds the output's lease held fails at once, naming the holder, and touches
nothing; two runs started together on one output (different inputs or seeds): at most one
exits 0, and what it reported is what the output holds. The lease itself is raced 50 times
per store in tests/test_leases.py; here each writing command is raced a few times (slow), or
PREP_RACE_TRIALS times.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
from pathlib import Path

import lance
import pytest

import tables
from conftest import REPO
from prep.cli import main as cli_main
from prep.contracts.ownership import JOB_MARKER
from prep.io.lease import take_lease
from prep.contracts.table import read_table_metadata
from prep.materialize import materialize_shuffle
from prep.materialize.verify import verify
from prep.runtime.zygote import Zygote
from test_images import HYMENOPTERA

TRIALS = int(os.environ.get("PREP_RACE_TRIALS", "3"))  # the 50: PREP_RACE_TRIALS=50 (minutes per command)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "_prep_lease.json"}


def _jsonl(path: Path, shared_data: Path, rows: int) -> str:
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        path.write_text("".join(next(f) for _ in range(rows)))
    return str(path)


def test_a_second_pretokenize_never_takes_a_running_jobs_output_for_leftovers(tokenizer_dir, shared_data, tmp_path, capsys):
    out = tmp_path / "o.lance"
    (out / "data").mkdir(parents=True)
    (out / "data" / "first-run.lance").write_bytes(b"a fragment the first run is writing")
    (out / JOB_MARKER).write_text('{"written_by": "prep", "job": "pretokenize"}')
    before = snapshot(out)
    first = take_lease(str(out), "pretokenize")  # the first run, alive and writing
    try:
        code = cli_main(["pretokenize", "--config", str(REPO / "configs" / "gsm8k-sft.yaml"), "--tokenizer", tokenizer_dir,
                         "--input", _jsonl(tmp_path / "in.jsonl", shared_data, 20), "--output", str(out), "--executor", "local"])
    finally:
        first.release()
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    assert f"{out} is being written by pretokenize (host {socket.gethostname()}, pid {os.getpid()}, started " in err
    assert snapshot(out) == before


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    return tables.synthetic_table(str(tmp_path_factory.mktemp("one-writer") / "t.lance"), num_rows=400, max_len=30)


def test_a_second_materialize_never_touches_a_running_jobs_output(table, tmp_path, capsys):
    out = tmp_path / "out"
    first = take_lease(str(out), "prep materialize-shuffle")
    try:
        code = cli_main(["materialize-shuffle", "--table", table, "--output", str(out), "--epochs", "1", "--splits", "2",
                         "--executor", "local", "--overwrite"])
    finally:
        first.release()
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "is being written by prep materialize-shuffle (host " in err, err
    assert snapshot(out) == {}


# --- two real runs started together (slow) -------------------------------------------------------
def run_prep(args_fd: int, out_fd: int, err_fd: int) -> None:
    """A forked child's ``python -m prep ARGS`` (ARGS: JSON on ``args_fd``), its output on ``out_fd`` and ``err_fd``."""
    with os.fdopen(args_fd) as f:
        args = json.load(f)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.argv = ["prep", *args]
    raise SystemExit(cli_main(args))


@pytest.fixture(scope="module")
def racers():
    """Forks the racing runs from a zygote that imported prep once: a ``python -m prep`` pays 3-5 CPU-s of imports
    per run, 30 runs in this file, and the lease the runs race for is the same between any two processes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]), "TOKENIZERS_PARALLELISM": "false"}
    zygote = Zygote(env)
    yield zygote
    zygote.close()


_PRELOAD = ("test_one_writer", "prep.prepare.text.pretokenize", "prep.prepare.images.worker", "prep.materialize", "prep.reader")


def _race(racers: Zygote, tmp_path: Path, a: list[str], b: list[str]) -> list[tuple[int, str, str]]:
    """Two real prep runs started together (forked children, each its own process), ``[(exit code, stdout, stderr)]``."""
    runs = []
    for i, args in enumerate((a, b)):
        read, write = os.pipe()
        out, err = [open(tmp_path / f"race-{os.getpid()}-{i}.{k}", "w+") for k in ("out", "err")]
        pid = racers.fork("test_one_writer:run_prep", [read, out.fileno(), err.fileno()], preload=_PRELOAD)
        os.close(read)
        runs.append((pid, write, args, out, err))
    for _, write, args, _, _ in runs:  # both forked before either is given its arguments
        with os.fdopen(write, "w") as f:
            json.dump(args, f)
    results = []
    for pid, _, _, out, err in runs:
        code = racers.wait(pid)
        results.append((code, *(f.seek(0) or f.read() for f in (out, err))))
        out.close()
        err.close()
    return results


# Why the run that did not get the output failed: the other holds it (they overlapped), or the other one's
# finished output is there (the load made them run one after the other).
_REFUSALS = ("is being written by", "in use by", "holds materialization", "already holds a table", "holds a different plan")


def _one_winner(results: list[tuple[int, str, str]], *, both_may_win: bool = False) -> int | None:
    """The index of the run that exited 0 (None: neither); the other failed in one line saying why."""
    codes = [r[0] for r in results]
    assert codes.count(0) <= 1 or both_may_win, results
    for code, _, err in results:
        if code != 0:
            assert code == 2 and any(r in err for r in _REFUSALS), err
    return codes.index(0) if 0 in codes else None


@pytest.mark.slow
def test_two_pretokenize_runs_on_one_output(racers, tokenizer_dir, shared_data, tmp_path):
    cmd = ["pretokenize", "--config", str(REPO / "configs" / "gsm8k-sft.yaml"), "--tokenizer", tokenizer_dir,
           "--executor", "local", "--json", "-q"]
    inputs = [_jsonl(tmp_path / "a.jsonl", shared_data, 30), _jsonl(tmp_path / "b.jsonl", shared_data, 45)]
    for trial in range(TRIALS):
        out = str(tmp_path / f"o-{trial}.lance")
        results = _race(racers, tmp_path, *[[*cmd, "--input", given, "--output", out] for given in inputs])
        winner = _one_winner(results)
        if winner is not None:
            summary = json.loads(results[winner][1])
            ds = lance.dataset(out)
            assert ds.count_rows() == summary["rows_written"] == (30, 45)[winner]
            assert [s.uri for s in read_table_metadata(ds, "t").sources] == [inputs[winner]]


@pytest.mark.slow
def test_two_decode_images_runs_on_one_output(racers, tmp_path):
    inputs = []
    for name, n in (("a", 3), ("b", 5)):
        for cls in ("ants", "bees"):
            (tmp_path / name / cls).mkdir(parents=True)
            for photo in sorted((HYMENOPTERA / cls).iterdir())[:n]:
                shutil.copy(photo, tmp_path / name / cls / photo.name)
        inputs.append(str(tmp_path / name))
    cmd = ["decode-images", "--config", str(REPO / "configs" / "imagefolder.yaml"), "--executor", "local", "--json", "-q"]
    for trial in range(TRIALS):
        out = str(tmp_path / f"o-{trial}.lance")
        results = _race(racers, tmp_path, *[[*cmd, "--input", given, "--output", out] for given in inputs])
        winner = _one_winner(results)
        if winner is not None:
            assert lance.dataset(out).count_rows() == json.loads(results[winner][1])["rows_written"] == (6, 10)[winner]


@pytest.mark.slow
def test_two_materialize_runs_with_different_seeds_on_one_output(racers, table, tmp_path):
    for trial in range(TRIALS):
        out = str(tmp_path / f"out-{trial}")
        results = _race(racers, tmp_path, *[["materialize-shuffle", "--table", table, "--output", out, "--epochs", "2", "--splits", "4",
                           "--seed", str(seed), "--executor", "local", "-q"] for seed in (1, 2)])
        winner = _one_winner(results)
        if winner is not None:
            manifest = json.loads(Path(out, "manifest.json").read_text())
            assert manifest["plan"]["seed"] == (1, 2)[winner] and verify(out).ok


@pytest.mark.slow
def test_two_prewarms_of_different_materializations_on_one_cache(racers, table, tmp_path):
    sources = [str(tmp_path / f"m{seed}") for seed in (1, 2)]
    for seed, out in zip((1, 2), sources):
        materialize_shuffle(table=table, output=out, epochs=1, splits=4, seed=seed, executor="local")
    for trial in range(TRIALS):
        cache = str(tmp_path / f"cache-{trial}")
        results = _race(racers, tmp_path, *[["prewarm", src, "--cache", cache, "--overwrite", "-q"] for src in sources])
        winner = _one_winner(results, both_may_win=True)
        if [r[0] for r in results] == [0, 0]:  # one ran after the other, and replaced its cache as asked
            replaced = [i for i, r in enumerate(results) if "replacing the cache" in r[2]]
            assert len(replaced) == 1, results
            winner = replaced[0]
        if winner is not None:
            marker = json.loads(Path(cache, "_prep_cache.json").read_text())
            assert marker["source"] == sources[winner] and verify(cache).ok


@pytest.mark.slow
def test_two_readers_filling_one_cache_from_different_materializations(racers, table, tmp_path):
    sources = [str(tmp_path / f"m{seed}") for seed in (1, 2)]
    for seed, out in zip((1, 2), sources):
        materialize_shuffle(table=table, output=out, epochs=1, splits=4, seed=seed, executor="local")
    for trial in range(TRIALS):
        cache = str(tmp_path / f"cache-{trial}")
        results = _race(racers, tmp_path, *[["read", src, "--global-batch-size", "8", "--cache-dir", cache, "--ids-only"] for src in sources])
        winner = _one_winner(results)
        assert winner is not None  # the reader never replaces a cache: the first to claim it reads
        assert json.loads(Path(cache, "_prep_cache.json").read_text())["source"] == sources[winner]
