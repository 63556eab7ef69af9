"""The three ways to run pretokenize: `ray job submit` to a real head, the pipeline script, `prep`."""

import subprocess
import sys

import lance
import pytest

from conftest import REPO, VENV_BIN


@pytest.mark.ray_cluster
@pytest.mark.slow
def test_ray_job_submit_runs_the_pipeline_on_a_real_head(ray_head, tokenizer_dir, shared_data, tmp_path):
    out = tmp_path / "gsm.lance"
    proc = subprocess.run(
        [str(VENV_BIN / "ray"), "job", "submit", "--address", ray_head.address, "--working-dir", str(REPO), "--",
         "python", "pipelines/pretokenize.py", "--config", "configs/gsm8k-sft.yaml",
         "--input", str(shared_data / "gsm8k" / "train.jsonl"), "--output", str(out), "--tokenizer", tokenizer_dir],
        env=ray_head.env, cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rows: read 7,473 = written 7,473 + rejected 0" in proc.stdout
    assert lance.dataset(out).count_rows() == 7473


@pytest.mark.slow
def test_pipeline_script_and_prep_cli_write_the_same_table(tokenizer_dir, shared_data, tmp_path):
    src = tmp_path / "in.jsonl"
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        src.write_text("".join(next(f) for _ in range(300)))
    common = ["--config", str(REPO / "configs" / "gsm8k-sft.yaml"), "--input", str(src), "--tokenizer", tokenizer_dir]
    env_cmds = {
        "script": [sys.executable, str(REPO / "pipelines" / "pretokenize.py")],
        "cli": [str(VENV_BIN / "prep"), "pretokenize"],
    }
    tables = {}
    for name, cmd in env_cmds.items():
        out = tmp_path / f"{name}.lance"
        proc = subprocess.run([*cmd, *common, "--output", str(out)], capture_output=True, text=True, timeout=300,
                              env={"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "RAY_ADDRESS": ""})
        assert proc.returncode == 0, proc.stderr[-3000:]
        tables[name] = lance.dataset(out).to_table()
    assert tables["script"].num_rows == 300 and tables["script"].equals(tables["cli"])


def test_cli_bad_config_is_one_line_on_stderr_with_exit_2(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("input: x\noutput: y\ntokenizer: t\nformat: sft\nbogus: 1\n")
    proc = subprocess.run([str(VENV_BIN / "prep"), "pretokenize", "--config", str(cfg)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "key 'bogus': Extra inputs are not permitted" in proc.stderr


def test_cli_missing_input_names_the_path(tmp_path, tokenizer_dir):
    proc = subprocess.run([str(VENV_BIN / "prep"), "pretokenize", "--config", str(REPO / "configs" / "gsm8k-sft.yaml"),
                           "--input", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "o.lance"), "--tokenizer", tokenizer_dir],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and f"input not found: {tmp_path / 'missing.jsonl'}" in proc.stderr
