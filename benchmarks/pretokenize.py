"""Pretokenize, whole command and job alone, against HF datasets and the tokenizer alone, in one run.

    python benchmarks/pretokenize.py [--repeat 16] [--runs 3] [--workdir /tmp/prep-bench]

The corpus is GSM8K train repeated ``--repeat`` times (16 -> 119,568 rows, ~65 MB), each
row ``{"question", "answer", "text": question + "\\n" + answer}``, laid out two ways: one
large JSONL file, and 256 small files. For each layout and each format (``pretrain`` on
``text``; ``sft`` on question/answer), each measurement in a fresh process, median of
``--runs``:

  ceiling     the tokenizer alone: ``encode_batch_fast`` over the texts in one process
              with Rust threads on every core, no I/O (the most this machine can do)
  hf          HF ``datasets``: load_dataset("json") -> map(batched, num_proc=cores) ->
              save_to_disk, the whole process (start to exit), each run with a fresh cache
  prep        ``prep pretokenize ... --json`` as users run it, the whole command (process
              start to exit), and the job alone (its ``seconds.job``)

Prints tokens/s and the ratios the goals are stated in: prep whole command vs hf (goal
>= 1.2x faster), prep job alone vs ceiling (goal >= 0.8x), and the fixed overhead
(whole command minus job: imports, tokenizer, start, commit; goal < 3 s).

Then, for SFT on the one large file, CPU per token (steadier on a loaded machine than wall
time), each in a fresh process, the least of ``--runs`` (and, for worker and alone, of three
alternated measurements in each process):

  job         ``run_pretokenize`` in process: the CPU of the process and of its sandboxes
              (stopped and waited for), from planning to commit
  worker      the chunk worker in process over the same chunks (read, format, tokenize,
              mask, Arrow; no sandbox start, no write)
  alone       the tokenizer alone (``encode_batch_fast``, ids read out, one thread as the
              workers run) over the texts the job tokenizes: the same rendered rows

and the ratios alone/job (goal >= 0.8x) and alone/worker. ``--only-sft-cpu`` runs this part
alone; ``PYTHONPATH`` picks which prep is measured (a baseline checkout, for before/after).

    python benchmarks/pretokenize.py --append 100,1 [--repeat 1] [--runs 3]

measures growing a table instead: a table of N of the small files, then K more files
added with ``--append`` (whole command and job alone), against preparing the K files
alone into a table of their own (goal: a ratio near 1, not a re-read of the N files).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
TOKENIZER = REPO.parent / "shared" / "data" / "tokenizers" / "mistral-v3"
PREP = Path(sys.executable).parent / "prep"
FORMATS = {"pretrain": dict(format="pretrain", text_column="text"), "sft": dict(format="sft", sft={"layout": "qa"})}

HF_SCRIPT = """
import sys, time
from datasets import load_dataset
from transformers import AutoTokenizer
files, fmt, out, procs = sys.argv[1].split(","), sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(sys.argv[5])
ds = load_dataset("json", data_files=files, split="train")
def enc(batch):
    if fmt == "pretrain":
        return {"input_ids": [ids + [tok.eos_token_id] for ids in tok(batch["text"], add_special_tokens=False)["input_ids"]]}
    q = tok(batch["question"], add_special_tokens=False)["input_ids"]
    a = tok(batch["answer"], add_special_tokens=False)["input_ids"]
    return {"input_ids": [x + y for x, y in zip(q, a)], "loss_mask": [[0] * len(x) + [1] * len(y) for x, y in zip(q, a)]}
ds = ds.map(enc, batched=True, num_proc=procs, remove_columns=ds.column_names)
ds.save_to_disk(out)
print(sum(len(x) for x in ds["input_ids"]))
"""

CEILING_SCRIPT = """
import json, sys, time, os
os.environ["TOKENIZERS_PARALLELISM"] = "true"
import tokenizers
tok = tokenizers.Tokenizer.from_file(sys.argv[3] + "/tokenizer.json")
texts = []
for path in sys.argv[1].split(","):
    for line in open(path):
        row = json.loads(line)
        texts += [row["text"]] if sys.argv[2] == "pretrain" else [row["question"], row["answer"]]
