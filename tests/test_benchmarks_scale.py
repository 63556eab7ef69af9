"""benchmarks/measure.py counts the whole process tree; benchmarks/scale.py runs and checks its stages.

No timing assertions: the measure test asserts what was counted (CPU a process spent, memory
it held), not how fast anything ran. Each runs in a child process, since ``measure`` makes
the process that calls it a child subreaper (orphans are handed to it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

BENCH = REPO / "benchmarks"

# A parent that holds 100 MB and starts a child holding 200 MB, waits until both hold theirs,
# and exits; the orphaned child then spends 0.8 CPU-s more before exiting.
TREE = """
import os, subprocess, sys, time
child = '''
import sys, time
x = bytearray(200 << 20)
for i in range(0, len(x), 4096): x[i] = 1
open(sys.argv[1], "w").close()
time.sleep(0.5)
t = time.process_time()
while time.process_time() - t < 0.8: pass
'''
ready = sys.argv[1]
x = bytearray(100 << 20)
for i in range(0, len(x), 4096): x[i] = 1
subprocess.Popen([sys.executable, "-c", child, ready])
while not os.path.exists(ready): time.sleep(0.01)
time.sleep(0.3)
"""

MEASURE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import measure
m = measure.run([sys.executable, "-c", sys.argv[2], sys.argv[3]])
print(json.dumps({"cpu_s": m.cpu_s, "tree": m.peak_tree_rss, "proc": m.peak_process_rss, "rc": m.returncode,
                  "lingering": m.lingering}))
"""


# A Ray head stand-in: once the command has started (the trigger file), it starts a child
# holding 200 MB for 2 s, as a raylet starts workers for a job that joins it.
HEAD = """
import os, subprocess, sys, time
while not os.path.exists(sys.argv[1]): time.sleep(0.01)
subprocess.Popen([sys.executable, "-c", "x = bytearray(200 << 20)\\nfor i in range(0, len(x), 4096): x[i] = 1\\nimport time; time.sleep(2)"]).wait()
time.sleep(60)
"""

MEASURE_APART = """
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
import measure
head = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[3]])
joins = "import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); time.sleep(1.5)"
m = measure.run([sys.executable, "-c", joins, sys.argv[3]], apart=head.pid if sys.argv[4] == "apart" else None)
head.kill()
head.wait()
print(json.dumps({"tree": m.peak_tree_rss, "rc": m.returncode, "lingering": m.lingering}))
"""


def test_measure_counts_an_orphan_cpu_and_the_tree_memory(tmp_path) -> None:
    """The orphan's CPU after its parent exited is counted (RUSAGE_CHILDREN alone would lose it),
    and the peak RSS is the sum over the tree (>= 300 MB), not the largest process (~200 MB)."""
    out = subprocess.run([sys.executable, "-c", MEASURE, str(BENCH), TREE, str(tmp_path / "ready")],
                         capture_output=True, text=True, check=True)
    m = json.loads(out.stdout)
    assert m["rc"] == 0 and m["lingering"] == []
    assert m["cpu_s"] >= 0.8
    assert m["tree"] >= 290 << 20
    assert 200 << 20 <= m["proc"] < m["tree"]


def test_scale_help() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--help"], capture_output=True, text=True, check=True)
    assert "--factors" in out.stdout and "--plot" in out.stdout


