"""Pretokenize throughput: the full pipeline against the tokenizer alone, in one run.

    python benchmarks/pretokenize.py [--repeat 24] [--workdir /tmp/prep-bench]

Builds a corpus of GSM8K repeated ``--repeat`` times (24 -> ~100 MB), then runs,
each in a fresh process so peak memory is its own:
  ceiling    the tokenizer alone: batch-encode every question and answer in one
             process (Rust threads on all cores), no I/O; the most this machine can do
  pipeline   prep's pretokenize job (read -> format -> tokenize -> write Lance) on a
             local Ray, tokens/s excluding Ray start-up (reported separately): the
             first job in a fresh Ray (cold workers) and the same job again (warm)
  pipeline at a quarter of the corpus, to show driver memory does not grow with it
Prints tokens/s, the ratio to the ceiling, Ray start-up, and the driver's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
TOKENIZER = REPO.parent / "shared" / "data" / "tokenizers" / "mistral-v3"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_corpus(workdir: Path, repeat: int) -> Path:
    path = workdir / f"gsm8k-x{repeat}.jsonl"
    if not path.exists():
        data = GSM8K.read_bytes()
        with open(path, "wb") as f:
            for _ in range(repeat):
                f.write(data)
    return path


def stage_ceiling(corpus: Path) -> dict:
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    from prep.prepare.tokenizer import resolve_tokenizer

    tok = resolve_tokenizer(str(TOKENIZER)).backend()
    texts = []
    with open(corpus) as f:
        for line in f:
            row = json.loads(line)
            texts += [row["question"], row["answer"]]
    t0 = time.perf_counter()
    tokens = 0
    for i in range(0, len(texts), 8192):
        tokens += sum(len(e.ids) for e in tok.encode_batch_fast(texts[i : i + 8192], add_special_tokens=False))
    dt = time.perf_counter() - t0
    return {"tokens": tokens, "seconds": dt, "tok_per_s": tokens / dt, "peak_rss_mb": peak_rss_mb()}


def stage_pipeline(corpus: Path, workdir: Path) -> dict:
    from prep.prepare.pretokenize import PretokenizeConfig, run_pretokenize

    cfg = PretokenizeConfig.model_validate(dict(
        input=str(corpus), output=str(workdir / f"{corpus.stem}.lance"), overwrite=True,
        tokenizer=str(TOKENIZER), format="sft", sft={"layout": "qa"}))
    cold = run_pretokenize(cfg)  # a fresh Ray: workers start, import and build the tokenizer
    warm = run_pretokenize(cfg)  # the same job again in the same Ray: what a long job sees after its first chunks
    return {
        "tokens": warm["tokens"], "rows": warm["rows_written"], "chunks": warm["chunks"],
        "ray_init_s": cold["seconds"]["ray_start"], "cold_job_s": cold["seconds"]["job"], "job_s": warm["seconds"]["job"],
        "cold_tok_per_s": cold["tokens"] / cold["seconds"]["job"], "tok_per_s": warm["tokens"] / warm["seconds"]["job"],
        "driver_peak_rss_mb": peak_rss_mb(),
    }


def run_stage(name: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--stage", name, *args], capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"stage {name} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=24)
    parser.add_argument("--workdir", default="/tmp/prep-bench")
    parser.add_argument("--stage", choices=["ceiling", "pipeline"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    if args.stage:
        corpus = Path(args.corpus)
        result = stage_ceiling(corpus) if args.stage == "ceiling" else stage_pipeline(corpus, workdir)
        print(json.dumps(result))
        return
    workdir.mkdir(parents=True, exist_ok=True)
    corpus = make_corpus(workdir, args.repeat)
    small = make_corpus(workdir, max(1, args.repeat // 4))
    print(f"corpus: {corpus} ({corpus.stat().st_size / 1e6:.0f} MB), {os.cpu_count()} cores")
    ceiling = run_stage("ceiling", "--corpus", str(corpus))
    pipe = run_stage("pipeline", "--corpus", str(corpus), "--workdir", str(workdir))
    pipe_small = run_stage("pipeline", "--corpus", str(small), "--workdir", str(workdir))
    print(f"tokenizer alone (ceiling): {ceiling['tok_per_s'] / 1e6:.2f} M tok/s  ({ceiling['tokens']:,} tokens in {ceiling['seconds']:.1f}s)")
    print(f"pipeline, warm workers:     {pipe['tok_per_s'] / 1e6:.2f} M tok/s  ({pipe['tokens']:,} tokens, {pipe['rows']:,} rows, {pipe['chunks']} chunks, job {pipe['job_s']:.1f}s)")
    print(f"pipeline, cold workers:     {pipe['cold_tok_per_s'] / 1e6:.2f} M tok/s  (first job in a fresh Ray, job {pipe['cold_job_s']:.1f}s)")
    print(f"ratio to ceiling:           {pipe['tok_per_s'] / ceiling['tok_per_s']:.2f}x warm, {pipe['cold_tok_per_s'] / ceiling['tok_per_s']:.2f}x cold")
    print(f"Ray start-up (excluded):    {pipe['ray_init_s']:.1f}s")
    print(f"driver peak RSS:            {pipe['driver_peak_rss_mb']:.0f} MB at {args.repeat}x, {pipe_small['driver_peak_rss_mb']:.0f} MB at {max(1, args.repeat // 4)}x")
    print(f"ceiling process peak RSS:   {ceiling['peak_rss_mb']:.0f} MB (holds all texts)")


if __name__ == "__main__":
    main()
