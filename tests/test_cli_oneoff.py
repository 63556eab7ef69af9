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


# --- every recipe key from the command line (issue 33: `--pack 1024` was "unrecognized arguments") -----------


def _leaves(model: type, prefix: str = "") -> dict[str, object]:
    """``{dotted key: default}`` for every leaf of a config model with a default (sections walked into)."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    out: dict[str, object] = {}
    for name, field in model.model_fields.items():
        section = field.annotation if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel) else None
        if section is not None:
            out |= _leaves(section, f"{prefix}{name}.")
        elif field.default is not PydanticUndefined or field.default_factory is not None:
            out[f"{prefix}{name}"] = field.get_default(call_default_factory=True)
    return out


@pytest.mark.parametrize("command", ["pretokenize", "decode-images"])
def test_every_config_key_is_reachable_with_set_and_validated_as_the_yaml_is(command, tmp_path, capsys):
    """Each key, set to its default, passes validation (the job then stops at the missing input); an unknown
    key is one line naming it."""
    import json

    from prep.prepare.images.config import ImagesConfig
    from prep.prepare.text.pretokenize import PretokenizeConfig

    model, required = {"pretokenize": (PretokenizeConfig, ["--tokenizer", "builtin:mistral-v3", "--format", "sft"]),
                       "decode-images": (ImagesConfig, [])}[command]
    base = [command, "--input", str(tmp_path / "missing"), "--output", str(tmp_path / "o.lance"), *required]
    leaves = _leaves(model)
    assert {"chunk_bytes", "s3.retry.max_attempts", "ray.num_cpus", "item_timeout_s"} <= set(leaves)
    for key, default in leaves.items():
        value = json.dumps(default.get_secret_value() if hasattr(default, "get_secret_value") else default)
        assert main([*base, "--set", f"{key}={value}"]) == 2
        assert capsys.readouterr().err.strip() == f"prep {command}: error: input not found: {tmp_path / 'missing'}", key
    assert main([*base, "--set", "s3.retry.max_atempts=3"]) == 2
    assert capsys.readouterr().err.strip() == (f"prep {command}: error: argument 's3.retry.max_atempts': Extra inputs "
                                               "are not permitted (got 3)")


@pytest.fixture
def captured_config(monkeypatch):
    """The config each prepare command line builds (its job is not run)."""
    from prep.prepare.images import job
    from prep.prepare.text import pretokenize

    seen = []
    monkeypatch.setattr(pretokenize, "run_pretokenize", lambda cfg: seen.append(cfg) or {})
    monkeypatch.setattr(job, "run_decode_images", lambda cfg: seen.append(cfg) or {})
    monkeypatch.setattr("prep.prepare.text.pretokenize.format_summary", lambda summary: "")
    monkeypatch.setattr("prep.prepare.images.job.format_summary", lambda summary: "")
    return seen


def test_named_flags_set_their_keys_and_win_over_set_and_the_config(captured_config, tmp_path):
    config = tmp_path / "recipe.yaml"
    config.write_text("tokenizer: builtin:mistral-v3\nformat: sft\nsft: {layout: qa, messages_column: turns}\n"
                      "text_unit: file\n")
    assert main(["pretokenize", "--config", str(config), "--input", "in.jsonl", "--output", "o.lance",
                 "--pack", "1024", "--text-unit", "line", "--input-format", "jsonl", "--sft-layout", "messages",
                 "--prompt-template", "Q: {prompt}\nA: ", "--response-template", "{response}",
                 "--set", "text_unit=paragraph", "--set", "chunk_bytes=65536", "--set", "s3.retry.max_attempts=12"]) == 0
    cfg = captured_config.pop()
    assert cfg.pack.seq_len == 1024 and cfg.text_unit == "line" and cfg.input_format == "jsonl"
    assert (cfg.sft.layout, cfg.sft.messages_column, cfg.sft.prompt_template, cfg.sft.response_template) == \
        ("messages", "turns", "Q: {prompt}\nA: ", "{response}")  # the file's messages_column kept
    assert cfg.chunk_bytes == 65536 and cfg.s3.retry.max_attempts == 12
    assert main(["pretokenize", "--input", "in.jsonl", "--output", "o.lance", "--tokenizer", "t", "--format", "sft",
                 "--passthrough", "uid,source"]) == 0
    assert captured_config.pop().passthrough == ["uid", "source"]
    assert main(["decode-images", "--input", "photos", "--output", "o.lance", "--size", "256x192", "--resize", "pad",
                 "--interpolation", "bicubic", "--channels", "1", "--encode", "webp", "--quality", "80",
                 "--keep-original", "--path-column", "file", "--label-column", "cls", "--image-column", "img",
                 "--set", "pad_value=255", "--set", "label_column=null"]) == 0
    cfg = captured_config.pop()
    assert (cfg.size, cfg.resize, cfg.interpolation, cfg.channels, cfg.encode, cfg.quality, cfg.keep_original) == \
        ((256, 192), "pad", "bicubic", 1, "webp", 80, True)
    assert (cfg.path_column, cfg.label_column, cfg.image_column, cfg.pad_value) == ("file", "cls", "img", 255)


def test_set_gives_the_required_keys_too(captured_config):
    assert main(["pretokenize", "--input", "in.txt", "--output", "o.lance", "--set", "tokenizer=builtin:mistral-v3",
                 "--set", "format=pretrain", "--set", "pack=2048"]) == 0
    assert captured_config.pop().pack.seq_len == 2048


def test_pack_from_a_flag_writes_packed_rows(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text(TEXT)
    assert main(["pretokenize", "--input", "in.txt", "--output", "p.lance", "--tokenizer", "builtin:mistral-v3",
                 "--format", "pretrain", "--pack", "16", "--text-unit", "line", "--executor", "local"]) == 0
    assert "rows: read 6 = written 6 + rejected 0 -> 3 table rows" in capsys.readouterr().out  # a line, a document
    table = lance.dataset(tmp_path / "p.lance").to_table()
    assert {len(ids) for ids in table["input_ids"].to_pylist()} == {16} and "position_ids" in table.column_names
