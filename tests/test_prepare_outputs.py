"""Prepare jobs never destroy what prep did not write (issue 8, finding 1).

Each case puts something at ``--output`` (or the rejects path) that a user could
have there, runs the real command, and checks the files byte for byte afterwards.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from conftest import REPO
from fault_proxy import FaultProxy
from prep.cli import main as cli_main
from prep.contracts.marker import JOB_MARKER
from test_images import HYMENOPTERA

COMMANDS = {
    "pretokenize": ["pretokenize", "--config", str(REPO / "configs" / "gsm8k-sft.yaml")],
    "decode-images": ["decode-images", "--config", str(REPO / "configs" / "imagefolder.yaml")],
}


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def user_folder(path: Path) -> dict[str, str]:
    (path / "notes").mkdir(parents=True)
    (path / "notes" / "thesis.md").write_text("three years of work\n")
    (path / "data.jsonl").write_text('{"question": "mine", "answer": "mine"}\n')
    return snapshot(path)


def run_cli(command: str, *args: str, tokenizer_dir: str) -> int:
    extra = ["--tokenizer", tokenizer_dir] if command == "pretokenize" else []
    return cli_main([*COMMANDS[command], *extra, *args])


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("input_kind", ["missing", "valid"])
def test_a_user_folder_at_output_survives_every_command_and_flag(command, overwrite, input_kind, tokenizer_dir, shared_data, tmp_path, capsys):
    out = tmp_path / "my-project"
    before = user_folder(out)
    given = str(tmp_path / "missing.jsonl") if input_kind == "missing" else (
        str(shared_data / "gsm8k" / "train.jsonl") if command == "pretokenize" else str(HYMENOPTERA))
    code = run_cli(command, "--input", given, "--output", str(out), *(["--overwrite"] if overwrite else []), tokenizer_dir=tokenizer_dir)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err
    assert ("input not found" in err) if input_kind == "missing" else ("holds files prep did not write" in err and str(out) in err)
    assert snapshot(out) == before


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_user_folder_at_the_rejects_path_survives(command, tokenizer_dir, shared_data, tmp_path, capsys):
    given = str(shared_data / "gsm8k" / "train.jsonl") if command == "pretokenize" else str(HYMENOPTERA)
    before = user_folder(tmp_path / "out.rejects.lance")
    assert run_cli(command, "--input", given, "--output", str(tmp_path / "out.lance"), tokenizer_dir=tokenizer_dir) == 2
    assert "holds files prep did not write" in capsys.readouterr().err
    assert snapshot(tmp_path / "out.rejects.lance") == before
    assert not (tmp_path / "out.lance").exists()


def test_a_lance_table_prep_did_not_write_is_never_replaced(tokenizer_dir, shared_data, tmp_path, capsys):
    out = tmp_path / "theirs.lance"
    lance.write_dataset(pa.table({"x": [1, 2, 3]}), out)
    before = snapshot(out)
    code = run_cli("pretokenize", "--input", str(shared_data / "gsm8k" / "train.jsonl"), "--output", str(out), "--overwrite",
                   tokenizer_dir=tokenizer_dir)
    assert code == 2 and "prep did not write" in capsys.readouterr().err
    assert snapshot(out) == before and lance.dataset(out).count_rows() == 3


@pytest.mark.usefixtures("ray_local")
def test_a_dead_jobs_leftovers_are_cleared_and_the_rerun_succeeds(tokenizer_dir, shared_data, tmp_path):
    out = tmp_path / "o.lance"
    (out / "data").mkdir(parents=True)
    (out / "data" / "orphan.lance").write_bytes(b"half a fragment")
    (out / JOB_MARKER).write_text('{"written_by": "prep"}')
    src = tmp_path / "in.jsonl"
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        src.write_text("".join(next(f) for _ in range(50)))
    assert run_cli("pretokenize", "--input", str(src), "--output", str(out), tokenizer_dir=tokenizer_dir) == 0
    assert lance.dataset(out).count_rows() == 50
    assert not (out / "data" / "orphan.lance").exists() and (out / JOB_MARKER).exists()


@pytest.mark.s3
@pytest.mark.usefixtures("ray_local")
def test_an_s3_error_while_checking_the_output_is_an_error_and_deletes_nothing(s3_env, s3_bucket, tokenizer_dir, shared_data, tmp_path, monkeypatch, capsys):
    import boto3

    src = tmp_path / "in.jsonl"
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        src.write_text("".join(next(f) for _ in range(40)))
    out = f"s3://{s3_bucket}/tables/gsm.lance"
    assert run_cli("pretokenize", "--input", str(src), "--output", out, tokenizer_dir=tokenizer_dir) == 0
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    keys_before = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"])

    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], deny="_versions", deny_kind="denied") as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        capsys.readouterr()
        code = run_cli("pretokenize", "--input", str(src), "--output", out, "--overwrite", tokenizer_dir=tokenizer_dir)
    err = capsys.readouterr().err
    assert code == 2 and "cannot read the Lance table" in err and proxy.faults["denied"] > 0
    assert sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"]) == keys_before


def _gsm_folder(folder: Path, shared_data: Path, rows: int = 50) -> None:
    folder.mkdir(parents=True)
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        (folder / "a.jsonl").write_text("".join(next(f) for _ in range(rows)))


def test_pretokenize_with_its_output_inside_its_input_never_reads_its_own_files(tokenizer_dir, shared_data, tmp_path, capsys):
    """Issue 31, finding 5: the job read its own lease files as rows (52 = 50 + 2), then --append and --overwrite failed."""
    src = tmp_path / "d"
    _gsm_folder(src, shared_data)
    out = src / "aa.lance"
    args = ["--input", str(src), "--output", str(out), "--executor", "local"]
    assert run_cli("pretokenize", *args, tokenizer_dir=tokenizer_dir) == 0
    err = capsys.readouterr().err
    assert lance.dataset(out).count_rows() == 50 and lance.dataset(src / "aa.rejects.lance").count_rows() == 0
    assert err.count("prep's own outputs are never input") == 1 and "aa.lance" in err
    assert run_cli("pretokenize", *args, "--append", tokenizer_dir=tokenizer_dir) == 0
    assert "nothing new" in capsys.readouterr().out
    assert run_cli("pretokenize", *args, "--overwrite", tokenizer_dir=tokenizer_dir) == 0
    assert lance.dataset(out).count_rows() == 50


def test_decode_images_with_its_output_inside_its_input_keeps_its_classes(tmp_path, capsys):
    """Issue 31, finding 5: the job's lease files became 2 rejects and 2 extra classes, shifting every label."""
    from test_append_images import photo

    src = tmp_path / "d"
    photo(src / "ants" / "a.png", 10)
    photo(src / "bees" / "b.png", 20)
    out = src / "aa.lance"
    assert cli_main(["decode-images", "--input", str(src), "--output", str(out), "--executor", "local", "--size", "4"]) == 0
    assert "prep's own outputs are never input" in capsys.readouterr().err
    meta = json.loads(lance.dataset(out).schema.metadata[b"prep"])
    assert meta["labels"] == ["ants", "bees"] and meta["counts"]["rows_rejected"] == 0 and lance.dataset(out).count_rows() == 2
    assert cli_main(["decode-images", "--input", str(src), "--output", str(out), "--executor", "local", "--size", "4", "--append"]) == 0


def test_a_folder_prep_wrote_given_as_input_is_refused_naming_it(tokenizer_dir, shared_data, tmp_path, capsys):
    src = tmp_path / "d"
    _gsm_folder(src, shared_data)
    assert run_cli("pretokenize", "--input", str(src / "a.jsonl"), "--output", str(tmp_path / "t.lance"), tokenizer_dir=tokenizer_dir) == 0
    assert run_cli("pretokenize", "--input", str(tmp_path / "t.lance"), "--output", str(tmp_path / "u.lance"), tokenizer_dir=tokenizer_dir) == 2
    assert "is a folder prep wrote" in capsys.readouterr().err
