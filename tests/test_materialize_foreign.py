"""Lance tables prep did not write (issue 33 #8): materialize and the reader take any table with token or image
columns, stating what they infer; a table that cannot serve is refused before any work, naming what it lacks.

The tables are written here by plain ``lance.write_dataset`` (what Ray Data's ``write_lance`` leaves too: no
``prep`` schema metadata), with and without ``id``, ``loss_mask`` and ``length``.
"""

from __future__ import annotations

import os
from collections import Counter

import lance
import numpy as np
import pyarrow as pa
import pytest

from prep.cli import main
from prep.contracts.foreign import NO_ID
from prep.io.materialized import read_manifest
from prep.errors import PrepError
from prep.materialize import materialize_mixture, materialize_shuffle
from prep.materialize.verify import verify
from prep.plan.spec import MixtureSource, MixtureSpec, PlanSpec
from prep.reader import ReaderDataset

ROWS, S, G = 120, 4, 8


def _token_lists(rows: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 1000, size=int(n)).tolist() for n in rng.integers(3, 40, size=rows)]


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> dict[str, str]:
    """plain: input_ids list<int32> only; sft: id, input_ids, loss_mask; text: no token column; images: 4x4 RGB + label."""
    root = tmp_path_factory.mktemp("foreign")
    tokens = _token_lists(ROWS, 1)
    masks = [[0] * (len(t) // 2) + [1] * (len(t) - len(t) // 2) for t in tokens]
    made = {
        "plain": pa.table({"input_ids": pa.array(tokens, pa.list_(pa.int32()))}),
        "sft": pa.table({"id": pa.array(np.arange(ROWS, dtype=np.uint64) + 1000),
                         "input_ids": pa.array(tokens, pa.list_(pa.int32())),
                         "loss_mask": pa.array(masks, pa.list_(pa.uint8()))}),
        "text": pa.table({"id": pa.array(np.arange(ROWS, dtype=np.uint64)), "text": [f"row {i}" for i in range(ROWS)]}),
        "images": pa.table({"image": pa.FixedSizeListArray.from_arrays(
                                pa.array(np.random.default_rng(3).integers(0, 256, ROWS * 48, dtype=np.uint8)), 48),
                            "label": pa.array(np.arange(ROWS) % 3, pa.int64())}),
    }
    out = {}
    for name, table in made.items():
        out[name] = str(root / f"{name}.lance")
        lance.write_dataset(table, out[name], max_rows_per_file=50)
    return out


def _read(path: str, world: int = 1, **kw) -> list[dict]:
    """Every global batch: its tensors put together over the ranks, with the ids."""
    per_rank = [list(ReaderDataset(path, global_batch_size=G, rank=r, world_size=world, **kw)) for r in range(world)]
    steps = []
    for parts in zip(*per_rank):
        step = {"ids": np.concatenate([b.ids for b in parts])}
        for key in parts[0]:
            step[key] = [row for b in parts for row in b[key]]
        steps.append(step)
    return steps


def _rows(step: dict) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in ids[mask.bool()]) for ids, mask in zip(step["input_ids"], step["attention_mask"])]


def test_a_plain_token_table_materializes_reads_and_verifies_with_what_was_inferred_stated(foreign, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["materialize-shuffle", "--table", foreign["plain"], "--output", out, "--epochs", "2",
                 "--splits", str(S)]) == 0
    printed = capsys.readouterr().out
    said = (f"{foreign['plain']} was not written by prep: kind pretrain (input_ids list<int32>; no loss_mask: every "
            "token trained on); no id column (batch ids are 2**64-1); no tokenizer (padding uses id 0 unless pad_id=; "
            "no vocabulary check); no rejects table or provenance")
    assert said in printed
    manifest = read_manifest(out)
    assert manifest.source.metadata.inferred == said and manifest.source.metadata.kind == "pretrain"
    table = Counter(tuple(r) for r in lance.dataset(foreign["plain"]).to_table().column("input_ids").to_pylist())
    one = _read(out, epochs=[0])
    assert len(one) == ROWS // G and Counter(r for s in one for r in _rows(s)) == table  # every row once
    assert all((s["ids"] == NO_ID).all() for s in one)
    for s in one:  # every real token is trained on; padding (id 0) is not
        for ids, labels, mask in zip(s["input_ids"], s["labels"], s["attention_mask"]):
            assert (labels[mask.bool()] == ids[mask.bool()]).all() and (labels[~mask.bool()] == -100).all()
            assert (ids[~mask.bool()] == 0).all()
    two = _read(out, world=2, epochs=[0])
    assert [_rows(a) for a in one] == [_rows(b) for b in two]
    report = verify(out)
    assert report.ok, report.problems
    assert any("no id column" in n for n in report.notes)
    assert main(["inspect", out]) == 0
    assert f"  {said}" in capsys.readouterr().out


