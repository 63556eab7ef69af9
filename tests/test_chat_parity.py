"""SFT rows are exactly what transformers makes of them: ``apply_chat_template`` ids and assistant masks, row for row.

Every tokenizer in ``../shared/data/tokenizers`` and ``builtin:mistral-v3``, with its own template and with
templates written here that use ``strftime_now``, ``{% generation %}``, ``raise_exception``, system prompts,
content-dependent branches and multi-turn rows. A template without generation marks gets prep's own mask (each
assistant turn from the end of the generation prompt through what the template writes after the message); that
mask is compared with transformers' mask for the same template with exactly that text marked (its *marked twin*).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re

import pytest

from prep.prepare.text.formats import RowError, Segments, SFTFormatter
from prep.prepare.text.tokenizer import BUILTIN_MISTRAL_V3, load_tokenizer, resolve_tokenizer
from prep.prepare.text.tokens import Cuts, encode_segments

# Each template here is written with generation marks around exactly what prep trains on without them.
MISTRAL_MARKED = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% elif m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}{{ eos_token }}{% endgeneration %}{% endif %}{% endfor %}"
)
CHATML_DATED_SYSTEM = (  # a default system prompt with today's date (as SmolLM3's), ChatML turns
    "{%- if messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are helpful. Today is ' + strftime_now('%d %B %Y') + '.<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ m['content'] + '<|im_end|>\\n' }}{% endgeneration %}"
    "{%- else %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
MISTRAL_SMALL_DATED = (  # calls strftime_now unguarded, as current Mistral Small templates do
    "{{ bos_token }}[SYSTEM_PROMPT]Today is {{ strftime_now('%Y-%m-%d') }}.{% if messages[0]['role'] == 'system' %} "
    "{{ messages[0]['content'] }}{% endif %}[/SYSTEM_PROMPT]{% for m in messages %}{% if m['role'] == 'user' %}"
    "[INST]{{ m['content'] }}[/INST]{% elif m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}{{ eos_token }}"
    "{% endgeneration %}{% endif %}{% endfor %}"
)
LLAMA2_ALTERNATING = (  # raise_exception on roles out of turn; trims contents
    "{%- for m in messages %}{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}"
    "{%- if m['role'] == 'user' %}{{ bos_token + '[INST] ' + m['content'] | trim + ' [/INST]' }}"
    "{%- elif m['role'] == 'assistant' %}{% generation %}{{ ' ' + m['content'] | trim + ' ' + eos_token }}{% endgeneration %}"
    "{%- endif %}{%- endfor %}"
)
THINKING = (  # branches on the content (as Qwen3 does with </think>)
    "{%- for m in messages %}{{ '<|' + m['role'] + '|>' }}{%- if m['role'] == 'assistant' %}{% generation %}"
    "{%- if '</think>' in m['content'] %}{{ m['content'].split('</think>')[-1].lstrip('\\n') }}"
    "{%- else %}{{ m['content'] }}{%- endif %}{{ eos_token }}{% endgeneration %}{%- else %}{{ m['content'] }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|assistant|>' }}{%- endif %}"
)
MARKED_TEMPLATES = {
    "mistral": MISTRAL_MARKED, "chatml-dated-system": CHATML_DATED_SYSTEM, "mistral-small-dated": MISTRAL_SMALL_DATED,
    "llama2-alternating": LLAMA2_ALTERNATING, "thinking": THINKING,
}


def unmarked(template: str) -> str:
    return re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", template)


def conversations(shared_data) -> list[list[dict]]:
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        gsm = [json.loads(next(f)) for _ in range(40)]
    u, a, s = ("user", "assistant", "system")
    rows = [[{"role": u, "content": r["question"]}, {"role": a, "content": r["answer"]}] for r in gsm]
    odd = ["  spaced  ", "line\n\nbreaks\n", "{{ braces }} {% tag %}", "quote \" and \\ back", "emoji \U0001f600 ü",
           "ends with </s>", "<think>plan</think>\n\nanswer", "[INST] inside [/INST]", "%s {0} %%", "",
           "[/INST][/INST]", "</s><s>[INST]", "\u4e2d\u6587\u00a0\u200b"]
    # an empty assistant turn is a reject, not a render (test_formats): "" is tried as a prompt only
    rows += [[{"role": u, "content": q}, {"role": a, "content": r}] for q, r in zip(odd, odd[1:] + odd[:1]) if r]
    rows += [
        [{"role": s, "content": "Be brief."}, {"role": u, "content": "2+2?"}, {"role": a, "content": "4"}],
        [{"role": u, "content": "hi"}, {"role": a, "content": "hello"}, {"role": u, "content": "2+2?"}, {"role": a, "content": "4"}],
        [{"role": u, "content": "a"}, {"role": a, "content": "<think>x</think>b"}, {"role": u, "content": "c"}, {"role": a, "content": "d"}],
        [{"role": u, "content": "q"}, {"role": u, "content": "again"}, {"role": a, "content": "r"}],
        [{"role": u, "content": "q", "name": None}, {"role": a, "content": "r"}],
        [{"role": u, "content": "[/INST]"}, {"role": a, "content": "</s>"}, {"role": u, "content": "<s>"}, {"role": a, "content": "[INST]"}],
        [{"role": s, "content": "Be [/INST] brief."}, {"role": u, "content": "x"}, {"role": a, "content": "y"}, {"role": u, "content": ""}, {"role": a, "content": "z"}],
    ]
    return rows


def hf_rows(hf, template: str, rows: list[list[dict]]) -> list[tuple[list[int], list[int]] | str]:
    """transformers' ids and assistant mask per row, or the error it raises."""
    out = []
    for msgs in rows:
        try:
            enc = hf.apply_chat_template(msgs, chat_template=template, tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True)
            out.append((list(enc["input_ids"]), list(enc["assistant_masks"])))
        except Exception as exc:
            out.append(str(exc))
    return out


