"""Compiling HuggingFace chat templates without importing transformers.

The environment matches what transformers uses for ``apply_chat_template``
(sandboxed Jinja, ``trim_blocks``/``lstrip_blocks``, loop controls, ``tojson``,
``raise_exception``), so workers render exactly what the tokenizer would.
"""

from __future__ import annotations

import functools
import json
from typing import Any

__all__ = ["compile_chat_template"]


def _raise_exception(message: str) -> None:
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.lru_cache(maxsize=8)
def compile_chat_template(template: str) -> Any:
    """A compiled ``jinja2.Template`` for ``template`` (cached)."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(template)
