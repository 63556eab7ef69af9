"""The plan contract: one typed plan spec, one strict manifest reader, and the proof that the
reader's on-the-fly plan (``Planned``) and a materialized output of the same table and plan
are the same stream."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import reader_fixtures as rf
from prep.errors import PrepError
from prep.contracts.manifest import FORMAT, MANIFEST, Manifest
from prep.io.materialized import read_manifest
from prep.plan import STRATEGIES
from prep.plan.spec import PlanSpec

# ---------------------------------------------------------------- the spec


def test_spec_json_round_trips_and_its_fingerprint_is_the_one_earlier_prep_wrote():
    doc = {"num_splits": 8, "strategy": "hash", "hash_columns": ["id", "length"], "clump": 4, "seed": 7,
           "filter": "length > 3", "columns": ["id", "input_ids"]}
    spec = PlanSpec.from_json(doc)
    assert spec.to_json() == doc and PlanSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    assert spec.hash_columns == ("id", "length") and spec.columns == ("id", "input_ids")
    # computed by prep.plan.plan_fingerprint before the spec existed: outputs written then still resume
    assert spec.fingerprint("/data/t.lance", 3) == "1c11cc1783da1668"
    assert spec.fingerprint("/data/t.lance", 4) != spec.fingerprint("/data/t.lance", 3)
    with pytest.raises(Exception):
        spec.seed = 1  # frozen


@pytest.mark.parametrize(
    "doc,says",
    [
        ({"num_splits": 4, "shuffle": True}, "unknown keys ['shuffle']"),
        ({"num_splits": "4"}, "plan.num_splits='4' must be an integer"),
        ({"num_splits": True}, "plan.num_splits=True must be an integer"),
        ({"seed": 1.5}, "plan.seed=1.5 must be an integer"),
        ({"strategy": "zigzag"}, "strategy='zigzag' is not one of"),
        ({"clump": 0}, "clump=0 must be >= 1"),
        ({"hash_columns": "id"}, "plan.hash_columns='id' must be a list of column names"),
        ({"columns": [1]}, "plan.columns=[1] must be a list of column names"),
        ({"filter": ""}, "plan.filter='' must be a non-empty"),
        ({"filter": "length > 300; anything at all"},  # issue 21 #11: Lance would drop what follows the ';'
         "plan.filter='length > 300; anything at all' must be one SQL expression: Lance would read 'length > 300'"),
        ({"num_splits": 2, "mixture": {"sources": [{"table": "a", "weight": float("inf")}], "weight_by": "rows",
                                        "global_batch": 8}}, "weight=inf must be a finite number > 0"),
        ({"strategy": "hash", "hash_columns": []}, "plan.hash_columns must name at least one column"),
        ({"mixture": {"sources": [], "weight_by": "rows", "global_batch": 8}}, "plan.mixture.sources must list at least one"),
        ({"mixture": {"sources": [{"table": "a", "weight": 1}]}}, "plan.mixture is missing keys ['weight_by', 'global_batch']"),
        ({"mixture": {"sources": [{"table": "a", "weight": 1}], "weight_by": "rows", "global_batch": 8, "shares": 1}},
         "plan.mixture has unknown keys ['shares']"),
        ([4], "plan must be a JSON object"),
    ],
)
def test_a_bad_plan_is_one_line_naming_the_key(doc, says):
    with pytest.raises(PrepError) as err:
        PlanSpec.from_json(doc, fill_defaults=True)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_stored_plan_must_name_every_key():
    with pytest.raises(PrepError, match=r"plan is missing keys \['clump', 'columns'"):
        PlanSpec.from_json({"num_splits": 4, "strategy": "random", "hash_columns": ["id"], "seed": 0, "filter": None})


# ---------------------------------------------------------------- the manifest


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[str, Manifest]:
    out = str(tmp_path_factory.mktemp("m") / "out")
    table = rf.gsm8k_sft(24) if rf.GSM8K.exists() else None
    if table is None:
        pytest.skip(f"real data not found at {rf.SHARED_DATA}")
    return out, rf.write_materialized(out, table, rf.sft_metadata(24, 0), num_splits=4, epochs=2, seed=1)


def _rewrite(out: str, doc: object) -> None:
    with open(os.path.join(out, MANIFEST), "w") as f:
        json.dump(doc, f)


def test_manifest_reads_back_what_was_written(written):
    out, manifest = written
    assert read_manifest(out) == manifest
    with open(os.path.join(out, MANIFEST)) as f:
        assert json.load(f) == {**manifest.to_json(), "format": FORMAT}
    assert [s.split for s in manifest.epoch(1).splits] == [0, 1, 2, 3]
    with pytest.raises(PrepError, match=r"epoch 5 is not materialized \(the output has epochs \[0, 1\]\)"):
        manifest.epoch(5)


def _tokenizer(manifest: dict, **values) -> dict:
    """``manifest`` with its source tokenizer's ``values`` replaced (issue 21 #13: the reader padded with -5)."""
    meta = manifest["source"]["metadata"]
    return {**manifest, "source": {**manifest["source"], "metadata": {**meta, "tokenizer": {**meta["tokenizer"], **values}}}}