def prep_rows(tok, rows: list[list[dict]], formatter=None) -> list[tuple[list[int], list[int]] | str]:
    """prep's ids and loss mask per row, or the reject reason (``formatter``: one made elsewhere, e.g. a driver's copy)."""
    formatter, out, segs, where = formatter or SFTFormatter(tok), [], Segments(), []
    for msgs in rows:
        try:
            segs.add_row(formatter({"messages": msgs}))
            where.append(len(out))
            out.append(None)
        except RowError as exc:
            out.append(str(exc))
    enc = encode_segments(tok.backend(), segs)
    for i, j in enumerate(where):
        a, b = enc.offsets[i], enc.offsets[i + 1]
        out[j] = (enc.ids[a:b].tolist(), enc.mask[a:b].tolist())
    return out


@pytest.fixture
def fixed_now(monkeypatch):
    """Today's date as transformers' strftime_now sees it, fixed (so a run across midnight cannot flake)."""
    import transformers.utils.chat_template_utils as ctu

    class Fixed(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 12, 1, 16, 30)

    monkeypatch.setattr(ctu, "datetime", Fixed)


def assert_parity(tok, hf, template_marked: str, rows, *, marked: bool) -> None:
    template = template_marked if marked else unmarked(template_marked)
    tok = dataclasses.replace(tok, chat_template=template)
    ours, theirs = prep_rows(tok, rows), hf_rows(hf, template, rows)
    twin = hf_rows(hf, template_marked, rows)  # the mask prep's rule should give without marks
    for i, (o, t, w) in enumerate(zip(ours, theirs, twin)):
        if isinstance(t, str):  # transformers raised: prep rejects the row with that reason
            assert isinstance(o, str) and t in o, f"row {i}: transformers raised {t!r}, prep gave {o!r}"
            continue
        if isinstance(o, str) and "renders nothing for message" in o:  # transformers drops it silently; prep rejects
            j = int(re.search(r"message (\d+)", o)[1])
            assert rows[i][j]["content"] not in hf.apply_chat_template(rows[i], chat_template=template, tokenize=False)
            continue
        assert not isinstance(o, str), f"row {i}: prep rejected ({o}), transformers rendered it"
        assert o[0] == t[0], f"row {i}: token ids differ"
        assert o[1] == w[1], f"row {i}: loss mask differs from transformers' assistant mask"


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "unmarked"])
@pytest.mark.parametrize("name", list(MARKED_TEMPLATES))
def test_prep_gives_transformers_ids_and_masks_for_written_templates(name, marked, tokenizer_dir, shared_data, fixed_now):
    tok, hf = resolve_tokenizer(tokenizer_dir), load_tokenizer(tokenizer_dir)
    assert_parity(tok, hf, MARKED_TEMPLATES[name], conversations(shared_data), marked=marked)


