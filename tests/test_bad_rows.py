"""Any failure of one row is a reject, never a failed pretokenize job (issue 21, #1).

- Hostile rows found in the wild (a lone surrogate, nesting past Python's parser, a
  5,000-digit integer, NaN, duplicate keys, NUL, a BOM mid-file, multi-MB strings) are
  parsed or rejected, row by row, each reject naming its line.
- Every built-in exception type raised at every text stage (parse, format, template,
  tokenize) for one named row, through the test-only hook (prep.prepare.faults), in both
  executors: the row is rejected with the exception's type, every other row is written.
- A seeded fuzzer mixes hostile lines into real GSM8K rows: rows in = written + rejected,
  and exactly the rows the test expects to be written are written, in order.
"""

from __future__ import annotations

import builtins
import gzip
import json
import random
from pathlib import Path

import lance
import pytest

from prep.contracts.table import read_table_metadata
from prep.prepare import faults
from prep.prepare.text.pretokenize import PretokenizeConfig, format_summary, run_pretokenize

DEEP = b"[" * 5000 + b"]" * 5000
BIG = b"9" * 5000


def config(tokenizer_dir: str, input, output, **kw) -> PretokenizeConfig:
    base = dict(input=str(input), output=str(output), tokenizer=tokenizer_dir, format="sft", sft={"layout": "qa"}, executor="local")
    return PretokenizeConfig.model_validate({**base, **kw})


def gsm8k(shared_data: Path, n: int, start: int = 0) -> list[bytes]:
    with open(shared_data / "gsm8k" / "train.jsonl", "rb") as f:
        return f.readlines()[start:start + n]


def rejects_by_line(cfg: PretokenizeConfig) -> dict[int, str]:
    rows = lance.dataset(cfg.rejects_uri).to_table(columns=["position", "reason"]).to_pylist()
    return {int(r["position"].split()[1]): r["reason"] for r in rows if r["position"].startswith("line ")}


# --- the rows that failed whole jobs -----------------------------------------------------------

# (line, written?) for each hostile row: what a user would expect of each.
HOSTILE = [
    (b'{"question": "What is \\ud800?", "answer": "x", "text": "What is \\ud800?"}', False),  # the tokenizer's TypeError
    (b'{"question": "deep", "answer": "x", "text": "deep", "extra": ' + DEEP + b"}", False),  # RecursionError in the parser
    (b'{"question": "big", "answer": "x", "text": "big", "n": ' + BIG + b"}", True),  # read, as a Decimal
    (b'{"question": "nan", "answer": "x", "text": "nan", "n": NaN, "m": -Infinity}', True),
    (b'{"question": "dup", "answer": "x", "answer": "y", "text": "dup"}', True),  # the last one wins, as in JSON.parse
    (b'{"question": "nul \\u0000 escaped", "answer": "x", "text": "nul \\u0000"}', True),
    (b'\xef\xbb\xbf{"question": "bom mid-file", "answer": "x", "text": "bom"}', True),
    (b'{"question": "raw nul \x00", "answer": "x", "text": "raw"}', False),  # a control character JSON forbids
    (json.dumps({"question": "multi-MB", "answer": "many words " * 300_000, "text": "long"}).encode(), True),
]


@pytest.mark.parametrize("fmt", ["sft", "pretrain"])
def test_one_hostile_row_costs_that_row_not_the_job(fmt, tokenizer_dir, shared_data, tmp_path):
    good = gsm8k(shared_data, 60)
    (tmp_path / "a.jsonl").write_bytes(b"".join(good[:30]) + b"".join(line + b"\n" for line, _ in HOSTILE) + b"".join(good[30:]))
    cfg = config(tokenizer_dir, tmp_path / "a.jsonl", tmp_path / "o.lance", format=fmt, text_column="question")
    s = run_pretokenize(cfg)
    bad_lines = {31 + i for i, (_, written) in enumerate(HOSTILE) if not written}
    assert (s["rows_read"], s["rows_rejected"]) == (len(good) + len(HOSTILE), len(bad_lines))
    assert lance.dataset(cfg.output).count_rows() == s["rows_written"] == len(good) + len(HOSTILE) - len(bad_lines)
    reasons = rejects_by_line(cfg)
    assert set(reasons) == bad_lines
    assert "lone surrogate" in reasons[31] and "RecursionError" in reasons[32] and "control character" in reasons[38]


