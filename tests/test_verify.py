"""prep verify: the content checksum and the checks against the source."""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil

import lance
import pyarrow as pa
import pytest

import tables
from prep.cli import main as cli_main
from prep.errors import PrepError
from prep.contracts.manifest import split_path
from prep.materialize import materialize_shuffle
from prep.io.checksum import Checksum, table_checksum
from prep.materialize.verify import verify


def _mixed_table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([1, 2, 3, 4, 5], pa.uint64()),
            "tokens": pa.array([[1, 2], None, [], [3], [4, 5, 6]], pa.list_(pa.int32())),
            "pixels": pa.array([[1, 2], [3, 4], None, [5, 6], [7, 8]], pa.list_(pa.uint8(), 2)),
            "name": ["a", None, "ccc", "", "e"],
            "blob": pa.array([b"x", b"yy", None, b"", b"z"], pa.large_binary()),
            "score": pa.array([0.5, None, 1.5, 2.5, 3.5], pa.float32()),
            "flag": [True, False, None, True, False],
            "meta": pa.array([{"k": 1}, {"k": 2}, None, {"k": 4}, {"k": 5}]),
        }
    )


def test_checksum_does_not_depend_on_batch_boundaries():
    t = _mixed_table()
    whole = table_checksum([t])
    for cut in ([1, 4], [2, 3], [4, 1], [1, 1, 1, 1, 1]):
        pieces, at = [], 0
        for n in cut:
            pieces.append(t.slice(at, n))
            at += n
        assert table_checksum(pieces) == whole
    assert table_checksum(pa.Table.from_batches(t.to_batches(max_chunksize=2)).to_batches()) == whole
    assert whole[0] == 5 and len(whole[1]) == 64


@pytest.mark.parametrize("column,row,value", [("tokens", 0, [1, 3]), ("name", 3, "x"), ("score", 1, 0.0), ("flag", 2, False)])
def test_checksum_changes_when_one_value_changes(column, row, value):
    t = _mixed_table()
    values = t.column(column).to_pylist()
    values[row] = value
    changed = t.set_column(t.schema.get_field_index(column), column, pa.array(values, t.schema.field(column).type))
    assert table_checksum([changed]) != table_checksum([t])


def test_checksum_sees_row_order():
    t = _mixed_table()
    assert table_checksum([t.take([1, 0, 2, 3, 4])]) != table_checksum([t])
    c = Checksum()
    c.update(t)
    assert c.num_rows == 5


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("verify")
    src = tables.synthetic_table(str(root / "t.lance"), num_rows=800, max_len=40)
    out = str(root / "out")
    materialize_shuffle(table=src, output=out, epochs=2, splits=4, seed=5, executor="local")
    return out


@pytest.fixture
def materialized(pristine, tmp_path) -> str:
    """A fresh copy of one materialized output (tests damage it)."""
    return shutil.copytree(pristine, str(tmp_path / "out"))


def test_verify_passes_and_the_cli_exits_0(materialized, capsys):
    report = verify(materialized)
    assert report.ok and report.epochs == 2 and report.splits == 4 and report.rows == 1600
    assert cli_main(["verify", materialized]) == 0
    out = capsys.readouterr().out
    assert ": OK" in out and "2 epochs x 4 splits, 1,600 rows checked" in out


def test_verify_fails_when_two_splits_are_swapped(materialized):
    a, b = (os.path.join(materialized, split_path(1, s)) for s in (0, 1))
    shutil.move(a, a + ".tmp")
    shutil.move(b, a)
    shutil.move(a + ".tmp", b)
    report = verify(materialized)
    assert not report.ok
    text = "\n".join(report.problems)
    assert "epoch 1 split 0: ids differ from the plan" in text and "checksum" in text


def test_verify_fails_when_a_split_is_missing(materialized):
    shutil.rmtree(os.path.join(materialized, split_path(0, 3)))
    report = verify(materialized)
    assert not report.ok
    assert any("epoch 0 split 3: " in p and "split-00003.lance is missing" in p for p in report.problems)
    assert any("epoch 0: " in p and "rows, 800 selected rows expected" in p for p in report.problems)


def test_verify_fails_on_an_edited_manifest(materialized):
    path = os.path.join(materialized, "manifest.json")
    m = json.load(open(path))
    m["plan"]["seed"] = 6
    json.dump(m, open(path, "w"))
    report = verify(materialized)
    assert not report.ok and "the manifest was edited" in report.problems[0]


def test_verify_without_manifest_says_the_run_did_not_finish(materialized):
    os.remove(os.path.join(materialized, "manifest.json"))
    with pytest.raises(PrepError, match="has not finished: rerun it"):
        verify(materialized)
    assert cli_main(["verify", materialized]) == 2


def _rewrite_split(out: str, epoch: int, split: int, edit) -> None:
    uri = os.path.join(out, split_path(epoch, split))
    table = edit(lance.dataset(uri).to_table())
    shutil.rmtree(uri)
    lance.write_dataset(table, uri, data_storage_version="2.0")


def test_verify_names_the_first_row_that_differs_when_only_the_last_is_missing(materialized):
    """Issue 21 #16: it said "first at row 0" when only the last row was missing."""
    _rewrite_split(materialized, 0, 2, lambda t: t.slice(0, t.num_rows - 1))
    rows = verify(materialized).problems
    want = [p for p in rows if "epoch 0 split 2: ids differ from the plan" in p]
    assert want == ["epoch 0 split 2: ids differ from the plan (first at row 199: the plan has 200 rows, the split 199)"]


def test_verify_names_the_first_row_that_differs_in_the_middle(materialized):
    _rewrite_split(materialized, 1, 0, lambda t: pa.concat_tables([t.slice(0, 7), t.slice(8, 1), t.slice(8)]))
    text = "\n".join(verify(materialized).problems)
    assert "epoch 1 split 0: ids differ from the plan (first at row 7: the plan has " in text and "(1 rows differ)" in text


def test_verify_finds_token_ids_outside_the_vocabulary_the_manifest_records(materialized):
    path = os.path.join(materialized, "manifest.json")
    m = json.load(open(path))
    m["source"]["metadata"]["tokenizer"]["vocab_size"] = 100  # its special ids (0, 1, 2) still fit; its tokens do not
    json.dump(m, open(path, "w"))
    report = verify(materialized)
    assert any(p.startswith("epoch 0 split 0: token ids range over [") and
               "outside the tokenizer's vocabulary [0, 100)" in p for p in report.problems), report.problems


def test_flipped_bytes_in_a_split_fail_verify_which_names_the_rerun_that_repairs_them(materialized, capsys):
    """Issue 31 #1: verify failed and said nothing of the repair; the command it names now rewrites the split."""
    tables.flip_bytes(next(iter(glob.glob(os.path.join(materialized, split_path(0, 1), "data", "*.lance")))))
    assert cli_main(["verify", materialized]) == 1
    err = capsys.readouterr().err
    assert "FAILED: epoch 0 split 1: " in err and "to rewrite the damaged splits (epoch 0 split 1), rerun: " in err, err
    command = shlex.split(err.split("rerun: ", 1)[1].strip())
    assert command[:2] == ["prep", "materialize-shuffle"] and command[command.index("--output") + 1] == materialized
    assert cli_main(command[1:] + ["--executor", "local"]) == 0
    assert verify(materialized).ok
