"""Chat templates rendered by transformers' own machinery, and proofs that a template only frames its messages.

:class:`ChatTemplate` renders through ``transformers.utils.chat_template_utils``: the same compiled,
sandboxed environment (``strftime_now``, ``raise_exception``, ``{% generation %}``...) and the same
``render_jinja_template`` that ``apply_chat_template`` calls, so a row renders exactly as transformers renders
it, whatever transformers adds later. (It costs each process that renders one import of transformers, about 1 s
of CPU; torch is not imported. A pickled copy compiles on its first render: a worker process whose rows all fill
frames proved in the driver never imports it.)

:meth:`ChatTemplate.frame_render` is for :class:`prep.prepare.text.formats.SFTFormatter`'s fast path: it renders
with :class:`Probe` contents in a guarded copy of that environment, so that a template which does anything with
a message's content but write it out (compare it, measure it, slice it, call a method on it, run it through a
filter other than ``string``, pass it to a call) raises :class:`ContentRead` instead of rendering. A render that
completes therefore depends on the contents only through where they are written.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

import jinja2.runtime
import jinja2.utils

__all__ = ["ChatTemplate", "ContentRead", "Probe", "Spans"]

Spans = list[tuple[int, int]]

# transformers' own test for "this template marks generation" (render_jinja_template)
_GENERATION_TAG = re.compile(r"\{\%-?\s*generation\s*-?\%\}")


class ContentRead(Exception):
    """The template looked at a message's content instead of only writing it out."""


class Probe(str):
    """A message content that a template may write out or join to other text, and nothing else.

    Everything else a template can do with a string (compare, hash, ``len``, ``in``, index, iterate,
    format, ``repr``, any method) raises :class:`ContentRead`. Truth is allowed and is ``True``: callers
    only take the fast path for non-empty contents.
    """

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_"):  # Python's own protocol lookups; templates cannot reach these (sandbox)
            return str.__getattribute__(self, name)
        raise ContentRead(f"content.{name}")

    def __str__(self) -> str:
        return self

    def __add__(self, other: Any) -> "Probe":
        if not isinstance(other, str):
            raise ContentRead("content +")
        return Probe(str.__add__(self, other))

    def __radd__(self, other: Any) -> "Probe":
        if not isinstance(other, str):
            raise ContentRead("+ content")
        return Probe(str.__add__(other, self))

    def __bool__(self) -> bool:
        return True

    def _read(self, *args: Any, **kwargs: Any) -> Any:
        raise ContentRead("content read")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __len__ = __contains__ = _read  # type: ignore[assignment]
    __getitem__ = __iter__ = __mod__ = __rmod__ = __mul__ = __rmul__ = __format__ = __repr__ = _read  # type: ignore[assignment]


# Filters and tests that read string data in C (json, re, int(), Markup copies) or take a content as an argument
# of another string's method: a probe anywhere in their arguments means the output may depend on the content.
_READING_FILTERS = frozenset({
    "tojson", "int", "float", "wordcount", "urlize", "striptags", "safe", "forceescape", "escape", "e", "replace",
    "join", "format", "urlencode", "xmlattr", "filesizeformat", "pprint",
})
_TYPE_TESTS = frozenset({"string", "defined", "undefined", "none", "mapping", "iterable", "sequence", "number",
                         "integer", "float", "boolean", "callable", "true", "false"})