def test_a_table_with_ids_and_a_loss_mask_is_sft_and_reads_on_the_fly_too(foreign, tmp_path):
    out = str(tmp_path / "out")
    manifest = materialize_shuffle(table=foreign["sft"], output=out, epochs=1, splits=S, executor="local")
    assert manifest.source.metadata.kind == "sft"
    assert "loss_mask list<uint8>: trained where it is non-zero" in manifest.source.metadata.inferred
    source = lance.dataset(foreign["sft"]).to_table().to_pylist()
    by_id = {r["id"]: r for r in source}
    for ds in (ReaderDataset(out, global_batch_size=G, rank=0, world_size=1, return_loss_mask=True),
               ReaderDataset(foreign["sft"], global_batch_size=G, rank=0, world_size=1, return_loss_mask=True,
                             plan=PlanSpec(num_splits=S))):
        seen = []
        for b in ds:
            for i, ids, labels, mask in zip(b.ids.tolist(), b["input_ids"], b["labels"], b["attention_mask"]):
                row = by_id[i]
                n = len(row["input_ids"])
                assert ids[:n].tolist() == row["input_ids"] and int(mask.sum()) == n
                want = [t if m else -100 for t, m in zip(row["input_ids"], row["loss_mask"])]
                assert labels[:n].tolist() == want
                seen.append(i)
        assert sorted(seen) == sorted(by_id)
    assert verify(out).ok


def test_an_image_table_reads_as_square_images_with_its_labels(foreign, tmp_path):
    out = str(tmp_path / "out")
    manifest = materialize_shuffle(table=foreign["images"], output=out, epochs=1, splits=S, executor="local")
    assert manifest.source.metadata.image.shape == (4, 4, 3)
    assert "image 48 bytes a row read as a square 4x4x3 HWC image" in manifest.source.metadata.inferred
    pixels = {bytes(r["image"]): r["label"] for r in lance.dataset(foreign["images"]).to_table().to_pylist()}
    got = {}
    for b in ReaderDataset(out, global_batch_size=G, rank=0, world_size=1, image_layout="NHWC"):
        assert tuple(b["image"].shape) == (G, 4, 4, 3)
        got.update({bytes(img.numpy().ravel()): int(label) for img, label in zip(b["image"], b["label"])})
    assert got == pixels


@pytest.mark.parametrize("name,columns,says", [
    ("text", None, "lacks the columns a row needs: token ids `input_ids` (list<int>), or `image` "
                   "(fixed_size_list<uint8>) with `label`; it has ['id', 'text']"),
    ("wrong-ids", {"input_ids": pa.array([["a", "b"]] * 4)}, "column input_ids is list<string>, not a list of token ids"),
    ("odd-image", {"image": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(4 * 60, np.uint8)), 60),
                   "label": pa.array([0, 1, 0, 1])}, "holds 60 bytes a row, not a square RGB or grey image"),
    ("no-label", {"image": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(4 * 48, np.uint8)), 48)},
     "needs an integer `label` column beside `image`"),
])
def test_a_table_that_cannot_serve_is_refused_before_any_work_naming_what_it_lacks(foreign, tmp_path, name, columns, says):
    path = foreign["text"] if columns is None else str(tmp_path / f"{name}.lance")
    if columns is not None:
        lance.write_dataset(pa.table(columns), path)
    out = tmp_path / "out"
    with pytest.raises(PrepError) as err:
        materialize_shuffle(table=path, output=str(out), epochs=1, splits=S, executor="local")
    assert says in str(err.value) and path in str(err.value) and "\n" not in str(err.value)
    assert not out.exists() or not os.listdir(out)  # nothing written: refused before the job marker
    with pytest.raises(PrepError, match="lacks the columns|not a list of token ids|not a square|integer `label`"):
        ReaderDataset(path, global_batch_size=G, rank=0, world_size=1, plan=PlanSpec(num_splits=S))


def test_plain_tables_mix_with_each_other_and_not_with_a_tokenized_table_of_unknown_tokenizer(foreign, tmp_path):
    other = str(tmp_path / "other.lance")
    lance.write_dataset(pa.table({"input_ids": pa.array(_token_lists(40, 2), pa.list_(pa.int32()))}), other)
    plan = PlanSpec(num_splits=S, mixture=MixtureSpec(sources=(MixtureSource(table=foreign["plain"], weight=3),
                                                               MixtureSource(table=other, weight=1)),
                                                      weight_by="rows", global_batch=G))
    manifest = materialize_mixture(mixture=plan, output=str(tmp_path / "mix"), epochs=1, executor="local")
    assert manifest.source.metadata.inferred is not None
    assert [sum(e.source_rows) for e in manifest.epochs] == [manifest.plan.mixture.epoch_rows]
    assert verify(str(tmp_path / "mix")).ok


def test_the_ray_executor_writes_what_the_local_one_writes_from_a_plain_table(foreign, tmp_path, ray_local):
    local = materialize_shuffle(table=foreign["plain"], output=str(tmp_path / "local"), epochs=1, splits=S, executor="local")
    on_ray = materialize_shuffle(table=foreign["plain"], output=str(tmp_path / "ray"), epochs=1, splits=S, executor="ray")
    assert [e.splits for e in on_ray.epochs] == [e.splits for e in local.epochs]
    assert on_ray.source.metadata == local.source.metadata
