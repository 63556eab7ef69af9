"""``prep pretokenize``: text sources -> tokenized Lance table."""

from __future__ import annotations

import argparse
import json

from prep.cli.common import add_job_arguments, job_overrides

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pretokenize", help="tokenize text sources into a Lance table (a Ray Data job)",
        description="Tokenize JSONL/JSON/Parquet/CSV/text sources (local or s3://) into a Lance table of input_ids,\n"
        "loss_mask and length, plus a rejects table that names every row it could not use.\n\n"
        "example:\n  prep pretokenize --config configs/gsm8k-sft.yaml --input data/train.jsonl --output out/train.lance",
    )
    add_job_arguments(p)
    p.add_argument("--tokenizer", help="override the config's tokenizer: builtin:mistral-v3, a directory or a hub id")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prep.runtime.config import load_config
    from prep.prepare.text.pretokenize import PretokenizeConfig, format_summary, run_pretokenize

    cfg = load_config(PretokenizeConfig, args.config, tokenizer=args.tokenizer, **job_overrides(args))
    summary = run_pretokenize(cfg)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
