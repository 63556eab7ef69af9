"""The done record and the lease record: what prep writes is what their strict parsers read back, and a
record with an unknown, misspelled or wrongly typed key is refused in one line (the job marker's are
tests/test_contracts_marker.py, the manifest's tests/test_plan_contract.py)."""

from __future__ import annotations

import json

import pytest

from prep.contracts.done import DoneRecord, parse_done
from prep.contracts.ownership import LEASE, Holder
from prep.errors import PrepError
from prep.io.lease import this_process
from prep.io.materialized import read_done, write_done

_DONE = DoneRecord(fingerprint="5a396cc6ece2d6c3", epoch=0, split=1, path="epoch-00000/split-00001.lance", num_rows=3736,
                   checksum="a1f0d93b", files={"data/0d1e.lance": 81234, "_versions/1.manifest": 612})


@pytest.mark.parametrize("record", [
    _DONE,
    DoneRecord(**{**_DONE.__dict__, "files": {}, "source_rows": (3000, 736), "source_tokens": (90000, 12000)}),
], ids=["table", "mixture"])
def test_done_record_round_trips_through_its_file(record, tmp_path):
    assert parse_done(json.loads(json.dumps(record.to_json()))) == record
    write_done(str(tmp_path), record)
    assert read_done(str(tmp_path), record.epoch, record.split) == record


@pytest.mark.parametrize("change, message", [
    ({"extra": 1}, "unknown keys ['extra']"),
    ({"num_row": 3736}, "unknown keys ['num_row']"),  # misspelled: num_rows is missing too
    ({"num_rows": "3736"}, "num_rows='3736' must be an integer >= 0"),
    ({"epoch": True}, "epoch=True must be an integer >= 0"),
    ({"fingerprint": "5a396cc6"}, "fingerprint='5a396cc6' is not 16 hex digits"),
    ({"path": "epoch-00000/split-00002.lance"}, "expected 'epoch-00000/split-00001.lance'"),
    ({"files": {"data/x.lance": -1}}, "files must map each file of the split to its size"),
    ({"source_rows": [1, 2]}, "source_rows and source_tokens are both given"),
])
def test_done_record_parse_is_strict(change, message, tmp_path):
    with pytest.raises(PrepError, match="^done record: ") as err:
        parse_done({**_DONE.to_json(), **change})
    assert message in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "epoch-00000").mkdir()
    (tmp_path / "epoch-00000" / "split-00001.done.json").write_text(json.dumps({**_DONE.to_json(), **change}))
    with pytest.raises(PrepError, match=r"^\S+split-00001\.done\.json: done record: "):  # read from a file: named
        read_done(str(tmp_path), 0, 1)


def test_lease_record_round_trips():
    me = this_process("prep pretokenize")
    assert Holder.from_json(json.loads(json.dumps(me.to_json())), LEASE) == me
    assert Holder.decode(me.encode()) == me
    older = {k: v for k, v in me.to_json().items() if k != "pid_start"}  # a lease written before pid_start
    assert Holder.from_json(older, LEASE).pid_start == ""


@pytest.mark.parametrize("change, message", [
    ({"extra": 1}, "unknown keys ['extra']"),
    ({"hearbeat": 1.0}, "unknown keys ['hearbeat']"),  # misspelled: heartbeat is missing too
    ({"pid": "41235"}, "pid='41235' must be an integer >= 0"),
    ({"pid": True}, "pid=True must be an integer >= 0"),
    ({"heartbeat": "soon"}, "heartbeat='soon' must be a number"),
    ({"host": None}, "host=None must be a string"),
    ({"pid_start": 88123456}, "pid_start=88123456 must be a string"),
])
def test_lease_record_parse_is_strict_and_a_torn_file_is_no_holder(change, message):
    doc = {**this_process("j").to_json(), **change}
    if "hearbeat" in change:
        del doc["heartbeat"]
    with pytest.raises(PrepError, match=f"^OUT/{LEASE}: lease record") as err:
        Holder.from_json(doc, f"OUT/{LEASE}")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert Holder.decode(json.dumps(doc).encode()) is None  # what the lease makes of it: not a holder
    assert Holder.decode(b'{"job": "j", "ho') is None and Holder.decode(b"") is None
