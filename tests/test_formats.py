import numpy as np
import pytest

from prep.prepare.text.formats import RowError, Segments, SFTFormatter, TextFormatter
from prep.prepare.text.tokenizer import resolve_tokenizer
from prep.prepare.text.tokens import encode_segments


@pytest.fixture(scope="module")
def tok(tokenizer_dir):
    return resolve_tokenizer(tokenizer_dir)


def encode(tok, formatter, rows, eos=None):
    segs = Segments()
    for r in rows:
        segs.add_row(formatter(r))
    return encode_segments(tok.backend(), segs, eos_id=eos)


def test_qa_loss_mask_covers_exactly_the_answer_and_eos(tok):
    rows = encode(tok, SFTFormatter(tok), [{"question": "What is 2+2?", "answer": "It is 4.\n#### 4"}])
    ids, mask = rows.ids, rows.mask.astype(bool)
    assert tok.backend().decode(ids[~mask].tolist(), skip_special_tokens=False) == "<s>[INST] What is 2+2? [/INST]"
    assert tok.backend().decode(ids[mask].tolist(), skip_special_tokens=False).strip() == "It is 4.\n#### 4</s>"
    assert mask[-1] and ids[-1] == tok.eos_id
    assert not mask[: int(np.argmax(mask))].any() and mask[int(np.argmax(mask)):].all()


def test_alpaca_input_is_appended_to_instruction_when_present(tok):
    f = SFTFormatter(tok, schema="alpaca")
    with_input = f({"instruction": "Translate.", "input": "Bonjour", "output": "Hello"})
    without = f({"instruction": "Translate.", "input": "", "output": "Hello"})
    assert "Translate.\n\nBonjour" in with_input[0][0]
    assert without[0][0].endswith("[INST] Translate. [/INST]")
    assert with_input[1] == ("Hello</s>", True)


def test_multi_turn_messages_train_every_assistant_turn(tok):
    msgs = [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
    ]
    segs = SFTFormatter(tok)({"messages": msgs})
    assert [(t, train) for t, train in segs] == [
        ("<s>[INST] hi [/INST]", False), ("hello</s>", True), ("[INST] 2+2? [/INST]", False), ("4</s>", True)]


def test_format_string_templates_append_eos(tok):
    f = SFTFormatter(tok, prompt_template="Q: {prompt}\nA:", response_template=" {response}")
    assert f({"question": "x?", "answer": "y"}) == [("Q: x?\nA:", False), (" y</s>", True)]


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"question": "q"}, "missing field 'answer'"),
        ({"question": "q", "answer": None}, "field 'answer' is null"),
        ({"question": "q", "answer": 42}, "field 'answer' must be a string, got int"),
        ({"question": "  ", "answer": "a"}, "field 'question' is empty"),
        ({"foo": 1}, "cannot tell the SFT schema"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant turn"),
        ({"messages": "hi"}, "non-empty list"),
    ],
)
def test_bad_sft_rows_raise_row_errors_with_reasons(tok, row, reason):
    with pytest.raises(RowError, match=reason):
        SFTFormatter(tok)(row)


def test_pretraining_rows_get_eos_and_full_mask(tok):
    rows = encode(tok, TextFormatter(), ["To be, or not to be", {"text": "that is the question"}], eos=tok.eos_id)
    assert rows.num_rows == 2
    assert (rows.ids[rows.offsets[1:] - 1] == tok.eos_id).all()
    assert rows.mask.all()
    with pytest.raises(RowError, match="empty text"):
        TextFormatter()("   ")


def test_single_turn_fast_path_matches_the_jinja_render(tok):
    f = SFTFormatter(tok)
    assert f._frame is not None
    for q, a in [("What is 2+2?", "4"), ("  spaced  ", "multi\nline\n"), ("{{ not a template }}", "{% raw %}")]:
        row = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        assert f({"messages": row}) == [s for s in f._chat_segments(row)]


def test_workers_tokenizer_and_template_match_transformers(tok, tokenizer_dir):
    from prep.prepare.text.chat_template import compile_chat_template
    from prep.prepare.text.tokenizer import load_tokenizer

    hf = load_tokenizer(tokenizer_dir)
    msgs = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "and {{ you }}?"}]
    for gen in (False, True):
        ours = compile_chat_template(tok.chat_template).render(messages=msgs, add_generation_prompt=gen, **tok.special_tokens)
        assert ours == hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
    text = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72</s>"
    assert tok.backend().encode(text, add_special_tokens=False).ids == hf(text, add_special_tokens=False)["input_ids"]
