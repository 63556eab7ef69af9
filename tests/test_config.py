import pytest

from prep.runtime.config import config_hash, load_config
from prep.errors import PrepError
from prep.prepare.text.pretokenize import PretokenizeConfig


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


BASE = "input: a.jsonl\noutput: out.lance\ntokenizer: builtin:mistral-v3\nformat: sft\n"


def test_unknown_key_is_one_line_error_naming_the_key(tmp_path):
    with pytest.raises(PrepError) as e:
        load_config(PretokenizeConfig, write(tmp_path, BASE + "sft:\n  layuot: qa\n"))
    msg = str(e.value)
    assert "sft.layuot" in msg and "\n" not in msg


def test_wrong_type_names_key_and_value(tmp_path):
    with pytest.raises(PrepError, match=r"key 'max_length'.*'lots'"):
        load_config(PretokenizeConfig, write(tmp_path, BASE + "max_length: lots\n"))


def test_bad_literal_lists_choices(tmp_path):
    with pytest.raises(PrepError, match=r"overlong.*'truncate', 'reject' or 'split'"):
        load_config(PretokenizeConfig, write(tmp_path, BASE + "overlong: drop\n"))


def test_missing_required_key(tmp_path):
    with pytest.raises(PrepError, match=r"key 'tokenizer': Field required"):
        load_config(PretokenizeConfig, write(tmp_path, "input: a\noutput: b\nformat: sft\n"))


def test_missing_config_file_names_path(tmp_path):
    with pytest.raises(PrepError, match="config file not found: .*nope.yaml"):
        load_config(PretokenizeConfig, tmp_path / "nope.yaml")


def test_overrides_replace_config_values_and_change_hash(tmp_path):
    path = write(tmp_path, BASE)
    a = load_config(PretokenizeConfig, path)
    b = load_config(PretokenizeConfig, path, input="other.jsonl", output=None, tokenizer="/tok")
    assert (b.input, b.output, b.tokenizer) == ("other.jsonl", "out.lance", "/tok")
    assert config_hash(a) == config_hash(load_config(PretokenizeConfig, path))
    assert config_hash(a) != config_hash(b)


def test_rejects_path_derives_from_output(tmp_path):
    cfg = load_config(PretokenizeConfig, write(tmp_path, BASE))
    assert cfg.rejects_uri == "out.rejects.lance"


def test_passthrough_with_packing_is_rejected(tmp_path):
    with pytest.raises(PrepError, match="passthrough"):
        load_config(PretokenizeConfig, write(tmp_path, BASE + "pack:\n  seq_len: 64\npassthrough: [source]\n"))


@pytest.mark.parametrize("name", ["gsm8k-sft", "alpaca-sft", "shakespeare-packed"])
def test_shipped_configs_validate(name):
    from conftest import REPO

    cfg = load_config(PretokenizeConfig, REPO / "configs" / f"{name}.yaml")
    assert cfg.output.endswith(".lance")


def test_where_and_how_a_job_runs_does_not_change_its_hash(tmp_path):
    path = write(tmp_path, BASE)
    a = load_config(PretokenizeConfig, path)
    b = load_config(PretokenizeConfig, path, executor="ray", overwrite=True, ray={"num_cpus": 3},
                    s3={"secret_access_key": "hunter2"}, max_task_retries=1)
    c = load_config(PretokenizeConfig, path, item_timeout_s=5)
    assert config_hash(a) == config_hash(b) != config_hash(c)


def test_a_section_given_as_an_override_merges_into_the_files_section(tmp_path):
    cfg = load_config(PretokenizeConfig, write(tmp_path, BASE + "ray:\n  num_cpus: 3\nsft:\n  layout: qa\n"),
                      ray={"address": "auto"}, sft={"messages_column": "conv"})
    assert (cfg.ray.num_cpus, cfg.ray.address) == (3, "auto")
    assert (cfg.sft.layout, cfg.sft.messages_column) == ("qa", "conv")


def test_without_a_file_the_keys_come_from_arguments():
    cfg = load_config(PretokenizeConfig, None, input="a.jsonl", output="o.lance", tokenizer="t", format="pretrain")
    assert (cfg.input, cfg.format, cfg.text_column) == ("a.jsonl", "pretrain", "text")
    with pytest.raises(PrepError, match=r"^argument 'format': Field required$"):
        load_config(PretokenizeConfig, None, input="a.jsonl", output="o.lance", tokenizer="t")
