"""az:// end to end on a real Azure Blob endpoint (Azurite, started by the test session): prepare from
and to a container, materialize, read; the same rows, ids and batches as the same run on local disk."""

from __future__ import annotations

import fsspec
import lance
import pytest

import prep

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n" \
       "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n"

pytestmark = [pytest.mark.azure, pytest.mark.slow]


def chain(root: str) -> list[list[int]]:
    """pretokenize ROOT/in -> ROOT/docs.lance -> materialize ROOT/epochs -> the ids of every batch read."""
    summary = prep.pretokenize(input=f"{root}/in", output=f"{root}/docs.lance", tokenizer="builtin:mistral-v3",
                               format="pretrain", executor="local")
    assert summary["rows_read"] == 4 and summary["rows_rejected"] == 0
    prep.materialize_shuffle(table=f"{root}/docs.lance", output=f"{root}/epochs", epochs=1, splits=2, executor="local")
    return [[int(i) for i in batch.ids] for batch in prep.ReaderDataset(f"{root}/epochs", global_batch_size=2)]


def test_prepare_materialize_and_read_on_azure_equal_the_local_run(azure_container, tmp_path):
    fsspec.filesystem("az").pipe_file(f"{azure_container}/in/docs.txt", TEXT.encode())
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "docs.txt").write_text(TEXT)
    remote = f"az://{azure_container}"
    assert chain(remote) == chain(str(tmp_path))
    assert lance.dataset(f"{remote}/docs.lance").to_table().equals(lance.dataset(tmp_path / "docs.lance").to_table())


def test_abfss_names_the_same_blobs_as_az_for_inputs_and_tables(azure_container, tmp_path):
    fsspec.filesystem("az").pipe_file(f"{azure_container}/in/docs.txt", TEXT.encode())
    summary = prep.pretokenize(input=f"abfss://{azure_container}/in", output=f"abfss://{azure_container}/docs.lance",
                               tokenizer="builtin:mistral-v3", format="pretrain", executor="local")
    assert summary["rows_written"] == 4
    assert lance.dataset(f"az://{azure_container}/docs.lance").count_rows() == 4
