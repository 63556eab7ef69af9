"""Turning source rows into text segments, each trained on or not.

A row becomes a list of ``(text, trainable)`` segments; the row's text is their
concatenation, tokenized at once (:func:`prep.prepare.text.tokens.encode_segments`). SFT
rows (Alpaca instruction/input/output, GSM8K-style question/answer, or a ``messages``
list) are rendered with the tokenizer's chat template, exactly as transformers'
``apply_chat_template`` renders them, or with format strings from the config.
Pretraining rows are one trainable segment. Rows that cannot be formatted become
rejects with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from prep.errors import PrepError
from prep.prepare import faults
from prep.prepare.text.chat_template import ChatTemplate, Probe, Spans
from prep.prepare.text.tokenizer import ResolvedTokenizer

__all__ = ["Segments", "RowError", "SFTFormatter", "TextFormatter", "ROLES"]

SFTSchema = Literal["auto", "alpaca", "qa", "messages"]

# The roles a messages row may use; anything else (e.g. ShareGPT's "human"/"gpt") is a reject, not a turn a
# template might skip while the rest of the row is trained on.
ROLES = ("system", "developer", "user", "assistant", "tool")


class RowError(ValueError):
    """A row that cannot be formatted; the message is the reject reason."""


@dataclass
class Segments:
    """Segments of many rows, flat: row ``i`` owns ``counts[i]`` consecutive entries."""

    texts: list[str] = field(default_factory=list)
    trainable: list[bool] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)

    def add_row(self, segments: list[tuple[str, bool]]) -> None:
        for text, train in segments:
            self.texts.append(text)
            self.trainable.append(train)
        self.counts.append(len(segments))

    def rows(self) -> tuple[list[str], list[Spans]]:
        """Each row's text and its trainable character spans (adjacent trainable segments merged)."""
        texts, spans, k = [], [], 0
        for n in self.counts:
            parts, row_spans, at = [], [], 0
            for text, train in zip(self.texts[k:k + n], self.trainable[k:k + n]):
                if train and text:
                    if row_spans and row_spans[-1][1] == at:
                        row_spans[-1] = (row_spans[-1][0], at + len(text))
                    else:
                        row_spans.append((at, at + len(text)))
                parts.append(text)
                at += len(text)
            texts.append("".join(parts))
            spans.append(row_spans)
            k += n
        return texts, spans


