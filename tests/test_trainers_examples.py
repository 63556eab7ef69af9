"""The framework examples, killed mid-run and resumed (issue 12): HF Trainer, Lightning and Accelerate
each train a few steps on a tiny random causal LM, die by SIGKILL, resume from their last checkpoint
and must train on exactly the batches an uninterrupted run trains on; torchrun's two ranks read
disjoint rows whose union per step is the single-process global batch.

The frameworks take ~7 CPU-s each to import: one harness process imports the three examples once
and runs each invocation's ``main()`` in a forked child (a fresh process with its own argv, killed
for real), instead of paying the imports in six interpreters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import reader_fixtures as rf
from prep.reader import ReaderDataset

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")]
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
G, KILL, STEPS = 4, 2, 4  # sft4x2: 3 steps an epoch, so the resumed runs cross into epoch 1
# the checkpoint each run resumes from: HF and Lightning save after their kill hook ran (step 1 is the last
# saved), the Accelerate loop saves step 2 before it dies
RESUMED_AT = {"train_hf_trainer": 1, "train_lightning": 1, "train_accelerate": 2}
CKPT_FLAG = {"train_hf_trainer": "--output-dir", "train_lightning": "--ckpt-dir", "train_accelerate": "--ckpt-dir"}

HARNESS = r"""
import json, os, sys, traceback
sys.path.insert(0, sys.argv[1])
runs = json.loads(sys.argv[2])
for name in dict.fromkeys(r["example"] for r in runs):
    __import__(name)  # the frameworks load once, before the forks
codes = []
for r in runs:
    pid = os.fork()
    if pid == 0:
        code = 0
        sys.argv = [r["example"] + ".py", *r["argv"]]
        try:
            sys.modules[r["example"]].main()
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(codes))
"""


def env() -> dict[str, str]:
    repo = os.path.abspath(os.path.join(EXAMPLES, ".."))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.path.abspath(EXAMPLES)]),
            "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "2"}


def read_log(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def data():
    path, _ = rf.cached_output("sft4x2")
    reference = [(b.epoch, b.step, b.ids.tolist()) for b in ReaderDataset(path, global_batch_size=G)]
    return path, reference


@pytest.fixture(scope="module")
def killed_and_resumed(data, tmp_path_factory):
    path, _ = data
    base = tmp_path_factory.mktemp("examples")
    runs, logs = [], {}
    for name, flag in CKPT_FLAG.items():
        logs[name] = (str(base / f"{name}-killed.jsonl"), str(base / f"{name}-resumed.jsonl"))
        common = ["--data", path, "--global-batch-size", str(G), "--steps", str(STEPS), "--hidden-size", "32", flag,
                  str(base / name)]
        runs += [{"example": name, "argv": [*common, "--save-steps", "1", "--kill-after-step", str(KILL),
                                            "--log-batches", logs[name][0]]},
                 {"example": name, "argv": [*common, "--save-steps", "100", "--resume", "--log-batches", logs[name][1]]}]
    proc = subprocess.run([sys.executable, "-c", HARNESS, EXAMPLES, json.dumps(runs)], capture_output=True, text=True,
                          timeout=600, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    return {name: (codes[2 * i], codes[2 * i + 1], *logs[name]) for i, name in enumerate(CKPT_FLAG)}, proc.stderr


@pytest.mark.parametrize("example", list(CKPT_FLAG))
def test_example_killed_mid_run_resumes_on_the_next_untrained_batch(data, killed_and_resumed, example):
    _, reference = data
    results, stderr = killed_and_resumed
    killed, resumed, killed_log, resumed_log = results[example]
    assert (killed, resumed) == (-9, 0), stderr[-3000:]
    first, rest = read_log(killed_log), read_log(resumed_log)
    at = RESUMED_AT[example]
    assert [(b["epoch"], b["step"], b["ids"]) for b in first] == reference[:KILL]
    assert [(b["epoch"], b["step"], b["ids"]) for b in rest] == reference[at:STEPS]
    # the trainer's own epoch counter is the reader's, from 0 (HF's fractional state.epoch restarts its
    # fraction at a mid-epoch resume when Trainer skips no batches, so only its uninterrupted run counts)
    counted = {"train_hf_trainer": first, "train_lightning": first + rest, "train_accelerate": first + rest}[example]
    assert [b["trainer_epoch"] for b in counted] == [b["epoch"] for b in counted]
    # Lightning warned at every mid-epoch resume that the loader is not resumable (prep's is, exactly)
    assert "not resumable" not in stderr, stderr[-3000:]


def test_torchrun_two_ranks_read_disjoint_rows_that_make_the_single_process_global_batch_and_resume_after_a_kill(
        data, tmp_path):
    path, reference = data
    killed_log, resumed_log = str(tmp_path / "killed.jsonl"), str(tmp_path / "resumed.jsonl")
    common = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
              os.path.join(EXAMPLES, "train_sft.py"), "--data", path, "--global-batch-size", str(G), "--steps", str(STEPS),
              "--micro-batch-size", "2", "--device", "cpu", "--hidden-size", "32", "--ckpt", str(tmp_path / "ckpt.pt"),
              "--ckpt-every", "2"]
    killed = subprocess.run([*common, "--kill-after-step", "3", "--log-batches", killed_log], capture_output=True,
                            text=True, timeout=600, env=env())
    assert killed.returncode != 0 and os.path.exists(tmp_path / "ckpt.pt"), killed.stderr[-3000:]
    resumed = subprocess.run([*common, "--resume", "--log-batches", resumed_log], capture_output=True, text=True,
                             timeout=600, env=env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    def global_batches(log: str) -> list[tuple[int, int, list[int]]]:
        got = read_log(log)
        out = []
        for key in dict.fromkeys((b["epoch"], b["step"]) for b in got):
            ranks = {b["rank"]: b["ids"] for b in got if (b["epoch"], b["step"]) == key}
            assert sorted(ranks) == [0, 1] and not set(ranks[0]) & set(ranks[1])
            out.append((*key, ranks[0] + ranks[1]))  # rank r reads splits [2r, 2r+2): the global batch in order
        return out

    assert global_batches(killed_log) == reference[:3]  # killed after its third step
    assert global_batches(resumed_log) == reference[2:STEPS]  # from the step-2 checkpoint on, across the epoch boundary
