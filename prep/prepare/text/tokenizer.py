"""Loading HuggingFace tokenizers, including one that works with no network.

``builtin:mistral-v3`` builds a fast tokenizer from the SentencePiece model that
the ``mistral-common`` package ships (Mistral v3, 32,768 ids) plus Mistral's chat
template, so the demo runs offline on a fresh machine. A saved tokenizer folder is
read with ``tokenizers`` alone; a folder without ``tokenizer.json`` goes to
``transformers.AutoTokenizer``. A hub id is first fetched into the HF cache with
``huggingface_hub`` (the tokenizer's files only) and then read as that folder; with
``HF_HUB_OFFLINE=1`` only the cache is looked at, so a missing one fails at once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prep.errors import PrepError

__all__ = ["BUILTIN_MISTRAL_V3", "ResolvedTokenizer", "load_tokenizer", "resolve_tokenizer"]

BUILTIN_MISTRAL_V3 = "builtin:mistral-v3"
_MISTRAL_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% elif m['role'] == 'assistant' %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)


def _builtin_mistral_v3_dir() -> Path:
    """A tokenizer directory built once from mistral-common's shipped model (cached).

    Raises:
        PrepError: mistral-common (the ``mistral`` extra) is not installed.
    """
    try:
        import mistral_common
    except ImportError:
        raise PrepError(f"{BUILTIN_MISTRAL_V3} needs the mistral-common package: pip install 'prep-lance[mistral]' "
                        "(or give a tokenizer directory or hub id)") from None

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
    path = str(_local_dir(spec))
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as exc:
        raise PrepError(f"cannot load tokenizer {spec!r}: {str(exc).splitlines()[0][:200]}") from None
    if getattr(tok, "backend_tokenizer", None) is None:
        raise PrepError(f"tokenizer {spec!r} has no fast (Rust) backend; prep needs one for batch encoding")
    return tok


@dataclass(frozen=True)
class ResolvedTokenizer:
    """A tokenizer resolved once by the driver, in the form workers need.

    Workers rebuild the Rust tokenizer from ``backend_json`` (``tokenizers`` only):
    they never import transformers, never reach a hub, and provably use the exact
    tokenizer the table metadata names (``hash`` covers vocabulary, rules and chat template).
    """

    name: str
    backend_json: str
    chat_template: str | None
    special_tokens: dict[str, str]
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    vocab_size: int
    hash: str

    def backend(self) -> Any:
        """The ``tokenizers.Tokenizer`` (built once per process), without the truncation or padding its file may set.

        transformers switches those off for every call that does not ask for them (``apply_chat_template``
        included); prep cuts rows by its own ``max_length`` policy, which counts what it cuts.
        """
        if self.hash not in _BACKENDS:
            import tokenizers

            backend = tokenizers.Tokenizer.from_str(self.backend_json)
            backend.no_truncation()
            backend.no_padding()
            _BACKENDS[self.hash] = backend
        return _BACKENDS[self.hash]

    def identity(self) -> dict[str, Any]:
        """What the table metadata records about the tokenizer."""
        return {
            "name": self.name, "hash": self.hash, "vocab_size": self.vocab_size,
            "bos_id": self.bos_id, "eos_id": self.eos_id, "pad_id": self.pad_id,
        }


_BACKENDS: dict[str, Any] = {}


_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@functools.lru_cache(maxsize=4)
def resolve_tokenizer(spec: str) -> ResolvedTokenizer:
    """Captures what workers need of ``spec``, once, in the driver.

    A folder with ``tokenizer.json`` (local, ``builtin:mistral-v3`` after its first build,
    or a hub id's snapshot in the HF cache) is read with ``tokenizers`` alone: importing
    transformers (and the torch it pulls in) costs seconds of every job's start. Anything
    else goes through transformers. Both give the same :class:`ResolvedTokenizer` (tested). The pad id
    falls back to the EOS id when the tokenizer has no pad token.
    """
    from_files = _from_files(spec, _local_dir(spec))
    if from_files is not None:
        return from_files
    tok = load_tokenizer(spec)
    return _resolved(
        spec, tok.backend_tokenizer.to_str(), getattr(tok, "chat_template", None) or None,
        {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)},
        tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, len(tok),
    )


# What a tokenizer needs of a hub repo (AutoTokenizer reads config.json to pick the class of a slow one).
_TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                    "chat_template.jinja", "chat_template.json", "additional_chat_templates/*", "tokenizer.model",
                    "*.tiktoken", "vocab.json", "vocab.txt", "merges.txt", "config.json"]


def _local_dir(spec: str) -> Path:
    """The folder holding the tokenizer named by ``spec``: the builtin one, a local folder, or a hub snapshot."""
    if spec == BUILTIN_MISTRAL_V3:
        return _builtin_mistral_v3_dir()
    if spec.startswith("builtin:"):
        raise PrepError(f"unknown builtin tokenizer {spec!r}; the builtin one is {BUILTIN_MISTRAL_V3!r}")
    if Path(spec).is_dir():
        return Path(spec)
    import huggingface_hub
    from huggingface_hub.errors import HFValidationError

    try:
        return Path(huggingface_hub.snapshot_download(spec, allow_patterns=_TOKENIZER_FILES))
    except HFValidationError:
        raise PrepError(f"tokenizer {spec!r} is neither a directory nor a hub id (like Qwen/Qwen2.5-0.5B-Instruct)") from None
    except Exception as exc:
        why = ("it is not in the HF cache and HF_HUB_OFFLINE is set" if huggingface_hub.constants.is_offline_mode()
               else f"the hub cannot be reached or has no such repo ({type(exc).__name__}), and it is not in the HF cache")
        raise PrepError(f"cannot load tokenizer {spec!r}: {why}; use a local directory or builtin:mistral-v3 offline") from None


def _from_files(spec: str, path: Path) -> ResolvedTokenizer | None:
    """The tokenizer of a saved HF folder from its files; None when it needs transformers."""
    files = path / "tokenizer.json", path / "tokenizer_config.json"
    if not all(f.is_file() for f in files):
        return None
    import tokenizers

    config = json.loads(files[1].read_text())
    template_file = path / "chat_template.jinja"
    template = template_file.read_text() if template_file.is_file() else config.get("chat_template")
    if template is not None and not isinstance(template, str):
        return None  # named templates: transformers' rules pick one
    backend = tokenizers.Tokenizer.from_file(str(files[0]))
    special = {}
    for key in _SPECIAL_KEYS:
        value = config.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            special[key] = value
    ids = {key: backend.token_to_id(value) for key, value in special.items()}
    return _resolved(spec, backend.to_str(), template or None, special, ids.get("bos_token"), ids.get("eos_token"),
                     ids.get("pad_token"), backend.get_vocab_size(with_added_tokens=True))


def _resolved(spec: str, backend_json: str, template: str | None, special: dict[str, str], bos: int | None,
              eos: int | None, pad: int | None, vocab_size: int) -> ResolvedTokenizer:
    h = hashlib.sha256(backend_json.encode())
    h.update((template or "").encode())
    return ResolvedTokenizer(
        name=spec, backend_json=backend_json, chat_template=template, special_tokens=special, bos_id=bos, eos_id=eos,
        pad_id=pad if pad is not None else eos, vocab_size=vocab_size, hash=h.hexdigest(),
    )