def _field(row: dict[str, Any], name: str, *, required: bool = True) -> str:
    value = row.get(name)
    if value is None:
        if required:
            raise RowError(f"missing field '{name}'" if name not in row else f"field '{name}' is null")
        return ""
    if not isinstance(value, str):
        raise RowError(f"field '{name}' must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise RowError(f"field '{name}' is empty")
    return value


def _detect(row: dict[str, Any], schema: SFTSchema) -> SFTSchema:
    if schema != "auto":
        return schema
    if "messages" in row:
        return "messages"
    if "instruction" in row or "output" in row:
        return "alpaca"
    if "question" in row or "answer" in row:
        return "qa"
    raise RowError(f"cannot tell the SFT schema from fields {sorted(row)[:8]}: expected messages, instruction/output or question/answer")


def _to_messages(row: dict[str, Any], schema: SFTSchema, messages_column: str) -> list[dict[str, Any]]:
    kind = _detect(row, schema)
    if kind == "qa":
        return [{"role": "user", "content": _field(row, "question")}, {"role": "assistant", "content": _field(row, "answer")}]
    if kind == "alpaca":
        instruction, extra = _field(row, "instruction"), _field(row, "input", required=False)
        user = f"{instruction}\n\n{extra}" if extra.strip() else instruction
        return [{"role": "user", "content": user}, {"role": "assistant", "content": _field(row, "output")}]
    messages = row.get(messages_column)
    if not isinstance(messages, list) or not messages:
        raise RowError(f"field '{messages_column}' must be a non-empty list of {{role, content}} objects")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise RowError(f"{messages_column}[{i}] must be an object with string 'role' and 'content'")
        if m["role"] not in ROLES:
            raise RowError(f"{messages_column}[{i}] has role {m['role']!r}; the roles are {', '.join(ROLES)}")
        if m["role"] == "assistant" and not m["content"].strip() and {k for k, v in m.items() if v is not None} == {"role", "content"}:
            # as an empty 'answer'/'output' is: the turn would train only the template's end-of-turn
            raise RowError(f"{messages_column}[{i}] is an empty assistant turn (content {m['content']!r}), nothing to train on")
    if not any(m["role"] == "assistant" for m in messages):
        raise RowError(f"field '{messages_column}' has no assistant turn to train on")
    # as apply_chat_template does: keys whose value is null are dropped (templates test for a key, not for None)
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


@dataclass(frozen=True)
class _Frame:
    """What a template renders for one sequence of roles, with a slot where each message's content goes."""

    pieces: tuple[tuple[str | int, bool], ...]  # literal text or the index of a message, and trainable

    def fill(self, contents: list[str]) -> list[tuple[str, bool]]:
        return [(contents[p] if type(p) is int else p, train) for p, train in self.pieces]  # type: ignore[index, misc]

    @staticmethod
    def cut(text: str, spans: Spans, marks: list[str]) -> "_Frame | None":
        """The frame of ``text`` rendered from contents ``marks``; None unless each mark is written exactly once."""
        if any(text.count(m) != 1 for m in marks):
            return None
        slots = {text.index(m): (j, text.index(m) + len(m)) for j, m in enumerate(marks)}
        cuts = sorted({0, len(text)} | {e for s, e in spans} | {s for s, e in spans}
                      | set(slots) | {end for _, end in slots.values()})
        pieces, slot_end = [], -1
        for a, b in zip(cuts, cuts[1:]):
            if a < slot_end:
                return None  # a trainable span starts or ends inside a content
            train = any(s <= a and b <= e for s, e in spans)
            if a in slots:
                j, slot_end = slots[a]
                if b != slot_end:
                    return None
                pieces.append((j, train))
            else:
                pieces.append((text[a:b], train))
        return _Frame(tuple(pieces))


def _normal(segments: list[tuple[str, bool]]) -> tuple[str, Spans]:
    segs = Segments()
    segs.add_row(segments)
    texts, spans = segs.rows()
    return texts[0], spans[0]


# Contents that reveal a template that escapes, trims, pads or measures what it writes; cycled over the messages.
_CHECK_CONTENTS = ("  spaced  ", "line\n\nbreak\n", "quote \" \\ ' <&> \t", "{{ x }} {% y %} %s {0}",
                   "\u00fc \U0001f600 \u00a0", "</think> [INST] <|im_end|> </s>")


class SFTFormatter:
    """Renders SFT rows into prompt (masked) and response (trained) segments.

    With a chat template, the row's text is what ``apply_chat_template(messages)`` renders. Where the
    template marks ``{% generation %}``, exactly the marked text is trained (as transformers'
    ``return_assistant_tokens_mask``). Otherwise each assistant turn is trained from the end of the
    generation prompt before it through what the template writes after the message (its end-of-turn);
    that needs the template to render a conversation as a prefix of its continuation, and rows of a
    template that does not are rejected with that reason (use format strings or generation marks).

    Fast path: per sequence of roles, the template is rendered once with :class:`Probe` contents; if it
    only writes the contents out (proved by the guarded render, then checked against the real render with
    contents that reveal escaping or trimming), rows with that sequence of roles are filled into that
    frame instead of rendered. Rows with other keys than role/content, or an empty content, are rendered.
    The job's driver proves the single-turn frame (:meth:`prove_frames`) and sends the formatter to its workers.

    Args:
        tokenizer: the resolved tokenizer (for its chat template and special tokens).
        schema: which row layout to expect; ``auto`` tells per row.
        messages_column: the column holding a messages list.
        prompt_template, response_template: format strings over the row's fields
            (after Alpaca/QA mapping: ``{prompt}`` and ``{response}``), used instead
            of the chat template when given; the EOS token is appended to the response.

    Raises:
        PrepError: no chat template (and no format strings), or a template that does not compile.
    """

    _MAX_FRAMES = 512  # distinct role sequences remembered per formatter

    def __init__(
        self,
        tokenizer: ResolvedTokenizer,
        *,
        schema: SFTSchema = "auto",
        messages_column: str = "messages",
        prompt_template: str | None = None,
        response_template: str | None = None,
    ) -> None:
        self._schema, self._messages_column = schema, messages_column
        self._prompt_template, self._response_template = prompt_template, response_template
        self._eos = tokenizer.special_tokens.get("eos_token", "")
        self._frames: dict[tuple[str, ...], _Frame | str | None] = {}
        if prompt_template is None:
            if not tokenizer.chat_template:
                raise PrepError("the tokenizer has no chat template; set sft.prompt_template and sft.response_template in the config")
            try:
                self._template = ChatTemplate(tokenizer.chat_template, tokenizer.special_tokens)
            except Exception as exc:  # jinja2.TemplateSyntaxError
                raise PrepError(f"the chat template of {tokenizer.name!r} does not compile: {exc}") from None

    def __call__(self, row: Any) -> list[tuple[str, bool]]:
        if not isinstance(row, dict):
            raise RowError(f"expected an object with SFT fields, got {type(row).__name__}")
        messages = _to_messages(row, self._schema, self._messages_column)
        if faults.active():  # tests only: an exception from inside the template stage
            faults.maybe_raise("template", "\n".join(m["content"] for m in messages))
        if self._prompt_template is not None:
            return self._format_strings(messages)
        frame = self._frame(tuple(m["role"] for m in messages))
        if isinstance(frame, str):
            raise RowError(frame)
        if frame is not None and all(len(m) == 2 and m["content"] for m in messages):
            return frame.fill([m["content"] for m in messages])
        return self._chat_segments(messages)

    def prove_frames(self, role_sequences: list[tuple[str, ...]]) -> None:
        """Builds the frames of these role sequences now, so that copies of this formatter (pickled to workers)
        fill them without rendering, or importing transformers, at all."""
        if self._prompt_template is None:
            for roles in role_sequences:
                self._frame(roles)

    def _frame(self, roles: tuple[str, ...]) -> _Frame | str | None:
        """The frame for this sequence of roles (cached), a reject reason for every such row, or None (render each)."""
        if roles not in self._frames:
            frame = self._build_frame(roles)
            if len(self._frames) >= self._MAX_FRAMES:
                return frame
            self._frames[roles] = frame
        return self._frames[roles]

    def _build_frame(self, roles: tuple[str, ...]) -> _Frame | str | None:
        cores = [f"\ue001{j}\ue002" for j in range(len(roles))]  # a template that trims or slices keeps the core
        marks = [f"\ue000{core}\ue003" for core in cores]
        try:  # which messages does the template write at all? (the real render, plain contents)
            text = "".join(t for t, _ in self._chat_segments([{"role": r, "content": c} for r, c in zip(roles, marks)]))
        except RowError:
            return None  # the template refuses these roles (raise_exception): each row gets its own reason
        for j, core in enumerate(cores):
            if core not in text:
                return (f"the chat template renders nothing for message {j} (role {roles[j]!r}), so the row would be "
                        "trained without it; drop such messages or use a template that renders them")
        try:
            probes = [{"role": r, "content": Probe(c)} for r, c in zip(roles, marks)]
            frame = _Frame.cut(*self._text_spans(probes, self._template.frame_render), marks)
        except Exception:  # ContentRead, or anything the guards made the template raise: render each row
            return None
        for k in range(2 if frame else 0):
            contents = [_CHECK_CONTENTS[(j + k) % len(_CHECK_CONTENTS)] for j in range(len(roles))]
            try:
                rendered = self._chat_segments([{"role": r, "content": c} for r, c in zip(roles, contents)])
            except RowError:
                return None
            if _normal(frame.fill(contents)) != _normal(rendered):  # type: ignore[union-attr]
                return None
        return frame

    def _format_strings(self, messages: list[dict[str, str]]) -> list[tuple[str, bool]]:
        if len(messages) != 2:
            raise RowError("format-string templates take one prompt and one response; use the chat template for multi-turn rows")
        prompt = self._prompt_template.format(prompt=messages[0]["content"])  # type: ignore[union-attr]
        response = (self._response_template or "{response}").format(response=messages[1]["content"]) + self._eos
        return [(prompt, False), (response, True)]

    def _chat_segments(self, messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
        """The row rendered by transformers, cut into segments at its trainable spans."""
        try:
            text, spans = self._text_spans(messages, self._template.render)
        except RowError:
            raise
        except Exception as exc:  # the template itself raised (e.g. role alternation rules)
            raise RowError(f"chat template failed: {exc}") from None
        segments, at = [], 0
        for s, e in spans:
            segments += [(text[at:s], False), (text[s:e], True)]
            at = e
        segments.append((text[at:], False))
        return [(t, train) for t, train in segments if t]

    def _text_spans(self, messages: list[dict[str, Any]], render: Callable[..., tuple[str, Spans]]) -> tuple[str, Spans]:
        """The conversation's text and trainable spans: the template's generation marks, or each assistant turn."""
        if self._template.marks_generation:
            text, spans = render(messages, False)
            spans = [(s, e) for s, e in spans if e > s]
            if any(e > s2 for (_, e), (s2, _) in zip(spans, spans[1:])):
                raise RowError("the chat template's {% generation %} blocks nest or overlap")
            return text, spans
        spans, done = [], ""
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            prompt, _ = render(messages[:i], True)
            full, _ = render(messages[: i + 1], False)
            if not prompt.startswith(done) or not full.startswith(prompt):
                raise RowError(_NOT_PREFIX)
            spans.append((len(prompt), len(full)))
            done = full
        text, _ = render(messages, False)
        if not text.startswith(done):
            raise RowError(_NOT_PREFIX)
        return text, spans


_NOT_PREFIX = ("the chat template does not render turns as prefixes of the conversation; mark the trained text with "
               "{% generation %} in the template, or set sft.prompt_template/response_template")


class TextFormatter:
    """Pretraining rows: the whole text is one trainable segment (EOS is added after tokenizing).

    Args:
        text_column: the field holding the document for structured rows (plain text rows are used as is).
    """

    def __init__(self, text_column: str = "text") -> None:
        self._column = text_column

    def __call__(self, row: Any) -> list[tuple[str, bool]]:
        text = row if isinstance(row, str) else _field(row, self._column) if isinstance(row, dict) else None
        if text is None:
            raise RowError(f"expected text or an object with '{self._column}', got {type(row).__name__}")
        if not text.strip():
            raise RowError("empty text")
        return [(text, True)]