t0, c0 = time.perf_counter(), time.process_time()
tokens = sum(len(e.ids) for i in range(0, len(texts), 8192) for e in tok.encode_batch_fast(texts[i:i + 8192], add_special_tokens=False))
print(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0}))
"""


SFT_CPU_SCRIPT = """
import json, os, resource, sys, time
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from prep.io import storage
from prep.prepare.isolation import stop_sandboxes
from prep.prepare.text.formats import Segments, SFTFormatter
from prep.prepare.text.pretokenize import PretokenizeConfig, TextJob, run_pretokenize
from prep.prepare.text.readers import read_chunk

def cpu():
    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))

cfg = PretokenizeConfig.model_validate(json.loads(sys.argv[1]))
c0 = cpu()
summary = run_pretokenize(cfg)
stop_sandboxes()
job = cpu() - c0
s3 = storage.S3Options()
plan = TextJob(cfg).plan(s3)
tok = plan.details["tokenizer"]
formatter, segments = SFTFormatter(tok, schema=cfg.sft.layout), Segments()
for chunk in plan.chunks:
    for row in read_chunk(chunk).rows:
        segments.add_row(formatter(row))
texts, _ = segments.rows()
backend = tok.backend()
worker = TextJob(cfg).worker(plan, s3)

def alone_once():
    return sum(len(e.ids) for i in range(0, len(texts), 8192)
               for e in backend.encode_batch_fast(texts[i:i + 8192], add_special_tokens=False))

def worker_once():
    return sum(worker(chunk).counts["tokens"] for chunk in plan.chunks)

least = {"alone": float("inf"), "worker": float("inf")}
for name, once in [("alone", alone_once), ("worker", worker_once)] * 3:  # alternated; the least CPU of each
    c0 = time.process_time()
    tokens = once()
    least[name] = min(least[name], time.process_time() - c0)
    assert tokens == summary["tokens"], (name, tokens, summary["tokens"])
