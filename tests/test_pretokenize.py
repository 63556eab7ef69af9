"""The pretokenize job end to end on a local Ray, with the real tokenizer and data."""

import json

import lance
import numpy as np
import pyarrow as pa
import pytest

from prep.errors import PrepError
from prep.contracts.table import read_table_metadata
from prep.io.lance_tables import table_exists
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize
from prep.prepare.text.tokenizer import load_tokenizer

pytestmark = pytest.mark.usefixtures("ray_local")


def config(tokenizer_dir, input, output, **kw):
    base = dict(input=str(input), output=str(output), tokenizer=tokenizer_dir, format="sft", sft={"layout": "qa"})
    return PretokenizeConfig.model_validate({**base, **kw})


@pytest.fixture(scope="module")
def gsm8k_small(tmp_path_factory, shared_data):
    path = tmp_path_factory.mktemp("gsm") / "train.jsonl"
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        path.write_text("".join(next(f) for _ in range(600)))
    return path


def test_gsm8k_full_table_has_contract_columns_counts_and_metadata(tokenizer_dir, shared_data, tmp_path):
    cfg = config(tokenizer_dir, shared_data / "gsm8k" / "train.jsonl", tmp_path / "gsm.lance", max_length=1024)
    s = run_pretokenize(cfg)
    assert (s["rows_read"], s["rows_written"], s["rows_rejected"]) == (7473, 7473, 0)
    ds = lance.dataset(cfg.output)
    assert ds.schema.field("id").type == pa.uint64()
    assert ds.schema.field("input_ids").type == pa.list_(pa.int32())
    assert ds.schema.field("loss_mask").type == pa.list_(pa.int8())
    meta = read_table_metadata(ds, 't').to_json()
    assert meta["kind"] == "sft" and meta["counts"]["tokens"] == s["tokens"] > 1_000_000
    assert meta["counts"]["rows_rejected"] == 0 and meta["counts"]["rows_read"] == 7473
    assert meta["tokenizer"]["eos_id"] == 2 and len(meta["tokenizer"]["hash"]) == 64
    assert meta["sources"][0]["size"] == (shared_data / "gsm8k" / "train.jsonl").stat().st_size
    assert len(meta["config_hash"]) == 64 and meta["config"]["tokenizer"] == tokenizer_dir
    t = ds.to_table()
    assert len(set(t["id"].to_pylist())) == 7473
    assert t["length"].to_numpy().sum() == s["tokens"]
    first = json.loads((shared_data / "gsm8k" / "train.jsonl").open().readline())
    ids, mask = np.array(t["input_ids"][0].as_py()), np.array(t["loss_mask"][0].as_py(), bool)
    tok = load_tokenizer(tokenizer_dir)
    assert tok.decode(ids[mask]).strip() == first["answer"] + "</s>"
    assert lance.dataset(cfg.rejects_uri).count_rows() == 0


def test_same_inputs_give_same_rows_ids_and_order_whatever_the_chunking(tokenizer_dir, gsm8k_small, tmp_path):
    a = run_pretokenize(config(tokenizer_dir, gsm8k_small, tmp_path / "a.lance"))
    b = run_pretokenize(config(tokenizer_dir, gsm8k_small, tmp_path / "b.lance", chunk_bytes=8192))
    assert a["chunks"] == 1 and b["chunks"] > 10
    ta, tb = lance.dataset(tmp_path / "a.lance").to_table(), lance.dataset(tmp_path / "b.lance").to_table()
    assert ta.equals(tb)