@pytest.mark.slow
def test_scale_runs_its_checks_at_a_tiny_factor(tmp_path) -> None:
    """Every text stage at 0.002x (239 rows): the table, the materialized epoch (verified) and the
    read, each checked by the benchmark itself; the JSON has a row per stage."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    env.pop("RAY_ADDRESS", None)
    stages = "pretokenize-pretrain,shuffle-random,read-epoch"
    out = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--factors", "0.002", "--work", str(tmp_path / "w"),
                          "--stages", stages, "--json", str(tmp_path / "r.json")],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert [r["stage"] for r in rows] == stages.split(",")
    assert rows[0]["units"] > 0 and rows[2]["units"] <= rows[0]["units"]
    assert not (tmp_path / "w" / "out").exists()  # outputs are removed once the factor is done


@pytest.mark.parametrize("script", [["scale.py", "--factors", "0.002"], ["executors.py", "--factor", "0.002"]])
def test_a_work_folder_holding_a_users_files_is_refused_and_left_as_it_was(script, tmp_path) -> None:
    """The benchmarks clear ``out/`` (``executors.py``: ``warm/`` too) and their inputs under ``--work`` by name:
    a folder with a user's ``out/`` in it (``--work .`` in a checkout) is refused before anything runs (no Ray
    started); a new one is marked and used."""
    user = tmp_path / "checkout"
    (user / "out").mkdir(parents=True)
    (user / "out" / "my-table.lance").write_text("theirs")
    cmd = [sys.executable, str(BENCH / script[0]), *script[1:], "--stages", "shuffle-random", "--work", str(user)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 1 and "not made by a prep benchmark" in out.stderr and "\n" not in out.stderr.strip()
    assert (user / "out" / "my-table.lance").read_text() == "theirs"
    assert sorted(p.name for p in user.iterdir()) == ["out"]

    sys.path.insert(0, str(BENCH))
    try:
        from workdir import MARK, work_folder
    finally:
        sys.path.remove(str(BENCH))
    fresh = work_folder(tmp_path / "fresh")
    (fresh / "out").mkdir()
    assert work_folder(fresh) == fresh and (fresh / MARK).is_file()  # marked: a later run may use it again


@pytest.mark.slow  # a benchmark's helper, two process trees of 200 MB: the quick tier stays under 8 minutes
@pytest.mark.parametrize("apart", ["apart", "counted"])
def test_measure_leaves_out_what_a_process_kept_apart_starts(apart, tmp_path) -> None:
    """``apart`` (a Ray head the command joins, started by the benchmark) and what it starts while the
    command runs (the job's Ray workers) are not the command's: ``benchmarks/executors.py`` counts them
    on the head's side. Without ``apart`` the same tree counts its 200 MB child (the check can fail)."""
    out = subprocess.run([sys.executable, "-c", MEASURE_APART, str(BENCH), HEAD, str(tmp_path / "joined"), apart],
                         capture_output=True, text=True, check=True)
    m = json.loads(out.stdout)
    assert m["rc"] == 0
    if apart == "apart":
        assert m["tree"] < 120 << 20 and m["lingering"] == []
    else:
        assert m["tree"] >= 200 << 20


@pytest.mark.parametrize("stage", ["pretokenize-pretrain", "decode-images", "shuffle-random"])
def test_a_stage_s_checks_run_after_the_job_is_accounted(stage, tmp_path, monkeypatch) -> None:
    """``executors.py`` takes what the machine spent when ``after()`` runs; the checks' own processes
    (``prep inspect``, ``prep verify``) come later, or their CPU would count as Ray's workers'."""
    sys.path.insert(0, str(BENCH))
    try:
        import measure
        import scale
    finally:
        sys.path.remove(str(BENCH))
    events: list[str] = []
    summary = json.dumps({"tokens": 7})
    monkeypatch.setattr(measure, "run", lambda cmd, **kw: events.append("job") or measure.Measured(1.0, 1.0, 0, 0, 0, summary, ""))
    monkeypatch.setattr(scale, "prep_json", lambda *a: events.append(f"check {a[0]}") or {
        "num_rows": 3, "rejects": {"num_rows": 0}, "tokens": 7, "num_selected_rows": 3})
    monkeypatch.setattr(scale.subprocess, "run", lambda cmd, **kw: events.append(f"check {cmd[1]}") or
                        subprocess.CompletedProcess(cmd, 0, "", ""))
    text, images, facts = {"pretrain": "in", "rows": 3}, {"dir": "in", "images": 3}, {"pretrain": {"rows": 3, "tokens": 7}}
    scale.run_stage(stage, tmp_path, text, images, facts, after=lambda: events.append("after"))
    assert events[:2] == ["job", "after"] and len(events) > 2 and all(e.startswith("check ") for e in events[2:]), events