def test_a_row_whose_passthrough_value_arrow_cannot_store_is_rejected(tokenizer_dir, shared_data, tmp_path):
    good = gsm8k(shared_data, 20)
    hostile = b'{"question": "q", "answer": "a", "note": "\\udc80"}\n{"question": "q", "answer": "a", "note": ' + BIG + b"}\n"
    (tmp_path / "a.jsonl").write_bytes(b"".join(good) + hostile)
    cfg = config(tokenizer_dir, tmp_path / "a.jsonl", tmp_path / "o.lance", passthrough=["note"])
    s = run_pretokenize(cfg)
    assert (s["rows_written"], s["rows_rejected"]) == (21, 1)
    assert set(rejects_by_line(cfg)) == {21}
    assert lance.dataset(cfg.output).to_table(columns=["note"])["note"][-1].as_py() == json.dumps(BIG.decode())


# --- exception injection -------------------------------------------------------------------------

EXCEPTIONS = sorted({getattr(builtins, n) for n in dir(builtins)
                     if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), Exception)}, key=lambda t: t.__name__)
STAGES = ["parse", "format", "template", "tokenize"]


def _needles(lines: list[bytes], count: int) -> list[tuple[int, str]]:
    """``count`` (line index, needle): a question prefix that names its line and no other."""
    out = []
    for i, line in enumerate(lines):
        q = json.loads(line)["question"][:48]
        if q.isascii() and not set(q) & set(';"\\') and sum(q in other.decode() for other in lines) == 1:
            out.append((i, q))
        if len(out) == count:
            return out
    raise AssertionError("not enough distinct questions")


@pytest.fixture(scope="module")
def injection_input(tmp_path_factory, shared_data, tokenizer_dir):
    """600 GSM8K rows in 3 files, a fault per (exception type, stage) on its own row, and a clean run's table."""
    root = tmp_path_factory.mktemp("inject")
    lines = gsm8k(shared_data, 600)
    for f in range(3):
        (root / "in").mkdir(exist_ok=True)
        (root / "in" / f"part-{f}.jsonl").write_bytes(b"".join(lines[f * 200:(f + 1) * 200]))
    cases = [(exc.__name__, stage) for exc in EXCEPTIONS for stage in STAGES]
    targets = {case: target for case, target in zip(cases, _needles(lines, len(cases)))}
    spec = ";".join(f"{stage}:{name}:{needle}" for (name, stage), (_, needle) in targets.items())
    clean = config(tokenizer_dir, root / "in", root / "clean.lance", chunk_bytes=64 << 10)
    run_pretokenize(clean)
    return root, spec, targets, lance.dataset(clean.output).to_table()


