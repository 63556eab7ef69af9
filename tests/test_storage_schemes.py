"""URI schemes: an unknown one is a one-line error naming the schemes prep supports (never a local path);
gs:// and az:// without their extra name the extra to install; hf:// goes through huggingface_hub."""

from __future__ import annotations

import json
import sys

import pytest

from prep.cli import main
from prep.errors import PrepError
from prep.io import storage

UNKNOWN = "s3a://bucket/x.lance"


@pytest.mark.parametrize("argv", [
    ["inspect", UNKNOWN],
    ["verify", UNKNOWN],
    ["read", UNKNOWN, "--global-batch-size", "4"],
    ["materialize-shuffle", "--table", UNKNOWN, "--output", "out", "--epochs", "1"],
    ["materialize-shuffle", "--table", "t.lance", "--output", "s3a://bucket/out", "--epochs", "1"],
    ["pretokenize", "--input", "s3a://bucket/in.jsonl", "--output", "o.lance", "--tokenizer", "builtin:mistral-v3",
     "--format", "pretrain"],
    ["decode-images", "--input", "s3a://bucket/photos", "--output", "o.lance"],
], ids=lambda argv: "-".join(a for a in argv if a.startswith("-") is False)[:40])
def test_an_unknown_scheme_is_a_one_line_error_naming_the_supported_ones(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown scheme 's3a://'; prep supports local paths, file://, s3://, gs://" in err, err
    assert not list(tmp_path.iterdir()), "nothing may be written for an unusable URI"


@pytest.mark.parametrize("uri, module, extra", [("gs://bucket/t.lance", "gcsfs", "gcs"), ("az://box/t.lance", "adlfs", "azure"),
                                                ("abfss://box@acct.dfs.core.windows.net/t.lance", "adlfs", "azure")])
def test_a_scheme_without_its_extra_names_the_extra(uri, module, extra, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    for protocol in ("gs", "gcs", "az", "abfs", "abfss"):
        monkeypatch.delitem(sys.modules["fsspec.registry"]._registry, protocol, raising=False)
    with pytest.raises(PrepError, match=rf"^{uri.split('://')[0]}://\S* ?.*needs the {module} package: pip install 'prep-lance\[{extra}\]'$"):
        storage.resolve(uri)


@pytest.mark.parametrize("uri, instead", [("gcs://bucket/t.lance", "gs://"), ("abfs://container/t.lance", "abfss://")])
def test_spellings_lance_cannot_open_are_unknown_schemes_naming_the_one_it_can(uri, instead):
    scheme = uri.split("//")[0] + "//"
    with pytest.raises(PrepError, match=rf"^{uri}: unknown scheme '{scheme}'; prep supports .*{instead}"):
        storage.scheme(uri)


def test_storage_emulator_host_points_gcsfs_and_lance_at_the_same_emulator(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:4443")  # host:port without a scheme is http
    r = storage.resolve("gs://bucket/t.lance")
    assert (r.fs.base, r.fs.credentials.token, r.path) == ("http://127.0.0.1:4443/storage/v1/", "anon", "bucket/t.lance")
    assert r.lance_options["allow_http"] == "true"
    key = json.loads(r.lance_options["google_service_account_key"])
    assert (key["gcs_base_url"], key["disable_oauth"], key["private_key"]) == ("http://127.0.0.1:4443", True, "")


def test_hf_inputs_go_through_huggingface_hubs_filesystem():
    from huggingface_hub import HfFileSystem

    fs, path = storage.filesystem("hf://datasets/openai/gsm8k/main/train.parquet")
    assert isinstance(fs, HfFileSystem) and path == "datasets/openai/gsm8k/main/train.parquet"
    assert storage.with_scheme("hf://datasets/openai/gsm8k", path) == "hf://datasets/openai/gsm8k/main/train.parquet"