def _holds_probe(value: Any, depth: int = 0) -> bool:
    if isinstance(value, Probe):
        return True
    if depth > 8:
        return True  # deep structures are not walked: assume the worst
    if isinstance(value, dict):
        return any(_holds_probe(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_probe(v, depth + 1) for v in value)
    return False


def _guard_filter(name: str, f: Callable) -> Callable:
    @functools.wraps(f)  # keeps jinja's pass_context/pass_eval_context marks
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if name in _READING_FILTERS and (_holds_probe(args) or _holds_probe(kwargs)):
            raise ContentRead(f"filter {name}")
        return f(*args, **kwargs)

    return guarded


def _guard_test(name: str, f: Callable) -> Callable:
    @functools.wraps(f)
    def guarded(value: Any, *args: Any, **kwargs: Any) -> Any:
        if _holds_probe(args) or _holds_probe(kwargs) or (isinstance(value, Probe) and name not in _TYPE_TESTS):
            raise ContentRead(f"test {name}")
        return f(str.__str__(value) if isinstance(value, Probe) else value, *args, **kwargs)

    return guarded


class ChatTemplate:
    """One chat template, rendered as transformers renders it.

    Args:
        template: the Jinja source.
        special_tokens: passed to the template as transformers passes ``special_tokens_map``.

    Raises:
        jinja2.TemplateSyntaxError: the template does not compile.
    """

    def __init__(self, template: str, special_tokens: dict[str, str]) -> None:
        self.source, self._specials = template, dict(special_tokens)
        self.marks_generation = bool(_GENERATION_TAG.search(template))
        self._compiled: Any = None
        self._guarded: Any = None
        self._machinery()  # a template that does not compile fails here, where it is made

    def __getstate__(self) -> dict[str, Any]:
        """The source only: a copy compiles on its first render, so a process that renders nothing (its rows all
        fill frames made elsewhere) never imports transformers (about 1 s of CPU per process)."""
        return {**self.__dict__, "_compiled": None, "_guarded": None}

    def _machinery(self) -> tuple[Any, Callable[..., Any]]:
        """transformers' compiled template (its cache: once per process) and its ``render_jinja_template``."""
        from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template

        if self._compiled is None:
            self._compiled = _compile_jinja_template(self.source)
        return self._compiled, render_jinja_template

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> tuple[str, Spans]:
        """The text ``apply_chat_template`` renders, and its ``{% generation %}`` spans (empty without marks)."""
        rendered, spans = self._machinery()[1](
            [messages], chat_template=self.source, return_assistant_tokens_mask=self.marks_generation,
            add_generation_prompt=add_generation_prompt, **self._specials,
        )
        return rendered[0], [tuple(s) for s in spans[0]] if self.marks_generation else []

    def frame_render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> tuple[str, Spans]:
        """:meth:`render` for messages whose contents are :class:`Probe` objects, in the guarded environment.

        Raises:
            ContentRead: the template did more with a content than write it out.
        """
        template = self._guarded_template()
        kwargs = dict(messages=messages, tools=None, documents=None, add_generation_prompt=add_generation_prompt,
                      **self._specials)
        blocks: list[str] = []
        spans: Spans = []
        with _tracker(template.environment).activate_tracker(blocks, spans):  # what transformers does for assistant masks
            for block in template.generate(**kwargs):
                blocks.append(block)
        return "".join(blocks), [tuple(s) for s in spans]

    def _guarded_template(self) -> Any:
        """The template compiled in an overlay of transformers' environment with every filter, test and call guarded."""
        if self._guarded is None:
            env = self._machinery()[0].environment.overlay()
            env.filters = {name: _guard_filter(name, f) for name, f in env.filters.items()}
            env.tests = {name: _guard_test(name, f) for name, f in env.tests.items()}
            sandbox_call = env.call

            def call(context: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
                if (_holds_probe(args) or _holds_probe(kwargs)) and not _stores_only(obj):
                    raise ContentRead(f"call {getattr(obj, '__name__', type(obj).__name__)}")
                return sandbox_call(context, obj, *args, **kwargs)

            env.call = call
            self._guarded = env.from_string(self.source)
        return self._guarded


def _tracker(env: Any) -> Any:
    """The overlay's own copy of transformers' ``{% generation %}`` extension (``AssistantTracker``).

    ``env.activate_tracker`` is the original environment's method (an overlay copies the environment's
    attributes), and transformers 5.20 keeps the tracking state on the extension instance, so only the
    copy's own method reaches the copy that renders (later releases share one ContextVar: either works).
    """
    return next(ext for ext in env.extensions.values() if hasattr(ext, "activate_tracker"))


def _stores_only(obj: Any) -> bool:
    """Callables that only keep references to their arguments: macros (guarded themselves), namespace, dict."""
    return (isinstance(obj, jinja2.runtime.Macro) or obj is dict or type(obj).__name__ == "TemplateDict"
            or (isinstance(obj, type) and issubclass(obj, jinja2.utils.Namespace)))
