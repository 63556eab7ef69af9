"""``prep inspect``: what a prepared table, its rejects and a materialized output hold, and one-line errors on bad paths.

Runs the CLI in this process (``prep.cli.main``) on tables written by the real
prepare job (GSM8K rows through the builtin Mistral v3 tokenizer, bad rows on purpose).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lance
import numpy as np
import pytest

import reader_fixtures as rf
import tables
from prep.io import lance_tables
from prep.contracts.table import METADATA_KEY, read_table_metadata
from prep.cli import main
from prep.materialize import materialize_shuffle

pytestmark = pytest.mark.skipif(not tables.have_real_data(), reason="needs ../shared/data (GSM8K and the tokenizer)")

ROWS = 60
BAD = ['{"question": "no answer here"}', "{not json", json.dumps({"question": "q", "answer": "a " * 3000})]


def prep(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, str]:
    """A GSM8K SFT table with three rejects (a missing field, broken JSON, an over-long row) and its materialization."""
    from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize

    root = tmp_path_factory.mktemp("inspect")
    lines = tables.GSM8K.read_text().splitlines()[:ROWS]
    (root / "in.jsonl").write_text("\n".join(lines[:10] + BAD + lines[10:]) + "\n")
    cfg = PretokenizeConfig.model_validate(dict(input=str(root / "in.jsonl"), output=str(root / "t.lance"),
                                                tokenizer="builtin:mistral-v3", format="sft", sft={"layout": "qa"},
                                                max_length=1024, overlong="reject", executor="local"))
    run_pretokenize(cfg)
    out = str(root / "out")
    materialize_shuffle(table=cfg.output, output=out, epochs=2, splits=4)
    return {"table": cfg.output, "rejects": cfg.rejects_uri, "out": out, "root": str(root)}


def test_a_table_report_measures_rows_tokens_and_lengths(prepared, capsys):
    code, out, _ = prep(capsys, "inspect", prepared["table"], "--json")
    assert code == 0
    r = json.loads(out)
    lengths = lance.dataset(prepared["table"]).to_table(columns=["length"])["length"].to_numpy()
    assert r["kind"] == "table" and r["table_kind"] == "sft" and r["num_rows"] == ROWS == len(lengths)
    assert r["tokens"] == int(lengths.sum())
    assert r["length"]["p50"] == float(np.percentile(lengths, 50)) and r["length"]["max"] == int(lengths.max())
    assert r["tokenizer"]["name"] == "builtin:mistral-v3" and r["config"]["format"] == "sft"
    assert r["versions"]["written_by_prep"] == r["versions"]["this_prep"]
    assert set(r["schema"]) == {"id", "input_ids", "loss_mask", "length"}
    assert r["rejects"]["num_rows"] == 3  # the table's report sums up its rejects too


def test_rejects_are_grouped_by_reason_with_examples(prepared, capsys):
    code, out, _ = prep(capsys, "inspect", prepared["rejects"], "--json")
    assert code == 0
    r = json.loads(out)
    assert r["kind"] == "rejects" and r["num_rows"] == 3 and r["of"] == prepared["table"]
    assert sum(g["count"] for g in r["reasons"].values()) == 3
    over = [g for reason, g in r["reasons"].items() if "max_length" in reason]
    assert over and over[0]["examples"][0]["position"] == "line 13"  # the 3rd bad line, after 10 good ones
    code, text, _ = prep(capsys, "inspect", prepared["rejects"])
    assert "3 rejected" in text and "line 11" in text


def test_rows_decode_back_to_text_with_the_masked_prompt_marked(prepared, capsys):
    code, out, _ = prep(capsys, "inspect", prepared["table"], "--rows", "2")
    assert code == 0
    first_question = json.loads(tables.GSM8K.read_text().splitlines()[0])["question"]
    (line,) = [x for x in out.splitlines() if x.startswith("  - id ")][:1]
    prompt, trained = line.split("[[", 1)[1].split("]]", 1)
    assert first_question[:40] in prompt  # the question is the masked part
    assert "####" in out.split("]]", 1)[1]  # the answer (trained on) follows it
    assert "tokens:" in out and "trained on" in out and "p99" in out


def test_a_materialized_output_report_counts_rows_per_split_and_epoch(prepared, capsys):
    code, out, _ = prep(capsys, "inspect", prepared["out"], "--json")
    r = json.loads(out)
    manifest = json.loads(Path(prepared["out"], "manifest.json").read_text())
    assert code == 0 and r["kind"] == "materialized" and r["epochs"] == [0, 1] and r["num_splits"] == 4
    assert r["rows_per_split"] == {str(e["epoch"]): [s["num_rows"] for s in e["splits"]] for e in manifest["epochs"]}
    for e in manifest["epochs"]:  # the manifest's counts against the rows the splits hold
        held = [lance.dataset(str(Path(prepared["out"], s["path"]))).count_rows() for s in e["splits"]]
        assert r["rows_per_epoch"][str(e["epoch"])] == sum(held) == ROWS
    assert r["table_kind"] == "sft" and r["tokenizer"]["name"] == "builtin:mistral-v3"


@pytest.mark.parametrize("which", ["table", "rejects", "out", "images"])
def test_plot_writes_a_figure(prepared, capsys, tmp_path, which):
    if which == "images":
        table, meta = rf.image_table(8, (16, 16, 3))
        path = str(tmp_path / "img.lance")
        rf.write_table(path, table, meta)
    else:
        path = prepared[which]
    png = tmp_path / "fig.png"
    code, out, _ = prep(capsys, "inspect", path, "--plot", str(png))
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    if which == "images":
        assert "labels ants 4, bees 4" in out


def _one_line(capsys, args: list[str], *names: str) -> str:
    code, _, err = prep(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def test_a_path_that_is_not_a_table_is_one_line(prepared, capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    _one_line(capsys, ["inspect", str(tmp_path)], str(tmp_path), "is not a Lance table or a materialized output")
    _one_line(capsys, ["inspect", str(tmp_path / "notes.txt")], "notes.txt")
    _one_line(capsys, ["inspect", str(tmp_path / "nope")], "nope", "does not exist")


def test_a_table_from_a_newer_prep_is_one_line(prepared, capsys, tmp_path):
    path = shutil.copytree(prepared["table"], str(tmp_path / "newer.lance"))
    ds = lance.dataset(path)
    meta = {**read_table_metadata(ds, path).to_json(), "format": "prep.table/2", "prep_version": "9.0.0"}
    schema = ds.schema.with_metadata({**ds.schema.metadata, METADATA_KEY: json.dumps(meta)})
    lance_tables.commit_table(path, schema, [f.metadata for f in ds.get_fragments()])
    _one_line(capsys, ["inspect", path], "prep.table/2", "prep 9.0.0", "upgrade prep")


def test_a_foreign_lance_table_is_one_line(capsys, tmp_path):
    lance.write_dataset(rf.gsm8k_sft(4).replace_schema_metadata(None), str(tmp_path / "f.lance"))
    _one_line(capsys, ["inspect", str(tmp_path / "f.lance")], "f.lance", "prep did not write")


def test_a_materialized_output_missing_a_split_is_one_line(prepared, capsys, tmp_path):
    out = shutil.copytree(prepared["out"], str(tmp_path / "out"))
    shutil.rmtree(Path(out, "epoch-00001", "split-00002.lance"))
    _one_line(capsys, ["inspect", out], "epoch-00001/split-00002.lance", "missing", "prep materialize-shuffle")
    Path(out, "manifest.json").unlink()
    _one_line(capsys, ["inspect", out], "manifest.json", "has not finished")


def test_a_materialized_mixture_shows_each_sources_share(capsys, tmp_path):
    import pyarrow as pa

    table = rf.gsm8k_sft(40)
    table = table.append_column("source", pa.array(["math"] * 30 + ["chat"] * 10))
    rf.write_table(str(tmp_path / "mix.lance"), table, rf.sft_metadata(40, int(pa.compute.sum(table["length"]).as_py())))
    materialize_shuffle(table=str(tmp_path / "mix.lance"), output=str(tmp_path / "out"), epochs=1, splits=4)
    code, out, _ = prep(capsys, "inspect", str(tmp_path / "out"), "--json")
    assert code == 0 and json.loads(out)["source_shares"] == {"math": 0.75, "chat": 0.25}
