"""The decode-images job through Ray: the real photos, bad inputs, S3, the CLI, and `ray job submit`."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import lance
import numpy as np
import pytest

from prep.io import lance_tables
from prep.contracts.table import read_table_metadata
from prep.cli import main as cli_main
from prep.runtime.config import load_config
from prep.errors import PrepError
from prep.prepare.images.config import ImagesConfig
from prep.prepare.images.job import run_decode_images
from test_images import BAD, GOOD, HYMENOPTERA, bad_tree, photos, reference_pil, reference_torchvision

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "imagefolder.yaml"

pytestmark = [
    pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities of TorchVision:DeprecationWarning"),
    pytest.mark.skipif(not HYMENOPTERA.is_dir(), reason=f"real photos not found at {HYMENOPTERA}"),
]


def pixels(ds: lance.LanceDataset, rows: list[int] | None = None) -> np.ndarray:
    h, w, c = read_table_metadata(ds, 't').to_json()["image"]["shape"]
    table = ds.take(rows, columns=["image"]) if rows is not None else ds.to_table(columns=["image"])
    return table.column("image").combine_chunks().flatten().to_numpy().reshape(-1, h, w, c)


@pytest.fixture(scope="module")
def hymenoptera_table(ray_local, tmp_path_factory) -> lance.LanceDataset:
    """configs/imagefolder.yaml over the real tree, written once for the module."""
    out = tmp_path_factory.mktemp("hym") / "hymenoptera-224.lance"
    summary = run_decode_images(load_config(ImagesConfig, CONFIG, input=str(HYMENOPTERA), output=str(out)))
    assert summary["rows_read"] == summary["rows_written"] == 245
    return lance.dataset(str(out))


def test_hymenoptera_becomes_a_table_with_contract_columns_labels_and_counts(hymenoptera_table):
    ds = hymenoptera_table
    meta = read_table_metadata(ds, 't').to_json()
    assert ds.count_rows() == 245
    assert str(ds.schema.field("image").type) == "fixed_size_list<item: uint8>[150528]"
    assert [f.name for f in ds.schema] == ["id", "image", "label", "label_name", "source"]
    assert meta["kind"] == "images" and meta["format"] == "prep.table/1" and meta["labels"] == ["ants", "bees"]
    assert meta["image"] == {"shape": [224, 224, 3], "layout": "HWC", "dtype": "uint8"}
    assert meta["counts"]["rows_read"] == meta["counts"]["rows_written"] + meta["counts"]["rows_rejected"] == 245
    assert meta["decoder"]["formats"] == {"GIF": 1, "JPEG": 244}
    assert set(meta) >= {"config", "config_hash", "sources", "rejects_uri", "prep_version"}
    rows = ds.to_table(columns=["id", "label", "label_name", "source"]).to_pydict()
    assert len(set(rows["id"])) == 245
    assert rows["source"] == sorted(rows["source"])  # sorted paths = row order
    files = sorted(str(p) for p in HYMENOPTERA.rglob("*") if p.is_file())
    assert rows["source"] == files
    assert all(n == Path(s).parent.name and lab == ["ants", "bees"].index(n) for s, n, lab in zip(rows["source"], rows["label_name"], rows["label"]))
    assert lance.dataset(meta["rejects_uri"]).count_rows() == 0


def test_sampled_pixels_match_reference_decodes(hymenoptera_table):
    ds = hymenoptera_table
    sources = ds.to_table(columns=["source"]).column("source").to_pylist()
    sample = list(range(0, 245, 17)) + [sources.index(str(HYMENOPTERA / "ants" / "imageNotFound.gif")), sources.index(str(HYMENOPTERA / "ants" / "ant photos.jpg"))]
    got = pixels(ds, sample)
    for row, arr in zip(sample, got):
        data = Path(sources[row]).read_bytes()
        assert np.array_equal(arr, reference_torchvision(data)), sources[row]
        assert np.abs(arr.astype(int) - reference_pil(data).astype(int)).max() <= 1, sources[row]


def test_same_rows_ids_and_order_whatever_the_chunking(ray_local, hymenoptera_table, tmp_path):
    cfg = load_config(ImagesConfig, CONFIG, output=str(tmp_path / "again.lance"), images_per_chunk=100)
    run_decode_images(cfg)
    again = lance.dataset(str(tmp_path / "again.lance"))
    cols = ["id", "label", "label_name", "source"]
    assert again.to_table(columns=cols).equals(hymenoptera_table.to_table(columns=cols))
    assert np.array_equal(pixels(again, list(range(0, 245, 30))), pixels(hymenoptera_table, list(range(0, 245, 30))))
    assert len(again.get_fragments()) == 3 and len(hymenoptera_table.get_fragments()) == 4


def test_bad_inputs_are_written_or_rejected_and_counts_reconcile(ray_local, tmp_path):
    root = bad_tree(tmp_path / "tree")
    out = tmp_path / "bad.lance"
    summary = run_decode_images(load_config(ImagesConfig, CONFIG, input=str(root), output=str(out), images_per_chunk=5,
                                             max_reject_fraction=0.5))
    assert summary["rows_read"] == len(GOOD) + len(BAD) == summary["rows_written"] + summary["rows_rejected"]
    assert (summary["rows_written"], summary["rows_rejected"], summary["decoded_with_pil"]) == (len(GOOD), len(BAD), 3)
    rejects = lance.dataset(summary["rejects"]).to_table().to_pylist()
    got = {Path(r["source"]).relative_to(root).as_posix(): r["reason"] for r in rejects}
    assert set(got) == set(BAD) and all(words in got[rel] for rel, words in BAD.items())
    assert all(r["position"] == "image" for r in rejects)
    written = lance.dataset(str(out)).to_table(columns=["source"]).column("source").to_pylist()
    assert {Path(s).relative_to(root).as_posix() for s in written} == set(GOOD)


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_failure_not_about_one_image_fails_the_job_in_one_line_without_the_writers_traceback(executor, request, tmp_path):
    """An unreadable path (here a file used as a folder) is not a property of the image: the job fails naming it,
    in the reader's own words, not wrapped in the Lance writer's error and Python traceback."""
    if executor == "ray":
        request.getfixturevalue("ray_local")
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    shutil.copy(photos(1)[0], tmp_path / "photo.jpg")
    (tmp_path / "m.csv").write_text("path,label\nphoto.jpg,0\nnotes.txt/x.jpg,1\n")
    cfg = load_config(ImagesConfig, None, input=str(tmp_path / "m.csv"), output=str(tmp_path / "o.lance"), size=16, executor=executor)
    with pytest.raises(PrepError) as err:
        run_decode_images(cfg)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message and "Lance" not in message, message
    assert f"{tmp_path / 'notes.txt' / 'x.jpg'}: cannot read (NotADirectoryError" in message, message
    assert not lance_tables.table_exists(cfg.output)


def test_existing_output_needs_overwrite(ray_local, tmp_path):
    root = tmp_path / "t" / "ants"
    root.mkdir(parents=True)
    for p in photos(2):
        shutil.copy(p, root / p.name)
    cfg = load_config(ImagesConfig, CONFIG, input=str(root.parent), output=str(tmp_path / "o.lance"), size=32)
    run_decode_images(cfg)
    with pytest.raises(PrepError, match="--overwrite"):
        run_decode_images(cfg)
    run_decode_images(cfg.model_copy(update={"overwrite": True}))
    assert lance.dataset(str(tmp_path / "o.lance")).count_rows() == 2


def test_encoded_bytes_and_original_blobs_survive_the_commit(ray_local, tmp_path):
    root = _copy_tree(photos(3), tmp_path / "t")
    out = tmp_path / "enc.lance"
    cfg = load_config(ImagesConfig, CONFIG, input=str(root), output=str(out), store_pixels=False, encode="webp", keep_original=True)
    summary = run_decode_images(cfg)
    ds = lance.dataset(str(out))
    assert "image" not in ds.schema.names and read_table_metadata(ds, 't').to_json()["encoded"]["format"] == "webp"
    sources = ds.to_table(columns=["source"]).column("source").to_pylist()
    blobs = ds.take_blobs("original", indices=[0, 2])
    assert [b.read() for b in blobs] == [Path(sources[0]).read_bytes(), Path(sources[2]).read_bytes()]
    assert summary["bytes_per_image"] < 224 * 224 * 3 / 2 + max(Path(s).stat().st_size for s in sources)


@pytest.mark.s3
def test_s3_input_and_output(ray_local, s3_bucket, tmp_path):
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    imgs = photos(4)
    for p in imgs:
        fs.pipe_file(f"{s3_bucket}/tree/{p.parent.name}/{p.name}", p.read_bytes())
    out = f"s3://{s3_bucket}/out/imgs.lance"
    cfg = load_config(ImagesConfig, CONFIG, input=f"s3://{s3_bucket}/tree", output=out, size=64)
    summary = run_decode_images(cfg)
    assert summary["rows_written"] == 4 and summary["source_kind"] == "imagefolder"
    ds = lance_tables.open_table(out, storage_options=__import__("prep.io.storage", fromlist=["x"]).lance_storage_options(out))
    local = run_decode_images(load_config(ImagesConfig, CONFIG, input=str(_copy_tree(imgs, tmp_path / "t")), output=str(tmp_path / "l.lance"), size=64))
    assert local["rows_written"] == 4
    a, b = ds.to_table(columns=["id", "image", "label"]), lance.dataset(str(tmp_path / "l.lance")).to_table(columns=["id", "image", "label"])
    assert a.equals(b)  # ids come from paths relative to the root: same tree, same ids, local or S3


def _copy_tree(imgs: list[Path], root: Path) -> Path:
    for p in imgs:
        (root / p.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(p, root / p.parent.name / p.name)
    return root


def test_cli_decode_images_prints_the_summary(ray_local, tmp_path, capsys):
    root = _copy_tree(photos(3), tmp_path / "t")
    rc = cli_main(["decode-images", "--config", str(CONFIG), "--input", str(root), "--output", str(tmp_path / "c.lance"), "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows_written"] == 3 and summary["bytes_per_image"] > 224 * 224 * 3 * 0.9
    rc = cli_main(["decode-images", "--config", str(CONFIG), "--input", str(tmp_path / "missing"), "--output", str(tmp_path / "d.lance")])
    assert rc == 2 and "input not found" in capsys.readouterr().err


@pytest.mark.ray_cluster
@pytest.mark.slow
def test_ray_job_submit_runs_the_pipeline_on_a_real_head(ray_head, tmp_path):
    root = _copy_tree(photos(4), tmp_path / "t")
    out = tmp_path / "submitted.lance"
    cmd = [
        str(Path(ray_head.env["PATH"].split(":")[0]) / "ray"), "job", "submit", "--address", ray_head.address, "--working-dir", str(REPO), "--",
        "python", "pipelines/decode_images.py", "--config", "configs/imagefolder.yaml", "--input", str(root), "--output", str(out), "--json",
    ]
    deadline = time.monotonic() + 60
    while True:  # a fresh head's job agent comes up a few seconds after `ray start` returns
        proc = subprocess.run(cmd, env=ray_head.env, cwd=REPO, capture_output=True, text=True, timeout=300)
        if proc.returncode == 0 or "No available agent" not in proc.stderr or time.monotonic() > deadline:
            break
        time.sleep(2)
    if "No available agent" in proc.stderr:
        pytest.fail(
            "the head's job agent never came up: another Ray on this host (e.g. the ray_local fixture) holds the "
            "default dashboard agent port 52365; the ray_head fixture needs --dashboard-agent-listen-port=<free port>"
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "succeeded" in proc.stdout + proc.stderr
    ds = lance.dataset(str(out))
    assert ds.count_rows() == 4 and read_table_metadata(ds, 't').to_json()["labels"] == sorted({p.parent.name for p in photos(4)})


def test_the_driver_imports_neither_torch_nor_torchvision(tmp_path):
    """Only the sandboxes decode: the driver's import of torchvision cost every job ~4 CPU-s (benchmarks/executors.py)."""
    import os
    import sys

    root = _copy_tree(photos(2), tmp_path / "t")
    code = ("import sys; from prep.cli import main; "
            f"rc = main(['decode-images', '--config', {str(CONFIG)!r}, '--input', {str(root)!r}, '--output', "
            f"{str(tmp_path / 'o.lance')!r}, '--executor', 'local', '-q']); "
            "print(rc, 'torch' in sys.modules, 'torchvision' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "0 False False"
    assert lance.dataset(str(tmp_path / "o.lance")).count_rows() == 2
