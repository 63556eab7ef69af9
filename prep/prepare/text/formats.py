"""Turning source rows into text segments, each trained on or not.

A row becomes a list of ``(text, trainable)`` segments. SFT rows (Alpaca
instruction/input/output, GSM8K-style question/answer, or a ``messages`` list)
are rendered with the tokenizer's chat template or with format strings from the
config; only assistant/response segments are trainable. Pretraining rows are one
trainable segment. Rows that cannot be formatted become rejects with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from prep.errors import PrepError
from prep.prepare import faults
from prep.prepare.text.chat_template import compile_chat_template
from prep.prepare.text.tokenizer import ResolvedTokenizer

__all__ = ["Segments", "RowError", "SFTFormatter", "TextFormatter"]

SFTSchema = Literal["auto", "alpaca", "qa", "messages"]


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


def _to_messages(row: dict[str, Any], schema: SFTSchema, messages_column: str) -> list[dict[str, str]]:
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
    if not any(m["role"] == "assistant" for m in messages):
        raise RowError(f"field '{messages_column}' has no assistant turn to train on")
    return messages


class SFTFormatter:
    """Renders SFT rows into prompt (masked) and response (trained) segments.

    With a chat template, the text of a conversation is rendered turn by turn:
    the prompt before each assistant turn (with the generation prompt) is masked,
    the assistant's text through the template's end-of-turn is trained. The
    template must render a conversation as a prefix of its continuation; if it does
    not, the row is rejected with that reason (use format strings instead).

    Args:
        tokenizer: the resolved tokenizer (for its chat template and special tokens).
        schema: which row layout to expect; ``auto`` tells per row.
        messages_column: the column holding a messages list.
        prompt_template, response_template: format strings over the row's fields
            (after Alpaca/QA mapping: ``{prompt}`` and ``{response}``), used instead
            of the chat template when given; the EOS token is appended to the response.
    """

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
        self._frame = None
        if prompt_template is None:
            if not tokenizer.chat_template:
                raise PrepError("the tokenizer has no chat template; set sft.prompt_template and sft.response_template in the config")
            template = compile_chat_template(tokenizer.chat_template)
            specials = tokenizer.special_tokens
            self._render: Callable[..., str] = lambda msgs, gen: template.render(messages=msgs, add_generation_prompt=gen, **specials)
            self._frame = self._single_turn_frame()

    def __call__(self, row: Any) -> list[tuple[str, bool]]:
        if not isinstance(row, dict):
            raise RowError(f"expected an object with SFT fields, got {type(row).__name__}")
        messages = _to_messages(row, self._schema, self._messages_column)
        if faults.active():  # tests only: an exception from inside the template stage
            faults.maybe_raise("template", "\n".join(m["content"] for m in messages))
        if self._prompt_template is not None:
            return self._format_strings(messages)
        if self._frame and len(messages) == 2 and messages[0]["role"] == "user" and messages[1]["role"] == "assistant":
            f = self._frame
            return [(f[0] + messages[0]["content"] + f[1], False), (f[2] + messages[1]["content"] + f[3], True)]
        return self._chat_segments(messages)

    def _single_turn_frame(self) -> tuple[str, str, str, str] | None:
        """The template's text around one user and one assistant message, if it is a pure frame.

        Most templates only wrap the contents; then a single-turn row is four string
        concatenations instead of two Jinja renders. Probe contents (whitespace,
        braces, newlines) must render identically both ways, otherwise rows keep
        going through Jinja.
        """
        u, a = "\x00user\x00", "\x00assistant\x00"
        try:
            prompt = self._render([{"role": "user", "content": u}], True)
            full = self._render([{"role": "user", "content": u}, {"role": "assistant", "content": a}], False)
        except Exception:
            return None
        if prompt.count(u) != 1 or not full.startswith(prompt) or full[len(prompt):].count(a) != 1:
            return None
        before_user, after_user = prompt.split(u)
        before_answer, after_answer = full[len(prompt):].split(a)
        frame = (before_user, after_user, before_answer, after_answer)
        for user, answer in ((" spaced ", "line\n"), ("{{ x }} {% y %}", "%s {0}"), ("a\n\nb", " lead")):
            msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
            if self._chat_segments(msgs) != [(frame[0] + user + frame[1], False), (frame[2] + answer + frame[3], True)]:
                return None
        return frame

    def _format_strings(self, messages: list[dict[str, str]]) -> list[tuple[str, bool]]:
        if len(messages) != 2:
            raise RowError("format-string templates take one prompt and one response; use the chat template for multi-turn rows")
        prompt = self._prompt_template.format(prompt=messages[0]["content"])  # type: ignore[union-attr]
        response = (self._response_template or "{response}").format(response=messages[1]["content"]) + self._eos
        return [(prompt, False), (response, True)]

    def _chat_segments(self, messages: list[dict[str, str]]) -> list[tuple[str, bool]]:
        segments: list[tuple[str, bool]] = []
        done = ""
        try:
            for i, m in enumerate(messages):
                if m["role"] != "assistant":
                    continue
                prompt = self._render(messages[:i], True)
                full = self._render(messages[: i + 1], False)
                if not prompt.startswith(done) or not full.startswith(prompt):
                    raise RowError("the chat template does not render turns as prefixes of the conversation; set sft.prompt_template/response_template")
                segments += [(prompt[len(done):], False), (full[len(prompt):], True)]
                done = full
            rest = self._render(messages, False)[len(done):] if messages[-1]["role"] != "assistant" else ""
        except RowError:
            raise
        except Exception as exc:  # the template itself raised (e.g. role alternation rules)
            raise RowError(f"chat template failed: {exc}") from None
        if rest:
            segments.append((rest, False))
        return [(t, train) for t, train in segments if t]


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
