"""The contract every prepare job keeps, checked on real Ray runs.

- Rows in = rows written + rows rejected, where the test counts the rows it wrote
  into the inputs itself and reads the other two sides from the committed tables.
- The same output whatever the chunking (one task or many).
- A job that dies leaves nothing that looks complete, and a rerun succeeds.
- A seeded fuzzer (hypothesis, derandomized) throws real-world mess at the text job:
  no input makes it raise, and the counts always reconcile.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import lance
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prep.io import lance_tables
from prep.errors import PrepError, TooManyRejects
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.job import run_decode_images
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize
from test_images import HYMENOPTERA

pytestmark = pytest.mark.usefixtures("ray_local")


def text_config(tokenizer_dir: str, input: Path, output: Path, **kw) -> PretokenizeConfig:
    return PretokenizeConfig.model_validate(
        dict(input=str(input), output=str(output), tokenizer=tokenizer_dir, format="sft", sft={"layout": "qa"}, **kw))


def committed(output: str, rejects: str) -> tuple[int, int, int]:
    """(table rows, row-level rejects, file-level rejects), read from the committed tables."""
    rej = lance.dataset(rejects)
    rows = rej.count_rows(filter="position != 'file'")
    return lance.dataset(output).count_rows(), rows, rej.count_rows() - rows


# --- the text fuzzer -------------------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
LINES = {
    "valid": _TEXT.flatmap(lambda q: _TEXT.map(lambda a: json.dumps({"question": q, "answer": a}, ensure_ascii=False).encode())),
    "malformed": st.just(b'{"question": "unterminated", "answer": '),
    "wrong_type": st.just(b'{"question": 5, "answer": ["a"]}'),
    "missing": st.just(b'{"question": "no answer"}'),
    "null": st.just(b'{"question": null, "answer": "x"}'),
    "empty": st.just(b'{"question": "", "answer": ""}'),
    "not_object": st.sampled_from([b"[1, 2]", b'"a string"', b"42"]),
    "bad_utf8": st.just(b'{"question": "\xff\xfe bytes", "answer": "a"}'),
    "huge": st.just(json.dumps({"question": "word " * 20_000, "answer": "a"}).encode()),
    "blank": st.sampled_from([b"", b"   ", b"\t"]),
}
FILE = st.fixed_dictionaries({
    "lines": st.lists(st.sampled_from(sorted(LINES)).flatmap(lambda k: LINES[k].map(lambda b: (k, b))), max_size=12),
    "bom": st.booleans(),
    "crlf": st.booleans(),
    "gzip": st.booleans(),
})


def file_bytes(spec: dict) -> bytes:
    sep = b"\r\n" if spec["crlf"] else b"\n"
    data = (b"\xef\xbb\xbf" if spec["bom"] else b"") + b"".join(line + sep for _, line in spec["lines"])
    return gzip.compress(data, mtime=0) if spec["gzip"] else data


def rows_in(data: bytes) -> int:
    """Rows as a person counts them in a line-oriented file: non-blank lines."""
    return sum(1 for line in data.split(b"\n") if line.strip())


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(FILE, min_size=1, max_size=4))
def test_fuzzed_text_inputs_never_raise_and_always_reconcile(files, tokenizer_dir, tmp_path):
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    expected_rows = valid = 0
    for i, spec in enumerate(files):
        data = file_bytes(spec)
        (work / "in").mkdir(exist_ok=True)
        (work / "in" / f"part-{i}.jsonl").write_bytes(data)  # gzip'd or not: the name says .jsonl
        expected_rows += rows_in(data)
        if not spec["gzip"]:
            valid += sum(kind == "valid" for kind, _ in spec["lines"])
    cfg = text_config(tokenizer_dir, work / "in", work / "out.lance", max_length=4096, max_reject_fraction=1.0)
    if valid == 0:  # nothing usable: the job fails (exit 1) and keeps its rejects to look at
        with pytest.raises(TooManyRejects):
            run_pretokenize(cfg)
        assert not lance_tables.table_exists(cfg.output)
        assert lance.dataset(cfg.rejects_uri).count_rows(filter="position != 'file'") == expected_rows
        return
    s = run_pretokenize(cfg)
    table_rows, rejected_rows, rejected_files = committed(cfg.output, cfg.rejects_uri)
    assert s["rows_read"] == expected_rows
    assert table_rows + rejected_rows == expected_rows
    assert table_rows == valid  # every well-formed row of a plain file is kept, nothing else is
    assert (s["rows_written"], s["rows_rejected"], s["files_rejected"]) == (table_rows, rejected_rows, rejected_files)
    reasons = lance.dataset(cfg.rejects_uri).to_table(columns=["position", "reason"]).to_pylist()
    assert all(r["reason"] and r["position"] for r in reasons)


# --- both jobs --------------------------------------------------------------------------------

def _text_inputs(root: Path, shared_data: Path) -> Path:
    src = root / "text"
    src.mkdir()
    with open(shared_data / "gsm8k" / "train.jsonl", "rb") as f:
        lines = [next(f) for _ in range(300)]
    (src / "a.jsonl").write_bytes(b"".join(lines[:200]) + b'{"question": "broken\n')
    (src / "b.jsonl").write_bytes(b"".join(lines[200:]) + b'{"question": 1, "answer": 2}\n')
    (src / "empty.jsonl").write_bytes(b"")
    return src


def _image_inputs(root: Path) -> Path:
    src = root / "images"
    for cls in ("ants", "bees"):
        (src / cls).mkdir(parents=True)
        for photo in sorted((HYMENOPTERA / cls).iterdir())[:12]:
            (src / cls / photo.name).write_bytes(photo.read_bytes())
    (src / "bees" / "not-an-image.jpg").write_bytes(b"plain text, not a JPEG")
    return src


JOBS = {
    "text": (lambda root, data: _text_inputs(root, data),
             lambda src, tok, out, **kw: text_config(tok, src, out, **kw),
             run_pretokenize, {"one": dict(chunk_bytes=1 << 24), "many": dict(chunk_bytes=4096)}, (300 + 2, 300, 2, 1)),
    "images": (lambda root, data: _image_inputs(root),
               lambda src, tok, out, **kw: ImagesConfig.model_validate(dict(input=str(src), output=str(out), size=32, **kw)),
               run_decode_images, {"one": dict(images_per_chunk=1000), "many": dict(images_per_chunk=5)}, (25, 24, 1, 0)),
}


@pytest.mark.parametrize("kind", sorted(JOBS))
def test_prepare_job_contract_counts_chunking_and_rerun(kind, tokenizer_dir, shared_data, tmp_path):
    make_inputs, make_config, run, chunkings, (rows, written, rejected, rejected_files) = JOBS[kind]
    src, tables = make_inputs(tmp_path, shared_data), {}
    for name, kw in chunkings.items():
        cfg = make_config(src, tokenizer_dir, tmp_path / f"{name}.lance", **kw)
        s = run(cfg)
        assert (s["rows_read"], s["rows_written"], s["rows_rejected"], s["files_rejected"]) == (rows, written, rejected, rejected_files)
        assert committed(cfg.output, cfg.rejects_uri) == (written, rejected, rejected_files)
        tables[name] = (s["chunks"], lance.dataset(cfg.output).to_table(), lance.dataset(cfg.rejects_uri).to_table(columns=["reason"]))
    (n_one, one, rej_one), (n_many, many, rej_many) = tables["one"], tables["many"]
    assert n_one < n_many
    assert one.equals(many) and rej_one.equals(rej_many)


@pytest.mark.parametrize("executor", ["ray", "local"])
def test_a_dead_job_leaves_nothing_that_looks_complete_and_the_rerun_succeeds(executor, tokenizer_dir, shared_data, tmp_path):
    src = _text_inputs(tmp_path, shared_data)
    (src / "z.json").write_text('[{"question": "an array cut short"')  # fails its chunk once the job runs
    cfg = text_config(tokenizer_dir, src, tmp_path / "out.lance", chunk_bytes=4096, executor=executor)
    with pytest.raises(PrepError, match=r"z\.json.*malformed JSON"):
        run_pretokenize(cfg)
    for uri in (cfg.output, cfg.rejects_uri):
        assert not lance_tables.table_exists(uri)
    (src / "z.json").unlink()
    assert run_pretokenize(cfg)["rows_written"] == 300


@pytest.mark.parametrize("lie", ["rows_accepted", "rows_rejected", "rows_written"])
def test_row_accounting_catches_a_worker_whose_counts_disagree_with_its_output(lie, tmp_path):
    """Each side is counted where it happens, so one wrong count fails the job before the table commit."""
    import pyarrow as pa

    from prep.contracts.counts import Counts
    from prep.prepare.driver import commit_and_reconcile
    from prep.prepare.chunk_runner import ChunkResult
    from prep.prepare.rejects import Reject, rejects_table

    out, rej = str(tmp_path / "t.lance"), str(tmp_path / "t.rejects.lance")
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    frags = lance_tables.write_fragments(table, out)
    rej_frags = lance_tables.write_fragments(rejects_table([Reject("f", "line 4", "bad")]), rej)
    raw = {"rows_read": 4, "rows_accepted": 3, "rows_rejected": 1, "rows_written": 3, "files_rejected": 0}
    raw[lie] += 1
    counts = Counts.from_json(raw, "the test's worker")
    with pytest.raises(PrepError, match="row accounting failed"):
        commit_and_reconcile([ChunkResult(0, frags, rej_frags, counts, 0.0)], counts, schema=table.schema, metadata={},
                             output=out, rejects=rej, s3=None, max_reject_fraction=1.0)
    assert not lance_tables.table_exists(out)


@pytest.mark.parametrize("kind", sorted(JOBS))
def test_the_local_executor_writes_exactly_what_ray_writes(kind, tokenizer_dir, shared_data, tmp_path):
    make_inputs, make_config, run, chunkings, counts = JOBS[kind]
    src, tables = make_inputs(tmp_path, shared_data), {}
    for executor in ("ray", "local"):
        cfg = make_config(src, tokenizer_dir, tmp_path / f"{executor}.lance", executor=executor, **chunkings["many"])
        s = run(cfg)
        assert s["executor"] == executor
        tables[executor] = (lance.dataset(cfg.output).to_table(), lance.dataset(cfg.rejects_uri).to_table(columns=["reason"]))
    assert tables["ray"][0].equals(tables["local"][0]) and tables["ray"][1].equals(tables["local"][1])


@pytest.mark.slow
def test_the_local_executor_isolates_an_item_that_crashes_its_worker(monkeypatch, tmp_path):
    from prep.prepare.isolation import FAULTS_ENV

    src = _image_inputs(tmp_path)
    victim = sorted((src / "ants").iterdir())[3]
    monkeypatch.setenv(FAULTS_ENV, f"segv:{victim.name}")
    cfg = ImagesConfig.model_validate(dict(input=str(src), output=str(tmp_path / "out.lance"), size=32, executor="local"))
    s = run_decode_images(cfg)
    rejected = {r["source"]: r["reason"] for r in lance.dataset(cfg.rejects_uri).to_table().to_pylist()}
    assert set(rejected) == {str(victim), str(src / "bees" / "not-an-image.jpg")}, rejected
    assert "crashed with signal 11 (SIGSEGV)" in rejected[str(victim)]
    assert (s["rows_read"], s["rows_written"], s["rows_rejected"]) == (25, 23, 2)
    written = lance.dataset(cfg.output).to_table(columns=["source"]).column("source").to_pylist()
    assert sorted(written) == sorted(str(p) for p in src.rglob("*.jpg") if str(p) not in rejected)


def test_an_image_chunk_is_written_as_a_stream_of_small_batches(tmp_path):
    """A task holds one batch of pixels at a time, never the whole chunk."""
    from prep.io import storage
    from prep.prepare.images.sources import plan
    from prep.prepare.images.worker import _BATCH_ROWS, ImageChunkWorker

    cfg = ImagesConfig.model_validate(dict(input=str(HYMENOPTERA), output=str(tmp_path / "o.lance"), size=16, images_per_chunk=1000))
    planned = plan(cfg, storage.S3Options())
    out = ImageChunkWorker(cfg, planned.labels, storage.S3Options())(planned.chunks[0])
    assert out.counts["rows_read"] == 0  # nothing is decoded before the writer reads the stream
    sizes = [batch.num_rows for batch in out.table]
    assert len(sizes) > 1 and max(sizes) == _BATCH_ROWS
    assert sum(sizes) == out.counts["rows_written"] == out.counts["rows_accepted"] == out.counts["rows_read"] - out.counts["rows_rejected"]
