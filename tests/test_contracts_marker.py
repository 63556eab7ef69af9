"""The job marker contract: what prep writes in a claimed folder is what its one strict parser reads back."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

import pytest

from prep.io import claims
from prep.contracts.marker import JOB_MARKER, JobMarker, PinnedSource
from prep.errors import PrepError
from prep.io import storage
from prep.materialize import run
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
    claims.claim_outputs([str(tmp_path / "t.lance")], "prep pretokenize", overwrite=False)
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


# ------------------------------------------------------------ the marker at a materialized output


@dataclass(frozen=True)
class _Job:
    """The part of a resolved run that claiming an output reads (prep.materialize.run.ResolvedRun)."""

    output: str
    plan: PlanSpec
    source: str = "/t/a.lance"
    version: int = 2
    s3: storage.S3Options = storage.S3Options()
    lance_format: str = "stable"

    @property
    def fingerprint(self) -> str:
        return self.plan.fingerprint(self.source, self.version)

    def lance_options(self, uri: str) -> dict[str, str] | None:
        return None


def _moved(plan: PlanSpec, version: int) -> PlanSpec:
    assert plan.mixture is not None
    first = replace(plan.mixture.sources[0], version=version)
    return replace(plan, mixture=replace(plan.mixture, sources=(first, *plan.mixture.sources[1:])))


def test_the_claimed_plan_is_read_back_typed_and_a_moved_table_is_named(tmp_path):
    out = str(tmp_path / "out")
    os.makedirs(out)
    first = _Job(out, _MIXTURE)
    run.claim(first, run.existing_output(out, first.s3), overwrite=False)
    found = run.existing_output(out, first.s3)
    assert isinstance(found, JobMarker) and found.plan == _MIXTURE and found.source == PinnedSource("/t/a.lance", 2)
    assert found.fingerprint == first.fingerprint
    run.claim(first, found, overwrite=False)  # the same plan: resumed
    grown = _Job(out, _moved(_MIXTURE, 3))
    with pytest.raises(PrepError, match=r"holds a different plan .*/t/a.lance version 2 -> 3: a table grew"):
        run.claim(grown, found, overwrite=False)


def test_a_table_marker_at_a_materialize_output_is_refused(tmp_path):
    claims.claim_outputs([str(tmp_path)], "prep pretokenize", overwrite=False)
    with pytest.raises(PrepError, match=r"_prep_job.json was not written by prep materialize-shuffle "
                                        r"\(it marks the output of prep pretokenize\)"):
        run.existing_output(str(tmp_path), storage.S3Options())