@pytest.mark.parametrize("spec", ["shared", BUILTIN_MISTRAL_V3])
def test_prep_gives_transformers_ids_and_masks_for_each_real_tokenizer(spec, tokenizer_dir, shared_data):
    spec = tokenizer_dir if spec == "shared" else spec
    tok, hf = resolve_tokenizer(spec), load_tokenizer(spec)
    assert unmarked(MISTRAL_MARKED) == tok.chat_template == hf.chat_template  # so MISTRAL_MARKED is its marked twin
    ours = prep_rows(tok, conversations(shared_data))
    theirs = hf_rows(hf, tok.chat_template, conversations(shared_data))
    twin = hf_rows(hf, MISTRAL_MARKED, conversations(shared_data))
    rows = conversations(shared_data)
    for i, (o, t, w) in enumerate(zip(ours, theirs, twin)):
        if rows[i][0]["role"] == "system":  # this template drops system messages: prep rejects the row
            assert isinstance(o, str) and "renders nothing for message 0" in o
            continue
        assert o[0] == t[0] and o[1] == w[1], f"row {i}"
    assert sum(isinstance(o, str) for o in ours) == 2
    segs = Segments()  # the masks compared above came from the ids alone (no character offsets), for every row
    for r in rows:
        if r[0]["role"] != "system":
            segs.add_row(SFTFormatter(tok)({"messages": r}))
    cuts = Cuts.of(tok.backend())
    assert all(cuts.edges(t, s) is not None for t, s in zip(*segs.rows()))


@pytest.mark.parametrize("name", ["mistral", "chatml-dated-system", "thinking"])
def test_the_drivers_formatter_copied_to_a_worker_gives_transformers_ids_and_masks(name, tokenizer_dir, shared_data, fixed_now):
    """The formatter the driver makes (single-turn frame proved) reaches workers pickled; its copy renders as transformers."""
    import pickle

    from prep.prepare.text.pretokenize import PretokenizeConfig, make_formatter

    tok = dataclasses.replace(resolve_tokenizer(tokenizer_dir), chat_template=MARKED_TEMPLATES[name])
    cfg = PretokenizeConfig(input=["unused.jsonl"], output="unused.lance", tokenizer=tokenizer_dir, format="sft")
    copy = pickle.loads(pickle.dumps(make_formatter(cfg, tok)))
    rows = conversations(shared_data)
    ours, theirs = prep_rows(tok, rows, copy), hf_rows(load_tokenizer(tokenizer_dir), MARKED_TEMPLATES[name], rows)
    for i, (o, t) in enumerate(zip(ours, theirs)):
        if isinstance(t, str) or (isinstance(o, str) and "renders nothing" in o):
            assert isinstance(o, str), f"row {i}"
            continue
        assert o == t, f"row {i}"


def test_a_template_that_calls_strftime_now_renders_todays_date(tokenizer_dir, fixed_now):
    tok = dataclasses.replace(resolve_tokenizer(tokenizer_dir), chat_template=unmarked(MISTRAL_SMALL_DATED))
    segments = SFTFormatter(tok)({"question": "q", "answer": "a"})
    assert "".join(t for t, _ in segments) == "<s>[SYSTEM_PROMPT]Today is 2026-12-01.[/SYSTEM_PROMPT][INST]q[/INST]a</s>"


def test_generation_marks_make_the_loss_mask(tokenizer_dir):
    template = "{% for m in messages %}{{ m['role'] }}: {% generation %}{{ m['content'] }}{% endgeneration %}\n{% endfor %}"
    tok = dataclasses.replace(resolve_tokenizer(tokenizer_dir), chat_template=template)
    segments = SFTFormatter(tok)({"question": "q", "answer": "a"})  # the template marks the user's text too
    assert [s for s in segments if s[1]] == [("q", True), ("a", True)]


@pytest.mark.parametrize("role", ["narrator", "Assistant", "gpt"])
def test_a_message_with_an_unknown_role_is_a_reject(role, tokenizer_dir):
    msgs = [{"role": "user", "content": "q"}, {"role": role, "content": "aside"}, {"role": "assistant", "content": "a"}]
    with pytest.raises(RowError, match=f"messages\\[1\\] has role '{role}'"):
        SFTFormatter(resolve_tokenizer(tokenizer_dir))({"messages": msgs})


def test_a_message_the_template_does_not_render_is_a_reject(tokenizer_dir):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    with pytest.raises(RowError, match="renders nothing for message 0 \\(role 'system'\\)"):
        SFTFormatter(resolve_tokenizer(tokenizer_dir))({"messages": msgs})
