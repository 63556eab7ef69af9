"""The job marker contract: what prep writes in a claimed folder is what its one strict parser reads back."""

from __future__ import annotations

import json

import pytest

from prep.contracts import ownership
from prep.contracts.marker import JOB_MARKER, JobMarker, PinnedSource
from prep.errors import PrepError
from prep.plan.spec import MixtureSource, MixtureSpec, PlanSpec

_MIXTURE = PlanSpec(num_splits=4, mixture=MixtureSpec(sources=(MixtureSource(table="/t/a.lance", weight=1.0, version=2),
                                                               MixtureSource(table="/t/b.lance", weight=3.0, version=1)),
                                                      weight_by="rows", global_batch=8, epoch_rows=64))


@pytest.mark.parametrize("marker", [
    JobMarker.now("prep pretokenize"),
    JobMarker.now("prep materialize-shuffle", fingerprint="5a396cc6ece2d6c3", plan=PlanSpec(num_splits=4, seed=3),
                  source=PinnedSource("/t/a.lance", 1)),
    JobMarker.now("prep materialize-shuffle", fingerprint="00000000000000ff", plan=_MIXTURE,
                  source=PinnedSource("/t/a.lance", 2)),
], ids=["table", "plan", "mixture"])
def test_job_marker_round_trips_through_json(marker):
    assert JobMarker.from_json(json.loads(json.dumps(marker.to_json())), "m") == marker


def test_markers_written_by_the_claim_parse(tmp_path):
    """The files prep writes (here: a table's claim) are read by the parser, with the keys prep always wrote."""
    ownership.claim_outputs([str(tmp_path / "t.lance")], "prep pretokenize", overwrite=False)
    doc = json.loads((tmp_path / "t.lance" / JOB_MARKER).read_text())
    assert sorted(doc) == ["claimed", "job", "prep_version", "written_by"]
    assert JobMarker.from_json(doc, "t").job == "prep pretokenize"


_GOOD = {"written_by": "prep", "prep_version": "0.1.0", "job": "prep materialize-shuffle",
         "claimed": "2026-12-01T16:05:03+00:00", "fingerprint": "5a396cc6ece2d6c3",
         "plan": PlanSpec().to_json(), "source": {"uri": "/t/a.lance", "version": 1}}


@pytest.mark.parametrize("change, message", [
    ({"extra": 1}, "unknown keys ['extra']"),
    ({"claimed": None}, "claimed=None must be a non-empty string"),
    ({"written_by": "someone"}, "written_by='someone' must be 'prep'"),
    ({"fingerprint": 7}, "fingerprint=7 must be 16 hex digits"),
    ({"plan": {"num_splits": 4, "bogus": 1}}, "plan has unknown keys ['bogus']"),
    ({"source": {"uri": "/t/a.lance", "version": "1"}}, "source={'uri': '/t/a.lance', 'version': '1'} must be"),
    ({"source": None}, "source=None must be"),
])
def test_job_marker_parse_is_strict(change, message):
    with pytest.raises(PrepError, match="^OUT/_prep_job.json: job marker") as err:
        JobMarker.from_json({**_GOOD, **change}, "OUT/_prep_job.json")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_job_marker_needs_all_plan_keys_or_none():
    with pytest.raises(PrepError, match=r"missing keys \['job'\]"):
        JobMarker.from_json({k: v for k, v in _GOOD.items() if k != "job"}, "m")
    with pytest.raises(PrepError, match="all given .* or none; found only"):
        JobMarker.from_json({k: v for k, v in _GOOD.items() if k != "plan"}, "m")
    with pytest.raises(PrepError, match="must be a JSON object, not list"):
        JobMarker.from_json([], "m")
