"""Loading HuggingFace tokenizers, including one that works with no network.

``builtin:mistral-v3`` builds a fast tokenizer from the SentencePiece model that
the ``mistral-common`` package ships (Mistral v3, 32,768 ids) plus Mistral's chat
template, so the demo runs offline on a fresh machine. Anything else goes to
``transformers.AutoTokenizer`` (a hub id or a local directory).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from prep.errors import PrepError

__all__ = ["BUILTIN_MISTRAL_V3", "load_tokenizer", "tokenizer_identity"]

BUILTIN_MISTRAL_V3 = "builtin:mistral-v3"
_MISTRAL_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% elif m['role'] == 'assistant' %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)


def _builtin_mistral_v3_dir() -> Path:
    """A tokenizer directory built once from mistral-common's shipped model (cached)."""
    import mistral_common

    model = Path(mistral_common.__file__).parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    cache = Path(os.environ.get("PREP_CACHE", Path.home() / ".cache" / "prep")) / "tokenizers" / "mistral-v3"
    if (cache / "tokenizer.json").is_file():
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache.parent))
    shutil.copy(model, tmp / "tokenizer.model")
    (tmp / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "LlamaTokenizer",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "legacy": False,
                "chat_template": _MISTRAL_CHAT_TEMPLATE,
            }
        )
    )
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(str(tmp)).save_pretrained(str(tmp))  # tokenizer.json: later loads skip conversion
    try:
        os.rename(tmp, cache)
    except OSError:  # another process won the race; theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return cache


@functools.lru_cache(maxsize=4)
def load_tokenizer(spec: str) -> Any:
    """Loads (once per process) the tokenizer named by ``spec``.

    Args:
        spec: ``builtin:mistral-v3``, a local directory, or a hub id (needs network
            unless cached, e.g. ``Qwen/Qwen2.5-0.5B-Instruct``).

    Raises:
        PrepError: it cannot be loaded, or it is not a fast (Rust) tokenizer.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    path = str(_builtin_mistral_v3_dir()) if spec == BUILTIN_MISTRAL_V3 else spec
    if spec.startswith("builtin:") and spec != BUILTIN_MISTRAL_V3:
        raise PrepError(f"unknown builtin tokenizer {spec!r}; the builtin one is {BUILTIN_MISTRAL_V3!r}")
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as exc:
        hint = "" if os.path.isdir(path) else " (a hub id needs network access or the HF cache; use a local directory or builtin:mistral-v3 offline)"
        raise PrepError(f"cannot load tokenizer {spec!r}: {str(exc).splitlines()[0][:200]}{hint}") from None
    if getattr(tok, "backend_tokenizer", None) is None:
        raise PrepError(f"tokenizer {spec!r} has no fast (Rust) backend; prep needs one for batch encoding")
    return tok


def tokenizer_identity(spec: str) -> dict[str, Any]:
    """Name, content hash and the special ids a reader needs (pad falls back to eos)."""
    tok = load_tokenizer(spec)
    h = hashlib.sha256(tok.backend_tokenizer.to_str().encode())
    h.update((getattr(tok, "chat_template", None) or "").encode())
    eos = tok.eos_token_id
    return {
        "name": spec,
        "hash": h.hexdigest(),
        "vocab_size": len(tok),
        "bos_id": tok.bos_token_id,
        "eos_id": eos,
        "pad_id": tok.pad_token_id if tok.pad_token_id is not None else eos,
    }
