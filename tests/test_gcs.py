"""gs:// end to end on a Google Cloud Storage emulator (fake-gcs-server, started by the test session): inputs
read through gcsfs, tables and epochs read through Lance; the same rows, ids and batches as the run on local disk.

Lance cannot write to any GCS emulator on the package registries: its object store writes with the XML API
(``PUT /bucket/object``), which fake-gcs-server answers with 400 "invalid uploadType" (fake-gcs-server
issue 331, open) and gcp-storage-emulator cannot list (``GET /bucket?list-type=2``: 501). The strict xfail
below turns into a failure the day the emulator takes those writes, so the bucket-to-bucket run replaces it.
"""

from __future__ import annotations

import lance
import pytest

import prep
from prep.errors import PrepError
from prep.io import storage

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n" \
       "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n"

pytestmark = [pytest.mark.gcs, pytest.mark.slow]


def pretokenize(source: str, table: str) -> None:
    summary = prep.pretokenize(input=source, output=table, tokenizer="builtin:mistral-v3", format="pretrain",
                               executor="local")
    assert summary["rows_read"] == 4 and summary["rows_rejected"] == 0


def batches(epochs: str) -> list[list[int]]:
    return [[int(i) for i in batch.ids] for batch in prep.ReaderDataset(epochs, global_batch_size=2)]


def materialize(table: str, epochs: str) -> None:
    prep.materialize_shuffle(table=table, output=epochs, epochs=1, splits=2, executor="local")


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> tuple[str, list[list[int]]]:
    """The chain on local disk: (its root, the ids of every batch read)."""
    root = tmp_path_factory.mktemp("local")
    (root / "in").mkdir()
    (root / "in" / "docs.txt").write_text(TEXT)
    pretokenize(f"{root}/in", f"{root}/docs.lance")
    materialize(f"{root}/docs.lance", f"{root}/epochs")
    return str(root), batches(f"{root}/epochs")


def test_inputs_on_gcs_prepare_the_same_table_as_local_inputs(gcs_bucket, local_run, tmp_path):
    root, expected = local_run
    storage.filesystem(f"gs://{gcs_bucket}")[0].pipe_file(f"{gcs_bucket}/in/docs.txt", TEXT.encode())
    pretokenize(f"gs://{gcs_bucket}/in", f"{tmp_path}/from-gcs.lance")
    assert lance.dataset(f"{tmp_path}/from-gcs.lance").to_table().equals(lance.dataset(f"{root}/docs.lance").to_table())
    materialize(f"{tmp_path}/from-gcs.lance", f"{tmp_path}/from-gcs-epochs")
    assert batches(f"{tmp_path}/from-gcs-epochs") == expected


def test_a_table_and_epochs_on_gcs_materialize_and_read_as_on_local_disk(gcs_bucket, local_run, tmp_path):
    """Tables copied up (as ``gcloud storage cp -r`` would): materialize reads the table, the reader the epochs,
    both through Lance on gs://."""
    root, expected = local_run
    fs, _ = storage.filesystem(f"gs://{gcs_bucket}")
    fs.put(f"{root}/docs.lance", f"{gcs_bucket}/docs.lance", recursive=True)
    fs.put(f"{root}/epochs", f"{gcs_bucket}/epochs", recursive=True)
    remote = f"gs://{gcs_bucket}"
    assert lance.dataset(f"{remote}/docs.lance", storage_options=storage.lance_storage_options(remote)) \
        .to_table().equals(lance.dataset(f"{root}/docs.lance").to_table())
    materialize(f"{remote}/docs.lance", f"{tmp_path}/epochs-of-gcs-table")
    assert batches(f"{tmp_path}/epochs-of-gcs-table") == expected
    assert batches(f"{remote}/epochs") == expected


@pytest.mark.xfail(strict=True, raises=PrepError,
                   reason="fake-gcs-server answers the XML API PUT Lance writes with: 400 invalid uploadType")
def test_prepare_and_materialize_into_a_bucket(gcs_bucket, local_run):
    _, expected = local_run
    storage.filesystem(f"gs://{gcs_bucket}")[0].pipe_file(f"{gcs_bucket}/in/docs.txt", TEXT.encode())
    remote = f"gs://{gcs_bucket}"
    pretokenize(f"{remote}/in", f"{remote}/docs.lance")
    materialize(f"{remote}/docs.lance", f"{remote}/epochs")
    assert batches(f"{remote}/epochs") == expected
