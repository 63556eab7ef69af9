"""prep.reader refuses broken inputs with an error that names the file, never a short epoch."""

from __future__ import annotations

import glob
import json
import os
import shutil

import pytest

import reader_fixtures as rf
from prep.errors import PrepError
from prep.reader import ReaderDataset

pytestmark = pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")


@pytest.fixture
def out4(tmp_path):
    """A fresh copy of a 4-split, 1-epoch output (10 rows a split), safe to break."""
    src, manifest = rf.cached_output("sft4")
    dst = str(tmp_path / "out")
    shutil.copytree(src, dst)
    return dst, manifest.to_json()


def test_a_directory_without_manifest_is_not_a_materialized_output(tmp_path, out4):
    with pytest.raises(PrepError, match="is not a materialized output: no manifest.json"):
        ReaderDataset(str(tmp_path), global_batch_size=4)
    split = os.path.join(out4[0], "epoch-00000", "split-00000.lance")
    assert ReaderDataset(split, global_batch_size=4).layout.manifest is None  # a Lance table: the default plan reads it


def test_a_manifest_that_breaks_the_format_is_named(out4):
    path, manifest = out4
    broken = {**manifest, "epochs": [{**manifest["epochs"][0], "splits": manifest["epochs"][0]["splits"][:3]}]}
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(broken, f)
    with pytest.raises(PrepError, match=r"manifest.json: epoch 0 lists splits \[0, 1, 2\]"):
        ReaderDataset(path, global_batch_size=4)
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump({**manifest, "format": "other/9"}, f)
    with pytest.raises(PrepError, match="format='other/9'"):
        ReaderDataset(path, global_batch_size=4)


def test_a_missing_split_dataset_is_an_error_naming_it(out4):
    path, _ = out4
    shutil.rmtree(os.path.join(path, "epoch-00000", "split-00002.lance"))
    ds = ReaderDataset(path, global_batch_size=4)
    with pytest.raises(PrepError, match="cannot open split dataset .*split-00002.lance"):
        list(ds)


def test_a_truncated_data_file_is_an_error_naming_the_split(out4):
    path, _ = out4
    (data,) = glob.glob(os.path.join(path, "epoch-00000", "split-00003.lance", "data", "*.lance"))
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    with pytest.raises(PrepError, match="split-00003.lance"):
        list(ReaderDataset(path, global_batch_size=4))


def test_a_split_with_fewer_rows_than_the_manifest_says_is_not_a_short_epoch(out4):
    path, _ = out4
    import lance

    split = os.path.join(path, "epoch-00000", "split-00001.lance")
    shorter = lance.dataset(split).to_table().slice(0, 6)
    shutil.rmtree(split)
    lance.write_dataset(shorter, split)
    ds = ReaderDataset(path, global_batch_size=4, rank=0, world_size=2)
    with pytest.raises(PrepError, match="split-00001.lance has 6 rows, the manifest says 10"):
        list(ds)


def test_world_size_must_divide_the_global_batch_and_epochs_must_exist(out4):
    path, _ = out4
    with pytest.raises(PrepError, match=r"world_size=3 does not divide global_batch_size=4: .* \[1, 2, 4\]"):
        ReaderDataset(path, global_batch_size=4, rank=0, world_size=3)
    with pytest.raises(PrepError, match="global_batch_size=0 must be >= 1"):
        ReaderDataset(path, global_batch_size=0)
    assert ReaderDataset(path, global_batch_size=6, rank=1, world_size=3).local_batch_size == 2  # 6 is not 4k: fine
    with pytest.raises(PrepError, match=r"epochs \[3\] are not in"):
        ReaderDataset(path, global_batch_size=4, epochs=[3])
