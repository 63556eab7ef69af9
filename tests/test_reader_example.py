"""examples/train_sft.py: trains, checkpoints model + optimizer + reader state, resumes exactly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import reader_fixtures as rf

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")]
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "train_sft.py")


def train(path: str, ckpt: str, steps: int, *extra: str) -> str:
    cmd = [sys.executable, EXAMPLE, "--data", path, "--global-batch-size", "4", "--steps", str(steps),
           "--log-every", "1", "--ckpt", ckpt, "--ckpt-every", "1", "--micro-batch-size", "2", "--hidden-size", "32", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_train_sft_checkpoints_reader_state_and_resumes_after_the_last_trained_batch(tmp_path):
    path, _ = rf.cached_output("sft4")  # 4 splits x 10 rows: 10 steps of 4 rows
    ckpt = str(tmp_path / "ckpt.pt")
    log = train(path, ckpt, 2)
    assert "step 2 loss" in log and "| epoch 0 of 1 step 2 |" in log
    first = torch.load(ckpt, weights_only=False)
    assert (first["step"], first["reader"]["epoch"], first["reader"]["step"]) == (2, 0, 2)
    log = train(path, ckpt, 3, "--resume")
    assert "resumed at step 2: reader epoch 0 step 2" in log and "step 3 loss" in log
    assert torch.load(ckpt, weights_only=False)["reader"]["step"] == 3
