"""``prep pretokenize``: text sources -> tokenized Lance table."""

from __future__ import annotations

import argparse
import json

from prep.cli.common import add_job_arguments, call_keys, require_without_config
from prep.cli.exits import at_least, names

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pretokenize", help="tokenize text sources into a Lance table (Ray tasks on a cluster)",
        description="Tokenize JSONL/JSON/Parquet/CSV/text sources (local or s3://) into a Lance table of input_ids,\n"
        "loss_mask and length, plus a rejects table that names every row it could not use.\n\n"
        "Without --config, give --input, --output, --tokenizer and --format; with it, flags override its keys.\n"
        "Any config key not named below: --set KEY=VALUE (e.g. --set sft.messages_column=conversation).\n\n"
        "example:\n  prep pretokenize --input data/train.jsonl --output out/train.lance --tokenizer builtin:mistral-v3 --format pretrain\n"
        "  prep pretokenize --input data/docs/ --output out/packed.lance --tokenizer builtin:mistral-v3 --format pretrain --pack 2048\n"
        "  prep pretokenize --config configs/gsm8k-sft.yaml --input data/train.jsonl --output out/train.lance",
    )
    add_job_arguments(p)
    p.add_argument("--tokenizer", help="builtin:mistral-v3, a directory or a hub id")
    p.add_argument("--format", choices=["pretrain", "sft"], help="pretrain (documents + EOS) or sft (loss on responses only)")
    p.add_argument("--text-column", help="the document field of structured pretraining rows (default text)")
    p.add_argument("--messages-column", help="the sft column with a list of {role, content} (default messages)")
    p.add_argument("--max-length", type=at_least(1), help="the longest row allowed, in tokens (default: no limit)")
    p.add_argument("--overlong", choices=["truncate", "reject", "split"], help="what to do with longer rows (default reject)")
    p.add_argument("--pack", type=at_least(8), metavar="SEQ_LEN",
                   help="pack documents into rows of exactly SEQ_LEN tokens (position_ids restart per document)")
    p.add_argument("--input-format", choices=["auto", "jsonl", "json", "parquet", "csv", "text"],
                   help="how to read the inputs (default auto: by extension)")
    p.add_argument("--text-unit", choices=["line", "paragraph", "file"],
                   help="what a document of a plain text file is (default paragraph)")
    p.add_argument("--passthrough", type=names, metavar="A,B",
                   help="source fields copied to the table as strings (not with --pack)")
    sft = p.add_argument_group("sft", "how SFT rows become prompt and response (config section sft:)")
    sft.add_argument("--sft-layout", choices=["auto", "alpaca", "qa", "messages"],
                     help="auto (default: per row), alpaca (instruction/input/output), qa (question/answer), messages")
    sft.add_argument("--prompt-template", metavar="TEXT",
                     help="a format string over {prompt}, used instead of the chat template, e.g. 'Q: {prompt}\\nA: '")
    sft.add_argument("--response-template", metavar="TEXT", help="a format string over {response} (EOS is appended)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    require_without_config(args, ["--input", "--output", "--tokenizer", "--format"])

    from prep.prepare.api import pretokenize
    from prep.prepare.text.pretokenize import format_summary

    summary = pretokenize(**call_keys(args, dict(
        tokenizer=args.tokenizer, format=args.format, text_column=args.text_column, messages_column=args.messages_column,
        max_length=args.max_length, overlong=args.overlong, pack=args.pack, input_format=args.input_format,
        text_unit=args.text_unit, passthrough=args.passthrough, sft_layout=args.sft_layout,
        prompt_template=args.prompt_template, response_template=args.response_template)))
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