@pytest.mark.parametrize(
    "damage,says",
    [
        (lambda m: {**m, "format": "prep.materialized/0"}, "format='prep.materialized/0', this prep reads 'prep.materialized/2' and 'prep.materialized/1'"),
        (lambda m: {**m, "extra": 1}, "unknown keys ['extra']"),
        (lambda m: {**m, "plan": {**m["plan"], "seed": -1}}, "seed=-1 must be >= 0"),
        (lambda m: {**m, "plan": {**m["plan"], "speed": 2}}, "plan has unknown keys ['speed']"),
        (lambda m: {**m, "source": {**m["source"], "metadata": None}}, "metadata (an object)"),
        (lambda m: {**m, "epochs": m["epochs"] + m["epochs"][:1]}, "lists an epoch twice"),
        (lambda m: _tokenizer(m, pad_id=-5), "source.metadata: prep table metadata tokenizer.pad_id=-5 must be a token id: an integer >= 0"),
        (lambda m: _tokenizer(m, pad_id=10**6), "source.metadata: prep table metadata tokenizer.pad_id=1000000 must be a token id: an integer >= 0 and < vocab_size"),
        (lambda m: _tokenizer(m, vocab_size=0), "source.metadata: prep table metadata tokenizer.vocab_size=0 must be an integer >= 1"),
        (lambda m: {**m, "source": {**m["source"], "metadata": {**m["source"]["metadata"], "counts": {"rows_read": -3}}}},
         "source.metadata: prep table metadata counts.rows_read=-3 must be an integer >= 0"),
        (lambda m: {**m, "num_selected_rows": -1}, "num_selected_rows=-1 must be an integer >= 0"),
        (lambda m: {**m, "num_selected_rows": 10**9}, "num_selected_rows=1000000000 is more than the source's num_rows="),
    ],
    ids=["old-format", "unknown-key", "bad-plan-value", "unknown-plan-key", "no-metadata", "epoch-twice", "pad-negative",
         "pad-beyond-vocab", "no-vocab", "negative-count", "negative-rows", "selected-beyond-rows"],
)
def test_a_manifest_from_another_prep_or_edited_is_one_line_saying_to_rerun_materialize(written, tmp_path, damage, says):
    out, manifest = written
    broken = str(tmp_path / "broken")
    os.makedirs(broken)
    _rewrite(broken, damage(manifest.to_json()))
    with pytest.raises(PrepError) as err:
        read_manifest(broken)
    text = str(err.value)
    assert says in text and MANIFEST in text and "rerun `prep materialize-shuffle`" in text and "\n" not in text


# ---------------------------------------------------------------- Planned == materialized

PLANS = [  # every strategy; clumps that do and do not divide the split sizes
    PlanSpec(num_splits=6, strategy="random", seed=5),
    PlanSpec(num_splits=6, strategy="hash", seed=5, clump=2),
    PlanSpec(num_splits=6, strategy="sequential", clump=4),
    PlanSpec(num_splits=6, strategy="round-robin", seed=2, clump=3),
]


def test_the_plans_cover_every_strategy():
    assert sorted(p.strategy for p in PLANS) == sorted(STRATEGIES)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    if not rf.GSM8K.exists():
        pytest.skip(f"real data not found at {rf.SHARED_DATA}")
    table = rf.gsm8k_sft(150)
    uri = str(tmp_path_factory.mktemp("planned") / "prepared.lance")
    rf.write_table(uri, table, rf.sft_metadata(150, int(np.asarray(table.column("length")).sum())))
    return uri


def _stream(path: str, world_size: int, **kw) -> list[tuple[int, int, list[int]]]:
    """Every rank's batches as (epoch, step, global batch ids in rank order)."""
    from prep.reader import ReaderDataset

    per_rank = [[(b.epoch, b.step, b.ids.tolist()) for b in ReaderDataset(path, global_batch_size=12, rank=r,
                                                                         world_size=world_size, **kw)]
                for r in range(world_size)]
    assert all(len(p) == len(per_rank[0]) for p in per_rank)
    return [(e, t, sum((p[i][2] for p in per_rank), [])) for i, (e, t, _) in enumerate(per_rank[0])]


@pytest.mark.parametrize("spec", PLANS, ids=[p.strategy for p in PLANS])
def test_planned_and_materialized_are_the_same_stream(prepared, tmp_path, spec):
    from prep.materialize import materialize_shuffle
    from prep.reader import ReaderDataset

    out = str(tmp_path / "out")
    manifest = materialize_shuffle(table=prepared, output=out, epochs=2, splits=spec.num_splits, strategy=spec.strategy,
                                   clump=spec.clump, seed=spec.seed, executor="local", num_cpus=2)
    assert manifest.plan == spec
    streams = {}
    for w in (2, 3):
        planned = _stream(prepared, w, plan=spec, epochs=2)
        materialized = _stream(out, w)
        assert len(materialized) > 5 and planned == materialized, (spec.strategy, w)
        streams[w] = materialized
    assert streams[2] == streams[3]  # elastic: the global batches do not depend on the world size
    ids = [i for e, _, batch in streams[2] if e == 0 for i in batch]
    assert len(ids) == len(set(ids))  # each row at most once an epoch
    # same fingerprint: a reader state taken on one resumes on the other
    direct = ReaderDataset(prepared, global_batch_size=12, plan=spec.to_json(), epochs=2)
    assert direct.state_dict() == ReaderDataset(out, global_batch_size=12).state_dict()
