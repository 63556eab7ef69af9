import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prep.errors import PrepError
from prep.prepare.text.readers import read_chunk
from prep.prepare.text.sources import list_sources, plan_chunks


def lines_file(tmp_path, n=200):
    p = tmp_path / "rows.jsonl"
    rows = [{"question": f"q{i} " + "x" * (i % 37), "answer": f"a{i}"} for i in range(n)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p, rows


@pytest.mark.parametrize("chunk_bytes", [4096, 5000, 7777, 1 << 20])
def test_every_line_lands_in_exactly_one_chunk(tmp_path, chunk_bytes):
    path, rows = lines_file(tmp_path, 500)
    sources = list_sources([str(path)])
    chunks = plan_chunks(sources, chunk_bytes)
    got, positions = [], []
    for c in chunks:
        rec = read_chunk(c)
        got += rec.rows
        positions += rec.positions.tolist()
    assert got == rows
    data = path.read_bytes()
    assert all(p == 0 or data[p - 1 : p] == b"\n" for p in positions)
    assert len(set(positions)) == len(rows)


def test_bad_lines_become_rejects_with_exact_line_numbers_in_later_chunks(tmp_path):
    good = [json.dumps({"question": "q" * 50, "answer": "a"}) for _ in range(300)]
    good[250] = '{"question": "broken'
    good[260] = "[1, 2]"
    p = tmp_path / "bad.jsonl"
    p.write_bytes(("\n".join(good[:270]) + "\n").encode() + b'{"question": "\xff\xfe"}\n' + ("\n".join(good[270:]) + "\n").encode())
    chunks = plan_chunks(list_sources([str(p)]), 4096)
    assert len(chunks) > 3
    rejects = [r for c in chunks for r in read_chunk(c).rejects]
    by_line = {r.position: r.reason for r in rejects}
    assert by_line.keys() == {"line 251", "line 261", "line 271"}
    assert "malformed JSON" in by_line["line 251"]
    assert "expected a JSON object" in by_line["line 261"]
    assert "invalid UTF-8" in by_line["line 271"]
    assert sum(len(read_chunk(c).rows) for c in chunks) == 298


def test_empty_file_is_a_file_level_reject(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (rec,) = [read_chunk(c) for c in plan_chunks(list_sources([str(tmp_path)]), 1 << 20)]
    assert rec.rows == [] and rec.rejects[0].position == "file" and rec.rejects[0].reason == "empty file"


def test_files_without_rows_are_empty_files_like_a_zero_byte_file(tmp_path):
    """An empty .gz, a file of blank lines, an empty Parquet file, an empty JSON array, a CSV header (issue 21, #16)."""
    import gzip

    (tmp_path / "zero.jsonl").write_bytes(b"")
    (tmp_path / "empty.jsonl.gz").write_bytes(gzip.compress(b"", mtime=0))
    (tmp_path / "blank.jsonl").write_bytes(b"\n  \n\t\n")
    (tmp_path / "blank.txt").write_bytes(b"\n\n \n")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "header.csv").write_text("question,answer\n")
    (tmp_path / "rows.jsonl").write_text('{"text": "a"}\n\n')
    (tmp_path / "zero.parquet").write_bytes(b"")  # was an error (no footer) where a 0-byte .jsonl is a reject
    sources = list_sources([str(tmp_path)])
    chunks = plan_chunks(sources, 1 << 20)
    assert len(chunks) == len(sources) == 9
    files = {c.source.key: [(r.position, r.reason) for r in read_chunk(c).rejects] for c in chunks}
    for name, rejects in files.items():
        if name == "rows.jsonl":
            assert rejects == []
        else:
            assert [p for p, _ in rejects] == ["file"] and rejects[0][1].startswith("empty file"), (name, rejects)
    assert files["blank.jsonl"][0][1] == "empty file (3 blank lines, no rows)"


def test_a_file_that_changes_after_listing_is_an_error_naming_it(tmp_path):
    """Issue 21, #15: the provenance recorded at planning is checked against the file after reading it."""
    import os

    path, _ = lines_file(tmp_path, 200)
    chunks = plan_chunks(list_sources([str(path)]), 4096)
    assert len(chunks) > 1
    read_chunk(chunks[0])
    with open(path, "ab") as f:  # appended to while the job reads it
        f.write(b'{"question": "late", "answer": "row"}\n')
    with pytest.raises(PrepError, match=r"rows\.jsonl changed while the job read it \(size .* bytes\)"):
        read_chunk(chunks[1])
    chunks = plan_chunks(list_sources([str(path)]), 1 << 20)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same size, rewritten in place
    with pytest.raises(PrepError, match="changed while the job read it .mtime"):
        read_chunk(chunks[0])


@pytest.mark.s3
def test_an_object_replaced_after_listing_is_an_error_naming_it(s3_env, s3_bucket):
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    s3.put_object(Bucket=s3_bucket, Key="in/a.jsonl", Body=b'{"text": "one"}\n')
    chunks = plan_chunks(list_sources([f"s3://{s3_bucket}/in/"]), 1 << 20)
    assert read_chunk(chunks[0]).rows == [{"text": "one"}]
    s3.put_object(Bucket=s3_bucket, Key="in/a.jsonl", Body=b'{"text": "two"}\n')  # same size, new content
    with pytest.raises(PrepError, match=r"a\.jsonl changed while the job read it \(ETag"):
        read_chunk(chunks[0])


def test_missing_path_and_directory_without_matches_are_clear_errors(tmp_path):
    with pytest.raises(PrepError, match="input not found: .*nothing.jsonl"):
        list_sources([str(tmp_path / "nothing.jsonl")])
    (tmp_path / "notes.bin").write_bytes(b"x")
    with pytest.raises(PrepError, match="holds no"):
        list_sources([str(tmp_path)])


def test_directory_and_glob_listing_is_sorted_with_relative_keys(tmp_path):
    (tmp_path / "b").mkdir()
    for name in ["b/2.jsonl", "a.jsonl", "b/1.jsonl"]:
        (tmp_path / name).write_text('{"text": "x"}\n')
    keys = [s.key for s in list_sources([str(tmp_path)])]
    assert keys == ["a.jsonl", "b/1.jsonl", "b/2.jsonl"]
    assert [s.key for s in list_sources([str(tmp_path / "b" / "*.jsonl")])] == ["1.jsonl", "2.jsonl"]


def test_json_array_csv_parquet_and_text_are_read(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([{"text": "one"}, 5, {"text": "two"}]))
    (tmp_path / "b.csv").write_text('text,n\n"hello, world",1\nbad,row,extra\nok,2\n')
    pq.write_table(pa.table({"text": ["p0", "p1", "p2"]}), tmp_path / "c.parquet", row_group_size=1)
    (tmp_path / "d.txt").write_text("para one\nstill one\n\n\npara two\n")
    out = {}
    for c in plan_chunks(list_sources([str(tmp_path)]), 1 << 20):
        rec = read_chunk(c)
        out.setdefault(c.source.key, ([], []))
        out[c.source.key][0].extend(rec.rows)
        out[c.source.key][1].extend(rec.rejects)
    assert out["a.json"][0] == [{"text": "one"}, {"text": "two"}]
    assert out["a.json"][1][0].position == "element 1"
    assert [r["text"] for r in out["b.csv"][0]] == ["hello, world", "ok"]
    assert "expected 2 columns, got 3" in out["b.csv"][1][0].reason
    assert [r["text"] for r in out["c.parquet"][0]] == ["p0", "p1", "p2"]
    assert out["d.txt"][0] == ["para one\nstill one", "para two\n"]


def test_parquet_row_groups_are_chunked_with_global_row_positions(tmp_path):
    pq.write_table(pa.table({"text": [f"r{i}" * 100 for i in range(40)]}), tmp_path / "big.parquet", row_group_size=5)
    chunks = plan_chunks(list_sources([str(tmp_path)]), 4096)
    assert len(chunks) > 1
    positions = np.concatenate([read_chunk(c).positions for c in chunks])
    assert positions.tolist() == list(range(40))


@pytest.mark.parametrize("unit", ["line", "paragraph", "file"])
def test_a_byte_order_mark_is_not_part_of_the_first_text_row(unit, tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfFirst words.\r\nmore\n")
    (src,) = list_sources([str(path)], "text")
    rows = read_chunk(plan_chunks([src], 1 << 20, unit)[0], None, unit).rows
    assert rows[0].startswith("First words.")


# A text whose every line ending is rewritten below: blank lines, a whitespace-only line, a last line with its ending.
LF_TEXT = "First para,\nsecond line.\n\n\nSecond para.\n \t\nThird para\nends here.\n"


@pytest.mark.parametrize("unit", ["line", "paragraph", "file"])
@pytest.mark.parametrize("ending", ["\r\n", "\r", "mixed"])
def test_crlf_cr_and_mixed_line_endings_give_the_rows_of_the_lf_text(unit, ending, tmp_path):
    """Issue 31 #10: CRLF paragraphs ended in '\\r' (every document '...\\r</s>'). Line endings are read as
    Python's text mode reads them (\\r\\n, \\r, \\n), and a document's text holds '\\n' whatever the file used."""
    lines = LF_TEXT.split("\n")
    if ending == "mixed":
        body = "".join(line + ("\r\n", "\n", "\r")[i % 3] for i, line in enumerate(lines[:-1]))  # no \r meets a \n
    else:
        body = LF_TEXT.replace("\n", ending)
    (tmp_path / "lf.txt").write_text(LF_TEXT, newline="")
    (tmp_path / "other.txt").write_text(body, newline="")
    rows = {}
    for name in ("lf.txt", "other.txt"):
        (src,) = list_sources([str(tmp_path / name)], "text")
        rows[name] = [r for c in plan_chunks([src], 16, unit) for r in read_chunk(c, None, unit).rows]
    assert rows["other.txt"] == rows["lf.txt"]
    assert not any("\r" in r for r in rows["other.txt"])
    expected = {"line": ["First para,", "second line.", "Second para.", "Third para", "ends here."],
                "paragraph": ["First para,\nsecond line.", "Second para.", "Third para\nends here.\n"],
                "file": [LF_TEXT]}[unit]
    assert rows["lf.txt"] == expected  # LF text reads as it always did


def test_text_line_rejects_count_cr_endings_in_their_line_number(tmp_path):
    lines = [f"line {i} " + "x" * 30 for i in range(1, 41)]
    data = b"".join(line.encode() + (b"\r", b"\r\n", b"\n")[i % 3] for i, line in enumerate(lines))
    data = data.replace(b"line 33 ", b"line 33 \xff")
    (tmp_path / "t.txt").write_bytes(data)
    (src,) = list_sources([str(tmp_path / "t.txt")])
    chunks = plan_chunks([src], 256, "line")
    assert len(chunks) > 3
    recs = [read_chunk(c, None, "line") for c in chunks]
    assert [r.position for rec in recs for r in rec.rejects] == ["line 33"]
    assert [row.split()[1] for rec in recs for row in rec.rows] == [str(i) for i in range(1, 41) if i != 33]


@pytest.mark.parametrize("pack", [None, {"seq_len": 64}])
def test_a_crlf_copy_of_shakespeare_gives_the_tokens_of_the_lf_file(pack, tokenizer_dir, shared_data, tmp_path):
    """Pretrain and packed tables of paragraphs: no document ends in '\\r</s>' (issue 31 #10)."""
    import lance

    from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize

    text = (shared_data / "tinyshakespeare" / "input.txt").read_text()[:20_000]
    (tmp_path / "lf").mkdir()
    (tmp_path / "crlf").mkdir()
    (tmp_path / "lf" / "s.txt").write_text(text, newline="")
    (tmp_path / "crlf" / "s.txt").write_text(text.replace("\n", "\r\n"), newline="")
    tables = {}
    for name in ("lf", "crlf"):
        cfg = PretokenizeConfig.model_validate(dict(input=str(tmp_path / name), output=str(tmp_path / f"{name}.lance"),
                                                    tokenizer=tokenizer_dir, format="pretrain", executor="local",
                                                    chunk_bytes=4096, **({"pack": pack} if pack else {})))
        run_pretokenize(cfg)
        tables[name] = lance.dataset(cfg.output).to_table(columns=["input_ids"]).to_pylist()  # ids differ: positions are byte offsets
    assert tables["crlf"] == tables["lf"] and len(tables["lf"]) > 10


def test_csv_positions_name_the_record_for_rejects_and_for_the_rows_after_them(tmp_path):
    """Issue 31 #10: CSV rejects said 'line ?', and rows after a reject were labelled one record too early.
    A position is 'data row N': the N-th record after the header (quoted newlines and blank lines do not count)."""
    (tmp_path / "a.csv").write_bytes(b'text,n\n"two\nlines",1\n\nbad,row,extra\nok,2\n"multi\nline",3,4\nlast,5\n')
    (src,) = list_sources([str(tmp_path / "a.csv")])
    rec = read_chunk(plan_chunks([src], 1 << 20)[0])
    assert [(r.position, r.raw) for r in rec.rejects] == [("data row 2", "bad,row,extra"), ("data row 4", '"multi\nline",3,4')]
    assert [(row["text"], rec.position_label(i)) for i, row in enumerate(rec.rows)] == [
        ("two\nlines", "data row 1"), ("ok", "data row 3"), ("last", "data row 5")]


def test_symlinks_in_an_input_folder_are_read_or_rejected_never_skipped(tmp_path):
    """Issue 31 #10: a dangling symlink was skipped without a word; so was a symlink to a good file."""
    (tmp_path / "in").mkdir()
    (tmp_path / "elsewhere.jsonl").write_text('{"text": "linked"}\n')
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "a"}\n')
    (tmp_path / "in" / "b.jsonl").symlink_to(tmp_path / "gone.jsonl")
    (tmp_path / "in" / "c.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    (tmp_path / "in" / "d.parquet").symlink_to(tmp_path / "gone.parquet")  # no footer to plan from: a reject too
    sources = list_sources([str(tmp_path / "in")])
    assert [s.key for s in sources] == ["a.jsonl", "b.jsonl", "c.jsonl", "d.parquet"]
    recs = {c.source.key: read_chunk(c) for c in plan_chunks(sources, 1 << 20)}
    assert recs["c.jsonl"].rows == [{"text": "linked"}] and recs["a.jsonl"].rows == [{"text": "a"}]
    for name in ("b.jsonl", "d.parquet"):
        (reject,) = recs[name].rejects
        assert (reject.position, reject.reason) == ("file", f"dangling symlink to {tmp_path / ('gone' + name[1:])}: its target does not exist")


def test_a_symlink_to_a_file_the_input_lists_is_read_once(tmp_path):
    import logging

    (tmp_path / "a.jsonl").write_text('{"text": "a"}\n')
    (tmp_path / "latest.jsonl").symlink_to(tmp_path / "a.jsonl")
    (tmp_path / "z1.jsonl").symlink_to(tmp_path / "gone.jsonl")
    (tmp_path / "z2.jsonl").symlink_to(tmp_path / "gone.jsonl")
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("prep.prepare.listing").addHandler(handler)
    try:
        assert [s.key for s in list_sources([str(tmp_path)])] == ["a.jsonl", "z1.jsonl"]
    finally:
        logging.getLogger("prep.prepare.listing").removeHandler(handler)
    assert said == [f"{tmp_path / 'latest.jsonl'} is a symlink to the file {tmp_path / 'a.jsonl'} lists already; it is read once",
                    f"{tmp_path / 'z2.jsonl'} is a symlink to the file {tmp_path / 'z1.jsonl'} lists already; it is read once"]


def test_a_symlink_to_a_folder_inside_an_input_is_an_error_naming_it(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "a"}\n')
    (tmp_path / "in" / "more").symlink_to(tmp_path / "other")
    with pytest.raises(PrepError, match=r"in/more is a symlink to a folder .* give .*other as an input"):
        list_sources([str(tmp_path / "in")])
