"""Resolving tokenizers: the files-only path gives exactly what transformers gives."""

from __future__ import annotations

import sys

import pytest

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
    import subprocess

    code = (f"from prep.prepare.text.tokenizer import resolve_tokenizer; import sys; resolve_tokenizer({tokenizer_dir!r}); "
            "print('transformers' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
