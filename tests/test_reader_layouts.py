"""prep.reader on packed text, images, and a prepared table read through an on-the-fly plan."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import reader_fixtures as rf
from prep.reader import ReaderDataset

pytestmark = pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")


def test_packed_rows_are_a_reshape_with_position_ids_and_masked_labels(tmp_path):
    table, meta = rf.packed_table(64, 128, pad_id=0)
    rf.write_materialized(str(tmp_path), table, meta, num_splits=4, epochs=1, strategy="sequential")
    ds = ReaderDataset(str(tmp_path), global_batch_size=8, rank=1, world_size=4, token_dtype=torch.int32)
    batches = list(ds)
    assert len(batches) == 8
    by_id = {int(i): k for k, i in enumerate(table.column("id").to_numpy())}
    tokens = table.column("input_ids").combine_chunks().flatten().to_numpy().reshape(64, 128)
    lm = table.column("loss_mask").combine_chunks().flatten().to_numpy().reshape(64, 128)
    pos = table.column("position_ids").combine_chunks().flatten().to_numpy().reshape(64, 128)
    length = table.column("length").to_numpy()
    for batch in batches:
        assert batch["input_ids"].shape == (2, 128) and batch["input_ids"].dtype == torch.int32
        rows = [by_id[int(i)] for i in batch.ids]
        np.testing.assert_array_equal(batch["input_ids"].numpy(), tokens[rows])
        np.testing.assert_array_equal(batch["position_ids"].numpy(), pos[rows])
        np.testing.assert_array_equal(batch["labels"].numpy(), np.where(lm[rows] != 0, tokens[rows], -100))
        np.testing.assert_array_equal(batch["attention_mask"].numpy(), np.arange(128) < length[rows][:, None])
        assert batch.num_tokens == int(length[rows].sum())
    # one split per rank and int32 tokens: the batch is a view of the Arrow buffer, no copy
    assert not batches[0]["input_ids"].numpy().flags.owndata


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_images_come_out_uint8_in_the_requested_layout(tmp_path, layout):
    table, meta = rf.image_table(16, (6, 5, 3))
    rf.write_materialized(str(tmp_path), table, meta, num_splits=2, epochs=1, strategy="sequential")
    batch = next(iter(ReaderDataset(str(tmp_path), global_batch_size=4, image_layout=layout)))
    pixels = table.column("image").combine_chunks().flatten().to_numpy().reshape(16, 6, 5, 3)
    by_id = {int(i): k for k, i in enumerate(table.column("id").to_numpy())}
    rows = [by_id[int(i)] for i in batch.ids]
    assert rows[0] < 8 <= rows[2]  # sequential strategy: split 0 holds rows 0..7, split 1 rows 8..15
    want = torch.from_numpy(pixels[rows])
    assert batch["image"].dtype == torch.uint8
    assert torch.equal(batch["image"], want.permute(0, 3, 1, 2) if layout == "NCHW" else want)
    assert batch["label"].tolist() == [r % 2 for r in rows] and batch.num_tokens == 0


def test_prepared_table_read_through_a_plan_matches_its_materialized_output(tmp_path):
    table = rf.gsm8k_sft(120)
    meta = rf.sft_metadata(120, int(np.asarray(table.column("length")).sum()))
    prepared = os.path.join(tmp_path, "prepared.lance")
    rf.write_table(prepared, table, meta)
    out = os.path.join(tmp_path, "out")
    rf.write_materialized(out, table, meta, num_splits=6, epochs=2, source_uri=os.path.abspath(prepared), source_version=1)
    plan = {"num_splits": 6, "strategy": "random", "seed": 0}
    on_the_fly = ReaderDataset(prepared, global_batch_size=12, plan=plan, epochs=2, rank=1, world_size=2)
    materialized = ReaderDataset(out, global_batch_size=12, rank=1, world_size=2)
    assert on_the_fly.state_dict() == materialized.state_dict()  # same fingerprint: states carry over
    a, b = list(on_the_fly), list(materialized)
    assert len(a) == len(b) == 2 * 10  # 20 rows a split, 2 a step
    for x, y in zip(a, b):
        assert (x.epoch, x.step) == (y.epoch, y.step) and np.array_equal(x.ids, y.ids)
        assert torch.equal(x["input_ids"], y["input_ids"]) and torch.equal(x["labels"], y["labels"])
    resumed = ReaderDataset(prepared, global_batch_size=12, plan=plan, epochs=2, rank=1, world_size=2)
    resumed.load_state_dict({**materialized.state_dict(), "epoch": 1, "step": 7})
    assert [x.step for x in resumed] == [7, 8, 9]


def test_image_batches_take_the_names_hf_image_models_take(tmp_path):
    """Issue 33: image batches were {'image', 'label'}; HF image models take pixel_values= and labels=."""
    from transformers import ViTConfig, ViTForImageClassification

    from prep.errors import PrepError
    from prep.reader import HF_IMAGE_KEYS

    table, meta = rf.image_table(16, (8, 8, 3))
    rf.write_materialized(str(tmp_path), table, meta, num_splits=2, epochs=1, strategy="sequential")
    plain = next(iter(ReaderDataset(str(tmp_path), global_batch_size=4)))
    hf = next(iter(ReaderDataset(str(tmp_path), global_batch_size=4, image_keys=HF_IMAGE_KEYS,
                                 transform=lambda b: {**b, "pixel_values": b["pixel_values"].float() / 255})))
    assert set(plain) == {"image", "label"} and set(hf) == {"pixel_values", "labels"}
    assert torch.equal(hf["pixel_values"], plain["image"].float() / 255) and torch.equal(hf["labels"], plain["label"])
    torch.manual_seed(0)
    model = ViTForImageClassification(ViTConfig(image_size=8, patch_size=4, hidden_size=16, num_hidden_layers=1,
                                                num_attention_heads=2, intermediate_size=32, num_labels=2))
    assert model(**hf).loss.item() > 0  # the batch goes to the model as it is
    with pytest.raises(PrepError, match=r"image_keys=\('x', 'x'\) must be two different names"):
        ReaderDataset(str(tmp_path), global_batch_size=4, image_keys=("x", "x"))
