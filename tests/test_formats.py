import numpy as np
import pytest

from prep.prepare.text.formats import RowError, Segments, SFTFormatter, TextFormatter
from prep.prepare.text.tokenizer import resolve_tokenizer
from prep.prepare.text.tokens import encode_segments


@pytest.fixture(scope="module")
def tok(tokenizer_dir):
    return resolve_tokenizer(tokenizer_dir)


def joined(segments):
    """Adjacent segments with the same flag joined, as the row's text is tokenized."""
    out = []
    for text, train in segments:
        if out and out[-1][1] == train:
            out[-1] = (out[-1][0] + text, train)
        else:
            out.append((text, train))
    return out


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
    with_input = joined(f({"instruction": "Translate.", "input": "Bonjour", "output": "Hello"}))
    without = joined(f({"instruction": "Translate.", "input": "", "output": "Hello"}))
    assert "Translate.\n\nBonjour" in with_input[0][0]
    assert without[0][0].endswith("[INST] Translate. [/INST]")
    assert with_input[1] == ("Hello</s>", True)


def test_multi_turn_messages_train_every_assistant_turn(tok):
    msgs = [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
    ]
    segs = SFTFormatter(tok)({"messages": msgs})
    assert joined(segs) == [
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
        # issue 31 #10: an empty or blank response trains only the end-of-turn; the same reject in all three shapes
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]}, r"messages\[1\] is an empty assistant turn"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"},
                       {"role": "assistant", "content": " \n\t"}]}, r"messages\[3\] is an empty assistant turn"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "name": None}]}, "empty assistant turn"),
        ({"question": "q", "answer": ""}, "field 'answer' is empty"),
        ({"question": "q", "answer": " \n"}, "field 'answer' is empty"),
        ({"instruction": "i", "output": ""}, "field 'output' is empty"),
        ({"instruction": "i", "input": "x", "output": "\t "}, "field 'output' is empty"),
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


def test_the_fast_path_fills_the_frame_that_transformers_renders(tok):
    f = SFTFormatter(tok)
    for roles in [("user", "assistant"), ("user", "assistant", "user", "assistant")]:
        assert f._frame(roles) is not None
    for q, a in [("What is 2+2?", "4"), ("  spaced  ", "multi\nline\n"), ("{{ not a template }}", "{% raw %}")]:
        row = [{"role": "user", "content": q}, {"role": "assistant", "content": a}] * 2
        assert joined(f({"messages": row})) == f._chat_segments(row)


def test_templates_that_read_the_content_are_rendered_per_row(tok):
    """Each template here does something with the content besides writing it: no frame, every row rendered."""
    import dataclasses

    reads = ["m['content'] | trim", "m['content'] | tojson", "m['content'][1:]", "m['content'] | length",
             "'x' if m['content'] == 'a' else 'y'", "m['content'].upper()", "'%s!' | format(m['content'])",
             "' '.join([m['content']])", "namespace(c=m['content']).c | replace('a', 'b')",
             "'a' if m['content'] is startingwith('q') else 'b'"]
    for expr in reads:
        template = ("{% for m in messages %}{{ m['role'] }}: {% generation %}{{ m['content'] }} {{ " + expr + " }}"
                    "{% endgeneration %}\n{% endfor %}")
        f = SFTFormatter(dataclasses.replace(tok, chat_template=template))
        assert f._frame(("user", "assistant")) is None, expr


def test_workers_tokenizer_matches_transformers(tok, tokenizer_dir):
    from prep.prepare.text.tokenizer import load_tokenizer

    hf = load_tokenizer(tokenizer_dir)
    text = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72</s>"
    assert tok.backend().encode(text, add_special_tokens=False).ids == hf(text, add_special_tokens=False)["input_ids"]


def test_templates_that_only_write_the_content_get_a_frame(tok):
    """Writing a content through a macro, a namespace, ``+`` or ``| string`` is still only writing it."""
    import dataclasses

    writes = ["{{ m['content'] }}", "{{ turn(m['content']) }}", "{% set ns = namespace(c=m['content']) %}{{ ns.c }}",
              "{{ '<' + m['content'] + '>' }}", "{{ m['content'] | string }}", "{% if m['content'] is string %}{{ m.content }}{% endif %}"]
    for write in writes:
        template = ("{% macro turn(c) %}[{{ c }}]{% endmacro %}{% for m in messages %}{{ m['role'] }}: "
                    "{% generation %}" + write + "{% endgeneration %}\n{% endfor %}")
        f = SFTFormatter(dataclasses.replace(tok, chat_template=template))
        assert f._frame(("user", "assistant")) is not None, write
        row = [{"role": "user", "content": " q\n"}, {"role": "assistant", "content": "{a}"}]
        assert joined(f({"messages": row})) == f._chat_segments(row)


def test_a_copy_of_the_drivers_formatter_fills_its_frames_without_importing_transformers(tok, shared_data, tmp_path):
    """The driver proves the single-turn frame; a worker process gets a pickled copy and renders nothing for those rows."""
    import json
    import pickle
    import subprocess
    import sys

    driver = SFTFormatter(tok)
    driver.prove_frames([("user", "assistant")])
    with open(shared_data / "gsm8k" / "train.jsonl") as f:
        rows = [json.loads(next(f)) for _ in range(50)]
    other = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ""},
                          {"role": "assistant", "content": "a"}]}  # no frame (and an empty content): rendered
    (tmp_path / "formatter.pkl").write_bytes(pickle.dumps((driver, rows, other)))
    script = (
        "import pickle, sys; formatter, rows, other = pickle.load(open(sys.argv[1], 'rb'))\n"
        "out = [formatter(r) for r in rows]\n"
        "imported = 'transformers' in sys.modules\n"
        "try:\n    rendered = formatter(other)\nexcept Exception as exc:\n    rendered = repr(exc)\n"
        "print(repr((out, imported, rendered, 'transformers' in sys.modules)))\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "formatter.pkl")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out, imported_for_frames, rendered, imported_after = eval(run.stdout)
    assert [joined(s) for s in out] == [driver._chat_segments(driver_messages(r)) for r in rows]
    assert not imported_for_frames and imported_after
    try:
        expected = driver(other)
    except RowError as exc:
        expected = repr(exc)
    assert rendered == expected


def driver_messages(row):
    return [{"role": "user", "content": row["question"]}, {"role": "assistant", "content": row["answer"]}]