alone, in_worker, alone_tokens = least["alone"], least["worker"], summary["tokens"]
print(json.dumps({"tokens": alone_tokens, "job": job, "worker": in_worker, "alone": alone}))
"""


def make_corpus(workdir: Path, repeat: int) -> dict[str, list[Path]]:
    """One large file and the same rows as 256 small files."""
    big, small_dir = workdir / f"gsm8k-x{repeat}.jsonl", workdir / f"gsm8k-x{repeat}-parts"
    if not big.exists():
        rows = [json.loads(line) for line in GSM8K.open()]
        with open(big, "w") as f:
            for _ in range(repeat):
                for r in rows:
                    f.write(json.dumps({**r, "text": r["question"] + "\n" + r["answer"]}) + "\n")
    if not small_dir.exists():
        small_dir.mkdir()
        lines = big.read_text().splitlines(keepends=True)
        per = -(-len(lines) // 256)
        for i in range(256):
            (small_dir / f"part-{i:03d}.jsonl").write_text("".join(lines[i * per:(i + 1) * per]))
    return {"one large file": [big], "256 small files": sorted(small_dir.glob("*.jsonl"))}


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and every child it waited for, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise SystemExit(f"failed: {' '.join(cmd[:4])} ...\n{out.stderr[-3000:]}")
    return dt, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), out.stdout


def run_hf(joined: str, fmt: str, workdir: Path, cores: int) -> tuple[float, float, str]:
    """One HF run with a cache of its own: datasets caches the JSON conversion and the map by
    fingerprint, so a second run in a shared cache would measure a cache hit."""
    cache = Path(tempfile.mkdtemp(dir=workdir, prefix="hf-cache-"))
    try:
        env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
        return timed([sys.executable, "-c", HF_SCRIPT, joined, fmt, str(workdir / "hf"), str(cores), str(TOKENIZER)], env)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def run_prep(files: list[Path], fmt: str, workdir: Path) -> tuple[float, float, float, int]:
    """(whole command seconds, job seconds, whole command CPU seconds, tokens)."""
    config = workdir / f"{fmt}.yaml"
    config.write_text(json.dumps({"input": [str(f) for f in files], "output": str(workdir / "prep.lance"),
                                  "tokenizer": str(TOKENIZER), **FORMATS[fmt]}))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    whole, cpu, out = timed([str(PREP), "pretokenize", "--config", str(config), "--overwrite", "--json"], env)
    summary = json.loads(out)
    return whole, summary["seconds"]["job"], cpu, summary["tokens"]


def run_prep_into(inputs: list[Path], output: Path, fmt: str, workdir: Path, *flags: str) -> tuple[float, float]:
    """(whole command seconds, job seconds) of ``prep pretokenize`` of ``inputs`` into ``output`` with ``flags``."""
    config = workdir / f"{fmt}-{output.stem}.yaml"
    config.write_text(json.dumps({"input": [str(f) for f in inputs], "output": str(output), "tokenizer": str(TOKENIZER), **FORMATS[fmt]}))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    whole, _, out = timed([str(PREP), "pretokenize", "--config", str(config), "--json", *flags], env)
    return whole, json.loads(out)["seconds"]["job"]


def measure_append(parts: list[Path], n: int, k: int, workdir: Path, runs: int) -> None:
    """Appending ``k`` files to a table of ``n`` vs preparing the ``k`` alone (``sft``), median of ``runs``."""
    if n + k > len(parts):
        raise SystemExit(f"--append {n},{k}: only {len(parts)} small files")
    grown, alone = [], []
    for _ in range(runs):
        folder = Path(tempfile.mkdtemp(prefix="append-in-", dir=workdir))  # made here, so only ours is removed below
        for p in parts[:n]:
            shutil.copy(p, folder / p.name)
        run_prep_into([folder], workdir / "grown.lance", "sft", workdir, "--overwrite")  # the table of n (not timed)
        for p in parts[n:n + k]:
            shutil.copy(p, folder / p.name)
        grown.append(run_prep_into([folder], workdir / "grown.lance", "sft", workdir, "--append"))
        alone.append(run_prep_into([folder / p.name for p in parts[n:n + k]], workdir / "alone.lance", "sft", workdir, "--overwrite"))
        shutil.rmtree(folder)
    g_whole, g_job = statistics.median(g[0] for g in grown), statistics.median(g[1] for g in grown)
    a_whole, a_job = statistics.median(a[0] for a in alone), statistics.median(a[1] for a in alone)
    print(f"append {k} file(s) to a table of {n} (sft, median of {runs}): whole {g_whole:.2f}s, job {g_job:.2f}s; "
          f"the {k} file(s) alone: whole {a_whole:.2f}s, job {a_job:.2f}s; ratio whole {g_whole / a_whole:.2f}x, job {g_job / a_job:.2f}x")


def sft_cpu(files: list[Path], workdir: Path, runs: int) -> None:
    """SFT CPU per token: the job and the worker against the tokenizer alone on the same texts (module docstring)."""
    config = {"input": [str(f) for f in files], "output": str(workdir / "prep-cpu.lance"), "overwrite": True,
              "tokenizer": str(TOKENIZER), **FORMATS["sft"]}
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    results = [json.loads(timed([sys.executable, "-c", SFT_CPU_SCRIPT, json.dumps(config)], env)[2]) for _ in range(runs)]
    least = {k: min(r[k] for r in results) / results[0]["tokens"] * 1e6 for k in ("job", "worker", "alone")}
    print(f"sft, one large file, {results[0]['tokens']:,} tokens; least CPU-s per 1M tokens over {runs} runs: "
          f"job {least['job']:.2f}, worker {least['worker']:.2f}, tokenizer alone {least['alone']:.2f}")
    print(f"  alone/job {least['alone'] / least['job']:.2f}x (goal >= 0.8), alone/worker {least['alone'] / least['worker']:.2f}x"
          f"  [per run alone/job: {', '.join(format(r['alone'] / r['job'], '.2f') for r in results)}]", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default="/tmp/prep-bench")
    parser.add_argument("--append", metavar="N,K", help="measure appending K small files to a table of N instead (e.g. 100,1)")
    parser.add_argument("--only-sft-cpu", action="store_true", help="only the SFT CPU-per-token measurement")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    layouts = make_corpus(workdir, args.repeat)
    if args.append:
        n, k = (int(x) for x in args.append.split(","))
        measure_append(layouts["256 small files"], n, k, workdir, args.runs)
        return
    if args.only_sft_cpu:
        sft_cpu(layouts["one large file"], workdir, args.runs)
        return
    print(f"GSM8K x{args.repeat}, {cores} cores, median of {args.runs} fresh processes each; tokenizer {TOKENIZER.name}")
    print(f"{'layout':<16} {'format':<9} {'ceiling':>9} {'hf whole':>9} {'prep whole':>11} {'prep job':>9}"
          f" {'prep/hf':>8} {'job/ceil':>9} {'fixed s':>8} | CPU-s/1M tok: {'ceil':>5} {'hf':>5} {'prep':>5} {'hf/prep':>8}")
    for layout, files in layouts.items():
        joined = ",".join(map(str, files))
        for fmt in FORMATS:
            ceil = [json.loads(timed([sys.executable, "-c", CEILING_SCRIPT, joined, fmt, str(TOKENIZER)])[2]) for _ in range(args.runs)]
            tokens = ceil[0]["tokens"]
            ceiling_s, ceiling_cpu = statistics.median(c["seconds"] for c in ceil), statistics.median(c["cpu"] for c in ceil)
            hf = [run_hf(joined, fmt, workdir, cores) for _ in range(args.runs)]
            hf_s, hf_cpu = statistics.median(h[0] for h in hf), statistics.median(h[1] for h in hf)
            preps = [run_prep(files, fmt, workdir) for _ in range(args.runs)]
            whole_s, job_s = statistics.median(p[0] for p in preps), statistics.median(p[1] for p in preps)
            prep_cpu, prep_tokens = statistics.median(p[2] for p in preps), preps[0][3]
            m = 1e6
            print(f"{layout:<16} {fmt:<9} {tokens / ceiling_s / m:>8.2f}M {tokens / hf_s / m:>8.2f}M"
                  f" {prep_tokens / whole_s / m:>10.2f}M {prep_tokens / job_s / m:>8.2f}M"
                  f" {hf_s / whole_s:>7.2f}x {(prep_tokens / job_s) / (tokens / ceiling_s):>8.2f}x {whole_s - job_s:>8.1f}"
                  f" | {'':>13} {ceiling_cpu / tokens * m:>5.2f} {hf_cpu / tokens * m:>5.2f} {prep_cpu / prep_tokens * m:>5.2f}"
                  f" {(hf_cpu / tokens) / (prep_cpu / prep_tokens):>7.2f}x", flush=True)
    print("tokens/s; prep/hf = hf whole seconds / prep whole seconds (goal >= 1.2); job/ceil goal >= 0.8; fixed goal < 3 s;")
    print("CPU-s per 1M tokens of the whole process (children included): steadier than wall time on a shared machine")
    print("prep also counts EOS (pretrain) and chat-template tokens (sft), which the ceiling and hf do not encode: prep's count is the larger")
    sft_cpu(layouts["one large file"], workdir, args.runs)


if __name__ == "__main__":
    main()
