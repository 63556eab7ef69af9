"""Resolving tokenizers: the files-only path gives exactly what transformers gives."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO, VENV_BIN
from prep.errors import PrepError
from prep.prepare.text import tokenizer as T


def via_transformers(spec: str, path: str) -> T.ResolvedTokenizer:
    tok = T.load_tokenizer(path)
    return T._resolved(spec, tok.backend_tokenizer.to_str(), getattr(tok, "chat_template", None) or None,
                       {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)},
                       tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, len(tok))


@pytest.mark.parametrize("which", ["shared", "builtin"])
def test_a_saved_tokenizer_folder_resolves_without_transformers_to_the_same_tokenizer(which, tokenizer_dir):
    spec = tokenizer_dir if which == "shared" else T.BUILTIN_MISTRAL_V3
    path = tokenizer_dir if which == "shared" else str(T._builtin_mistral_v3_dir())
    T.resolve_tokenizer.cache_clear()
    fast = T.resolve_tokenizer(spec)
    assert fast == via_transformers(spec, path)
    assert fast.chat_template and fast.eos_id == 2 and fast.vocab_size == 32768


def test_resolving_a_saved_folder_does_not_import_transformers(tokenizer_dir, tmp_path):
    code = (f"from prep.prepare.text.tokenizer import resolve_tokenizer; import sys; resolve_tokenizer({tokenizer_dir!r}); "
            "print('transformers' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def run_offline(args: list[str], tmp_path, offline: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home")}  # an empty HF cache
    env.pop("HF_HUB_OFFLINE", None)
    env.update({"HF_HUB_OFFLINE": "1"} if offline else {})
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "no-network-or-no-repo"])
def test_a_hub_id_that_cannot_be_fetched_fails_at_once_in_one_line(offline, tmp_path, shared_data):
    """Offline (or with no network: there is none where the tests run) a hub id fails in one line, with no retries."""
    proc = run_offline([str(VENV_BIN / "prep"), "pretokenize", "--config", str(REPO / "configs" / "gsm8k-sft.yaml"),
                        "--input", str(shared_data / "gsm8k" / "train.jsonl"), "--output", str(tmp_path / "o.lance"),
                        "--tokenizer", "prep-tests/no-such-tokenizer"], tmp_path, offline)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    why = "it is not in the HF cache and HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached or has no such repo"
    assert f"cannot load tokenizer 'prep-tests/no-such-tokenizer': {why}" in proc.stderr


def test_a_hub_id_is_looked_up_without_importing_transformers(tmp_path):
    code = ("import sys\nfrom prep.prepare.text.tokenizer import resolve_tokenizer\nfrom prep.errors import PrepError\n"
            "try:\n    resolve_tokenizer('prep-tests/no-such-tokenizer')\nexcept PrepError:\n    pass\n"
            "print('transformers' in sys.modules, 'torch' in sys.modules)")
    assert run_offline([sys.executable, "-c", code], tmp_path).stdout.split() == ["False", "False"]


@pytest.mark.parametrize("spec", ["./no/such/folder", "no such tokenizer"])
def test_a_spec_that_is_neither_a_folder_nor_a_hub_id_says_so(spec):
    with pytest.raises(PrepError, match="is neither a directory nor a hub id"):
        T.resolve_tokenizer(spec)


def test_a_third_party_logger_with_its_own_handler_prints_each_line_once():
    """huggingface_hub's logger has its own stderr handler and propagates: the root handler must not repeat it."""
    code = ("from prep.runtime import logs\nlogs.configure()\nfrom huggingface_hub.utils import logging as hl\n"
            "hl.get_logger('huggingface_hub.utils._http').warning('Retrying in 1s [Retry 1/5].')\n"
            "import logging\nlogging.getLogger('prep.x').warning('ours')\n"
            "import urllib3\nlogging.getLogger('urllib3.x').error('behind a NullHandler')")  # urllib3 adds one
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    assert err.count("Retrying in 1s") == 1 and err.count("ours") == 1 and err.count("behind a NullHandler") == 1, err


def test_a_tokenizer_file_that_truncates_or_pads_does_neither_in_prep(tokenizer_dir, tmp_path):
    """transformers switches a file's truncation and padding off unless asked; a silent cut would lose tokens uncounted."""
    import dataclasses
    import json

    config = json.loads((T.Path(tokenizer_dir) / "tokenizer.json").read_text())
    config["truncation"] = {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0}
    config["padding"] = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                         "pad_type_id": 0, "pad_token": "<unk>"}
    tok = dataclasses.replace(T.resolve_tokenizer(tokenizer_dir), backend_json=json.dumps(config), hash="truncating")
    ids = tok.backend().encode("one two three four five six seven", add_special_tokens=False).ids
    assert len(ids) == len(T.load_tokenizer(tokenizer_dir)("one two three four five six seven", add_special_tokens=False)["input_ids"]) > 4