def test_bad_rows_are_rejected_with_reasons_and_counts_reconcile(tokenizer_dir, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    good = json.dumps({"question": "What is 1+1?", "answer": "2"})
    (src / "a.jsonl").write_bytes(
        "\n".join([
            good,
            '{"question": "unterminated',
            json.dumps({"question": "no answer"}),
            json.dumps({"question": "q", "answer": None}),
            json.dumps({"question": "q", "answer": 7}),
            json.dumps({"question": "", "answer": "a"}),
            good,
            json.dumps({"question": "long " * 300, "answer": "x"}),
        ]).encode() + b'\n{"question": "\xc3\x28", "answer": "a"}\n\n' + good.encode() + b"\n"
    )
    (src / "empty.jsonl").write_text("")
    s = run_pretokenize(config(tokenizer_dir, src, tmp_path / "t.lance", max_length=64, max_reject_fraction=0.7))
    assert s["rows_read"] == 10 and s["rows_written"] == 3 and s["rows_rejected"] == 7
    assert s["rows_read"] == s["rows_written"] + s["rows_rejected"]
    rej = lance.dataset(tmp_path / "t.rejects.lance").to_table().to_pylist()
    reasons = {(r["source"].rsplit("/", 1)[1], r["position"]): r["reason"] for r in rej}
    assert reasons[("a.jsonl", "line 2")].startswith("malformed JSON")
    assert reasons[("a.jsonl", "line 3")] == "missing field 'answer'"
    assert reasons[("a.jsonl", "line 4")] == "field 'answer' is null"
    assert reasons[("a.jsonl", "line 5")] == "field 'answer' must be a string, got int"
    assert reasons[("a.jsonl", "line 6")] == "field 'question' is empty"
    assert reasons[("a.jsonl", "line 8")].endswith("tokens > max_length 64")
    assert reasons[("a.jsonl", "line 9")].startswith("invalid UTF-8")
    assert reasons[("empty.jsonl", "file")] == "empty file"
    assert read_table_metadata(lance.dataset(tmp_path / "t.lance"), "t").to_json()["counts"]["blank_lines"] == 1


def test_split_policy_keeps_all_tokens_as_extra_rows(tokenizer_dir, gsm8k_small, tmp_path):
    whole = run_pretokenize(config(tokenizer_dir, gsm8k_small, tmp_path / "w.lance"))
    split = run_pretokenize(config(tokenizer_dir, gsm8k_small, tmp_path / "s.lance", max_length=100, overlong="split"))
    # every token is kept but those of pieces of prompt only, which train nothing (issue 31 #10): left out, counted
    assert split["tokens"] + split["pieces_untrained_tokens"] == whole["tokens"] and split["rows_written"] > whole["rows_written"]
    assert split["tokens_trained"] == whole["tokens_trained"] and split["pieces_untrained"] > 0
    t = lance.dataset(tmp_path / "s.lance").to_table()
    assert min(sum(m) for m in t["loss_mask"].to_pylist()) > 0
    assert max(t["length"].to_pylist()) <= 100 and len(set(t["id"].to_pylist())) == t.num_rows
    trunc = run_pretokenize(config(tokenizer_dir, gsm8k_small, tmp_path / "t.lance", max_length=100, overlong="truncate"))
    # a question of over 100 tokens leaves no trained token: that row is a reject (issue 31 #10), 55 of these 600
    assert trunc["rows_written"] + trunc["rows_rejected"] == whole["rows_written"] and trunc["rows_rejected"] == 55
    assert trunc["tokens"] + trunc["counts"]["tokens_truncated"] + 100 * trunc["rows_rejected"] == whole["tokens"]


def test_packed_shakespeare_keeps_every_token(tokenizer_dir, shared_data, tmp_path):
    cfg = PretokenizeConfig.model_validate(dict(
        input=str(shared_data / "tinyshakespeare" / "input.txt"), output=str(tmp_path / "p.lance"),
        tokenizer=tokenizer_dir, format="pretrain", pack={"seq_len": 256}, chunk_bytes=256 << 10))
    s = run_pretokenize(cfg)
    t = lance.dataset(cfg.output).to_table()
    assert t.schema.field("input_ids").type == pa.list_(pa.int32(), 256)
    assert int(t["length"].to_numpy().sum()) == s["tokens"]
    assert t.num_rows * 256 == s["tokens"] + s["pad_tokens"]
    assert s["pad_tokens"] < 256 * s["chunks"]
    assert s["rows_read"] == s["counts"]["rows_accepted"] > 1000  # paragraphs
    ids = np.asarray(t["input_ids"].combine_chunks().values)
    trained = np.asarray(t["loss_mask"].combine_chunks().values) == 1
    assert ((ids == 2) & trained).sum() == s["rows_read"]  # one EOS per document; padding (also id 2) is masked
    assert int(trained.sum()) == s["tokens"]


def test_existing_table_needs_overwrite_and_failed_job_leaves_no_table(tokenizer_dir, gsm8k_small, tmp_path):
    out = tmp_path / "o.lance"
    run_pretokenize(config(tokenizer_dir, gsm8k_small, out))
    with pytest.raises(PrepError, match="already holds a table; pass --overwrite"):
        run_pretokenize(config(tokenizer_dir, gsm8k_small, out))
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    (bad_dir / "a.jsonl").write_text(gsm8k_small.read_text())
    (bad_dir / "b.json").write_text('[{"question": "truncated array"')
    fresh = tmp_path / "fresh.lance"
    with pytest.raises(PrepError, match=r"b\.json.*malformed JSON"):
        run_pretokenize(config(tokenizer_dir, bad_dir, fresh))
    assert not table_exists(str(fresh))
    (bad_dir / "b.json").unlink()
    assert run_pretokenize(config(tokenizer_dir, bad_dir, fresh))["rows_written"] == 600
    s = run_pretokenize(config(tokenizer_dir, gsm8k_small, out, overwrite=True))
    assert s["rows_written"] == 600 and lance.dataset(out).count_rows() == 600


def test_alpaca_config_reads_json_arrays_and_parquet_and_masks_only_outputs(tokenizer_dir, tmp_path):
    import pyarrow.parquet as pq

    from conftest import REPO
    from prep.runtime.config import load_config

    src = tmp_path / "alpaca"
    src.mkdir()
    rows = [{"instruction": f"Add {i} and {i}.", "input": "" if i % 2 else "Show your work.", "output": f"{2 * i}"} for i in range(6)]
    (src / "a.json").write_text(json.dumps(rows[:3]))
    pq.write_table(pa.Table.from_pylist(rows[3:]), src / "b.parquet")
    cfg = load_config(PretokenizeConfig, REPO / "configs" / "alpaca-sft.yaml", input=str(src),
                      output=str(tmp_path / "alp.lance"), tokenizer=tokenizer_dir)
    s = run_pretokenize(cfg)
    assert (s["sources"], s["rows_read"], s["rows_written"], s["rows_rejected"]) == (2, 6, 6, 0)
    tok = load_tokenizer(tokenizer_dir)
    t = lance.dataset(cfg.output).to_table()
    for row, ids, mask in zip(rows, t["input_ids"].to_pylist(), t["loss_mask"].to_pylist()):
        ids, mask = np.array(ids), np.array(mask, bool)
        assert tok.decode(ids[mask]).strip() == row["output"] + "</s>"
        prompt = tok.decode(ids[~mask])
        assert prompt.endswith(f"{row['instruction']}\n\n{row['input']} [/INST]" if row["input"] else f"{row['instruction']} [/INST]")