@pytest.mark.parametrize("executor", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_every_builtin_exception_at_every_text_stage_rejects_only_its_row(executor, injection_input, tokenizer_dir, monkeypatch, request):
    if executor == "ray":
        request.getfixturevalue("ray_local")
    root, spec, targets, clean = injection_input
    monkeypatch.setenv(faults.ENV, spec)
    cfg = config(tokenizer_dir, root / "in", root / f"{executor}.lance", chunk_bytes=64 << 10, executor=executor, max_reject_fraction=0.9)
    s = run_pretokenize(cfg)
    assert (s["rows_read"], s["rows_rejected"], s["rows_written"]) == (600, len(targets), 600 - len(targets))
    got = {(r["source"].rsplit("/", 1)[1], r["position"]): r["reason"]
           for r in lance.dataset(cfg.rejects_uri).to_table().to_pylist()}
    for (name, stage), (i, _) in targets.items():
        reason = got.pop((f"part-{i // 200}.jsonl", f"line {i % 200 + 1}"))
        named = "invalid UTF-8" if (name, stage) == ("UnicodeDecodeError", "parse") else name
        assert named in reason and (stage in reason or stage == "parse"), (name, stage, reason)
    assert not got
    lost = {i for i, _ in targets.values()}
    keep = [i for i in range(600) if i not in lost]
    assert lance.dataset(cfg.output).to_table().equals(clean.take(keep))


def test_the_fault_spec_rejects_typos():
    with pytest.raises(ValueError, match="neither 'kill' nor a built-in exception"):
        faults.parse("parse:TypeErorr:x")
    faults.arm(None)
    faults.maybe_raise("parse", "anything")  # disarmed: nothing happens


# --- the fuzzer ----------------------------------------------------------------------------------

def _hostile(rng: random.Random) -> tuple[bytes, str | None]:
    """A hostile line and the question the table will hold for it (None: it is rejected)."""
    kind = rng.choice(["deep", "big", "surrogate", "nan", "dup", "nul", "raw_nul", "bom", "huge", "not_object", "truncated"])
    q = f"hostile {kind} {rng.randrange(10**9)}"
    head = json.dumps({"question": q, "answer": "x"})[:-1].encode()
    if kind == "deep":
        return head + b', "deep": ' + b"[" * rng.randint(1000, 20000) + b"]" * 3 + b"}", None
    if kind == "big":
        return head + b', "n": -' + b"7" * rng.randint(4301, 20000) + b"}", q
    if kind == "surrogate":
        return json.dumps({"question": q + " \ud83d", "answer": "x"}).encode(), None
    if kind == "nan":
        return head + b', "n": ' + rng.choice([b"NaN", b"Infinity", b"-Infinity"]) + b"}", q
    if kind == "dup":
        return head + b', "question": ' + json.dumps(q + " again").encode() + b"}", q + " again"
    if kind == "nul":
        return json.dumps({"question": q + " \x00", "answer": "x"}).encode(), q + " \x00"
    if kind == "raw_nul":
        return head[:-1] + b'\x00"}', None
    if kind == "bom":
        return b"\xef\xbb\xbf" + head + b"}", q
    if kind == "huge":
        return json.dumps({"question": q, "answer": "y " * rng.randint(1 << 17, 1 << 19)}).encode(), q
    if kind == "not_object":
        return rng.choice([b"[1, 2]", b"null", b"1e999", b'"text"']), None
    return head[: rng.randint(1, len(head) - 1)], None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fuzzed_hostile_lines_among_real_rows(seed, tokenizer_dir, shared_data, tmp_path):
    rng = random.Random(seed)
    good = gsm8k(shared_data, 150, start=1000 * seed)
    expected, files = [], []
    for f in range(3):
        lines: list[bytes] = []
        for line in good[f * 50:(f + 1) * 50]:
            if rng.random() < 0.15:
                bad, question = _hostile(rng)
                lines.append(bad + b"\n")
                expected.append(question)
            lines.append(line)
            expected.append(json.loads(line)["question"])
        data = b"".join(lines)
        name = f"part-{f}.jsonl" + (".gz" if f == 2 else "")
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / name).write_bytes(gzip.compress(data, mtime=0) if f == 2 else data)
        files.append(name)
    written = [q for q in expected if q is not None]
    cfg = config(tokenizer_dir, tmp_path / "in", tmp_path / "o.lance", chunk_bytes=16 << 10, passthrough=["question"],
                 max_reject_fraction=1.0)
    s = run_pretokenize(cfg)
    assert s["rows_read"] == len(expected) == s["rows_written"] + s["rows_rejected"]
    assert s["rows_rejected"] == len(expected) - len(written) == lance.dataset(cfg.rejects_uri).count_rows()
    assert lance.dataset(cfg.output).to_table(columns=["question"])["question"].to_pylist() == written


# --- rows that cannot train (issue 31 #10) -------------------------------------------------------------

@pytest.mark.parametrize("pack", [None, {"seq_len": 256}], ids=["rows", "packed"])
@pytest.mark.parametrize("overlong", ["truncate", "split"])
def test_a_row_or_piece_without_a_trained_token_is_never_written(overlong, pack, tokenizer_dir, shared_data, tmp_path):
    """A prompt longer than max_length: truncate cut every trained token (the row trained nothing, without a word);
    split made pieces of prompt only. Now the row is a reject naming it, and such pieces are left out and counted."""
    good = gsm8k(shared_data, 20)
    long_prompt = json.dumps({"question": "Count the words. " + "word " * 400, "answer": "400"}).encode() + b"\n"
    (tmp_path / "a.jsonl").write_bytes(b"".join(good[:10]) + long_prompt + b"".join(good[10:]))
    cfg = config(tokenizer_dir, tmp_path / "a.jsonl", tmp_path / "o.lance", max_length=128, overlong=overlong,
                 **({"pack": pack} if pack else {}))
    s = run_pretokenize(cfg)
    t = lance.dataset(cfg.output).to_table(columns=["loss_mask"])
    if not pack:
        assert all(sum(m) > 0 for m in t["loss_mask"].to_pylist())  # every row trains
    assert s["rows_read"] == 21 == s["rows_accepted"] + s["rows_rejected"]
    if overlong == "truncate":
        assert s["rows_rejected"] == 1
        (reason,) = rejects_by_line(cfg).values()
        assert list(rejects_by_line(cfg)) == [11] and "no trained token in its first 128 tokens" in reason
    else:
        assert s["rows_rejected"] == 0 and s["pieces_untrained"] == 3  # 400 words of prompt: 4 pieces, the last trains
        assert f"split: 3 piece(s) of prompt only ({s['pieces_untrained_tokens']} tokens, none trained) left out" in format_summary(s)
    meta_counts = read_table_metadata(lance.dataset(cfg.output), "t").to_json()["sources"][0]["counts"]
    assert meta_counts.get("pieces_untrained", 0) == s.get("pieces_untrained", 0)
