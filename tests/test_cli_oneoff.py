"""One-off jobs: `prep pretokenize` and `prep decode-images` run from flags alone; a config file is a recipe to keep.

Relative paths resolve from the current directory, and a path that is not there is named both as given
and as the absolute path it resolved to.
"""

from __future__ import annotations

import lance
import pytest

import prep
from prep.cli import main

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n"


def test_pretokenize_without_config_names_the_missing_flags(capsys):
    assert main(["pretokenize", "--input", "in.txt", "--output", "out.lance"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("prep pretokenize: error: --tokenizer and --format required without --config "
                   "(or give --config FILE, a recipe: see configs/)")


def test_decode_images_without_config_needs_input_and_output_only(capsys):
    assert main(["decode-images", "--input", "photos"]) == 2
    assert "--output required without --config" in capsys.readouterr().err


def test_a_relative_input_that_is_missing_is_named_with_where_it_resolved(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["pretokenize", "--input", "../nowhere/train.jsonl", "--output", "o.lance",
                 "--tokenizer", "builtin:mistral-v3", "--format", "pretrain"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"prep pretokenize: error: input not found: ../nowhere/train.jsonl (resolved from the current "
                   f"directory {tmp_path} to {tmp_path.parent / 'nowhere' / 'train.jsonl'})")


def test_a_relative_config_that_is_missing_is_named_with_where_it_resolved(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["pretokenize", "--config", "configs/x.yaml"]) == 2
    assert f"config file not found: configs/x.yaml (resolved from the current directory {tmp_path} to " \
        f"{tmp_path / 'configs' / 'x.yaml'})" in capsys.readouterr().err


def test_the_python_function_names_a_missing_argument():
    with pytest.raises(prep.PrepError, match=r"^argument 'tokenizer': Field required$"):
        prep.pretokenize(input="a.jsonl", output="b.lance", format="pretrain")


@pytest.mark.slow
def test_pretokenize_from_flags_alone_equals_the_python_function(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text(TEXT)
    flags = {"tokenizer": "builtin:mistral-v3", "format": "pretrain", "max_length": 8, "overlong": "split",
             "executor": "local"}
    argv = [a for k, v in flags.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    assert main(["pretokenize", "--input", "in.txt", "--output", "cli.lance", *argv]) == 0
    assert "rows: read 3 = written 3 + rejected 0" in capsys.readouterr().out
    summary = prep.pretokenize(input="in.txt", output="py.lance", **flags)
    cli, py = lance.dataset(tmp_path / "cli.lance").to_table(), lance.dataset(tmp_path / "py.lance").to_table()
    assert summary["rows_read"] == 3 and cli.num_rows > 3  # split at 8 tokens
    assert max(len(ids) for ids in cli["input_ids"].to_pylist()) == 8
    assert cli.equals(py)


def test_relative_outputs_after_a_chdir_land_where_the_table_is(tmp_path, monkeypatch):
    """A sandbox outlives the call that started it: relative outputs are resolved before workers see them
    (a second job in another folder wrote its data files under the first folder and committed a table
    whose files were missing)."""
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        (tmp_path / name / "in.txt").write_text(TEXT)
        prep.pretokenize(input="in.txt", output="x.lance", tokenizer="builtin:mistral-v3", format="pretrain",
                         executor="local")
        assert lance.dataset(tmp_path / name / "x.lance").to_table().num_rows == 3
    assert [len(list((tmp_path / n / "x.lance" / "data").iterdir())) for n in ("first", "second")] == [1, 1]
