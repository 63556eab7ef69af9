"""Row ids never collide across files, and a file given twice is read once (issue 21, #7).

Ids derive from a file's whole identity under the inputs (its path relative to the
folder all inputs share, or its full URI), never its base name; locally and on s3://.
"""

from __future__ import annotations

import logging

import boto3
import lance
import pytest

from prep.io import storage
from prep.prepare.listing import list_inputs
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize


def config(tokenizer_dir: str, inputs: list[str], output: str, **kw) -> PretokenizeConfig:
    return PretokenizeConfig.model_validate(dict(input=inputs, output=output, tokenizer=tokenizer_dir, format="sft",
                                                 sft={"layout": "qa"}, executor="local", **kw))


def halves(shared_data) -> tuple[bytes, bytes]:
    with open(shared_data / "gsm8k" / "train.jsonl", "rb") as f:
        lines = [next(f) for _ in range(600)]
    return b"".join(lines[:300]), b"".join(lines[300:])


def test_same_named_files_in_two_folders_get_distinct_ids(tokenizer_dir, shared_data, tmp_path):
    for folder, data in zip("ab", halves(shared_data)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.jsonl").write_bytes(data)
    for name, inputs in {"files": [str(tmp_path / "a" / "train.jsonl"), str(tmp_path / "b" / "train.jsonl")],
                         "folders": [str(tmp_path / "a"), str(tmp_path / "b")]}.items():
        cfg = config(tokenizer_dir, inputs, str(tmp_path / f"{name}.lance"))
        assert run_pretokenize(cfg)["rows_written"] == 600
        assert len(set(lance.dataset(cfg.output).to_table(columns=["id"])["id"].to_pylist())) == 600


def test_one_input_keeps_the_ids_it_had(tmp_path):
    """A single input's id keys are its files' paths under it, as before: existing tables keep their ids."""
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("x.jsonl", "sub/y.jsonl"):
        (tmp_path / "d" / name).write_text('{"text": "t"}\n')
    [listing] = list_inputs([str(tmp_path / "d")])
    assert [(f.key, f.ids_from) for f in listing.files] == [("sub/y.jsonl", "sub/y.jsonl"), ("x.jsonl", "x.jsonl")]
    [single] = list_inputs([str(tmp_path / "d" / "x.jsonl")])
    assert single.files[0].ids_from == "x.jsonl"
    both = list_inputs([str(tmp_path / "d" / "sub"), str(tmp_path / "d" / "x.jsonl")])
    assert [f.ids_from for listing in both for f in listing.files] == ["sub/y.jsonl", "x.jsonl"]
    assert [f.key for listing in both for f in listing.files] == ["y.jsonl", "x.jsonl"]  # labels, messages: per input


class Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_file_given_twice_is_read_once_with_a_warning(tokenizer_dir, shared_data, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.jsonl").write_bytes(halves(shared_data)[0])
    twice = [str(tmp_path / "d" / "train.jsonl"), str(tmp_path / "d"), str(tmp_path / "d" / "train.jsonl")]
    recorded, logger = Recorded(), logging.getLogger("prep.prepare.listing")
    logger.addHandler(recorded)
    try:
        s = run_pretokenize(config(tokenizer_dir, twice, str(tmp_path / "o.lance")))
    finally:
        logger.removeHandler(recorded)
    assert (s["rows_read"], s["sources"]) == (300, 1)
    warned = [m for m in recorded.messages if "already lists" in m]
    assert len(warned) == 2 and all("read once" in w and "train.jsonl" in w for w in warned)


@pytest.mark.s3
def test_same_named_objects_under_two_prefixes_get_distinct_ids_on_s3(s3_env, s3_bucket, tokenizer_dir, shared_data):
    s3 = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    for prefix, data in zip(("a", "b"), halves(shared_data)):
        s3.put_object(Bucket=s3_bucket, Key=f"raw/{prefix}/train.jsonl", Body=data)
    a, b = (f"s3://{s3_bucket}/raw/{p}/train.jsonl" for p in "ab")
    cfg = config(tokenizer_dir, [a, b, a], f"s3://{s3_bucket}/out/t.lance")
    s = run_pretokenize(cfg)
    assert (s["rows_written"], s["sources"]) == (600, 2)
    ids = lance.dataset(cfg.output, storage_options=storage.lance_storage_options(cfg.output)).to_table(columns=["id"])["id"].to_pylist()
    assert len(set(ids)) == 600
    keys = [f.ids_from for listing in list_inputs([a, b]) for f in listing.files]
    assert keys == ["a/train.jsonl", "b/train.jsonl"]


def test_two_image_folders_with_the_same_names_keep_their_labels_and_get_distinct_ids(tmp_path):
    """The images job lists through the same code: same-named photos under two inputs, and an input given twice."""
    from prep.prepare.images.config import ImagesConfig
    from prep.prepare.images.sources import plan

    for root in ("x", "y"):
        for cls in ("ants", "bees"):
            (tmp_path / root / cls).mkdir(parents=True)
            (tmp_path / root / cls / "1.jpg").write_bytes(b"not decoded by planning")
    inputs = [str(tmp_path / "x"), str(tmp_path / "y"), str(tmp_path / "x")]
    planned = plan(ImagesConfig.model_validate(dict(input=inputs, output=str(tmp_path / "o.lance"), size=16)))
    items = [item for chunk in planned.chunks for item in chunk.items]
    assert [(i.key, i.label) for i in items] == [("x/ants/1.jpg", "ants"), ("x/bees/1.jpg", "bees"),
                                                  ("y/ants/1.jpg", "ants"), ("y/bees/1.jpg", "bees")]
    assert planned.labels.names == ("ants", "bees")
