"""Reader benchmark: prep.reader against what users would otherwise run, on issue 9's workload.

Workload: GSM8K train x16 as one JSONL of ``{"text": question + "\\n" + answer}`` (119,568
rows), ``prep pretokenize`` (``format: pretrain``, mistral-v3, ``max_length: 512``,
``overlong: truncate``), then ``prep materialize-shuffle --epochs 1 --splits 32``; both are
built once and cached in ``--work``. Every case reads one shuffled epoch as batches of
``G`` rows padded to the batch's longest row (``input_ids``, ``labels``,
``attention_mask``, int64 torch tensors), ``num_workers=0`` unless said; tokens are
counted unpadded. Each case runs in a fresh process, ``--runs`` times; the median is kept.

    floor    the table pre-shuffled once (take(permutation) -> write), read sequentially with
             ``to_batches(G)`` + a vectorized pad: what a materialized read cannot beat. It does
             prep's work: the same three columns (``id``, ``input_ids``, ``loss_mask``), the
             same three int64 tensors, and each batch's row ids as a NumPy array
    lance    ``lance.torch`` LanceDataset on the prepared table, ShardedBatchSampler(randomize=True)
             (shuffles G-row blocks only)
    hf       HF ``datasets`` (``with_format("numpy")``) + DataLoader(shuffle=True), vectorized pad
    prep     prep.reader on the materialized epoch (32 splits: G/32 rows from each split a step),
             through ``DataLoader(ds, batch_size=None)``
    prep-L   the same through ``prep.reader.Loader(ds)`` (no worker processes): what the floor
             does, batches straight from the reader, without torch's per-batch DataLoader work
             (a profiler range and a copy of every batch: ~25 us a batch)
    planned  prep.reader on the prepared table with an on-the-fly random plan (32 splits)
    planned-w the same through prep.reader.Loader with one forkserver worker process
    prep-w1  prep through prep.reader.Loader with 1 DataLoader worker process (what frameworks
    prep-w2  default to: Trainer's dataloader_num_workers, Lightning's num_workers); 2 workers

    python benchmarks/reader.py                      # G = 32, 256, 1024; 3 runs each; then resume times
    python benchmarks/reader.py --runs 1 --batches 32
    python benchmarks/reader.py --workers            # prep with 0, 1 and 2 worker processes (issue 12)
    python benchmarks/reader.py --elastic --batches 32,256   # rank 0 of W whose rows come from its own splits or not

``--elastic`` (issue 20) reads rank 0's share of the epoch, materialized with ``S`` splits (32, and 48
built on first use), at world size ``W``: ``S32/W32`` and ``S48/W16`` read only the rank's own splits
(``W`` divides ``S``); ``S48/W32`` takes its ``G/32`` rows a step from a window of splits that the next
rank shares (``W`` divides ``G`` but not ``S``), so it reads runs of a step or two of each split with
``take`` where the others read long ranges.

Worker processes' CPU is sampled (psutil) while they live, the last time before the last
batch is taken; ``--workers`` also prints each case after its first batch (start-up of the
worker processes, which import torch, is in ``first s``); each line also gives the whole command, process start to exit (wall and
CPU of the process and every descendant it waited for), beside the job alone.

Benchmark-only dependency: ``datasets`` (the hf case is skipped without it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
SPLITS = 32
FLOOR_COLUMNS = ["id", "input_ids", "loss_mask"]  # what prep.reader reads from a materialized split
PREP = Path(sys.executable).parent / "prep"


# ----------------------------------------------------------------------------- data
def build(work: Path) -> dict:
    """The prepared table, its materialized epoch, a pre-shuffled copy and an HF copy (cached)."""
    done = work / "ready.json"
    if done.exists():
        shuffled(work)
        return json.loads(done.read_text())
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1"}
    if not (work / "table.lance").exists():
        src = work / "gsm8k-x16.jsonl"
        rows = [json.loads(line) for line in open(SHARED / "gsm8k" / "train.jsonl")]
        with open(src, "w") as f:
            for _ in range(16):
                for r in rows:
                    f.write(json.dumps({"text": r["question"] + "\n" + r["answer"]}) + "\n")
        config = work / "pretrain.yaml"
        config.write_text(json.dumps({"input": str(src), "output": str(work / "table.lance"), "format": "pretrain",
                                      "text_column": "text", "tokenizer": str(SHARED / "tokenizers" / "mistral-v3"),
                                      "max_length": 512, "overlong": "truncate"}))
        subprocess.run([str(PREP), "pretokenize", "--config", str(config), "--overwrite"], check=True, env=env)
    materialize(work, "epochs", SPLITS)
    shuffled(work)
    import lance

    table = lance.dataset(str(work / "table.lance")).to_table(columns=["input_ids", "loss_mask"])
    try:
        import datasets

        datasets.Dataset(table).save_to_disk(str(work / "hf"))
    except ImportError:
        pass
    info = {"rows": table.num_rows, "tokens": int(np.diff(table.column("input_ids").combine_chunks().offsets).sum())}
    done.write_text(json.dumps(info))
    return info


def shuffled(work: Path) -> None:
    """The floor's table: the prepared rows in one random order, prep's three read columns (cached;
    a copy from before the floor read ``id`` is rebuilt)."""
    import lance

    path = work / "shuffled.lance"
    if path.exists() and "id" in lance.dataset(str(path)).schema.names:
        return
    table = lance.dataset(str(work / "table.lance")).to_table(columns=FLOOR_COLUMNS)
    lance.write_dataset(table.take(np.random.default_rng(0).permutation(table.num_rows)), str(path), mode="overwrite")


def materialize(work: Path, name: str, splits: int) -> None:
    """One shuffled epoch of the prepared table as ``splits`` splits under ``work/name`` (cached)."""
    if not (work / name / "manifest.json").exists():
        subprocess.run([str(PREP), "materialize-shuffle", "--table", str(work / "table.lance"), "--output",
                        str(work / name), "--epochs", "1", "--splits", str(splits), "--overwrite"], check=True,
                       env={**os.environ, "RAY_DISABLE_USAGE_STATS": "1"})


ELASTIC = {"S32/W32": ("epochs", 32), "S48/W16": ("epochs48", 16), "S48/W32": ("epochs48", 32)}


# ----------------------------------------------------------------------------- the baselines' collate
def pad_arrow(batch) -> tuple[dict, int]:
    """Vectorized pad straight from Arrow offsets (the collate the Lance baselines get)."""
    import torch

    col, lm = batch.column("input_ids"), batch.column("loss_mask")
    offs = col.offsets.to_numpy()
    lens = np.diff(offs)
    mask = np.arange(lens.max()) < lens[:, None]
    ids = np.zeros(mask.shape, np.int64)
    ids[mask] = col.values.to_numpy()[offs[0]:offs[-1]]
    trained = np.zeros(mask.shape, bool)
    trained[mask] = lm.values.to_numpy()[offs[0]:offs[-1]]
    return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(np.where(trained, ids, -100)),
            "attention_mask": torch.from_numpy(mask.astype(np.int64))}, int(lens.sum())


def with_ids(batch) -> tuple[dict, int]:
    """:func:`pad_arrow` plus the rows' ids as a NumPy array, as every prep batch carries them."""
    tensors, tokens = pad_arrow(batch)
    tensors["ids"] = batch.column("id").to_numpy()
    return tensors, tokens


def pad_rows(rows: list[dict]) -> tuple[dict, int]:
    """The same pad for a list of HF rows."""
    import torch

    lens = np.fromiter((len(r["input_ids"]) for r in rows), np.int64, len(rows))
    mask = np.arange(lens.max()) < lens[:, None]
    ids = np.zeros(mask.shape, np.int64)
    ids[mask] = np.concatenate([r["input_ids"] for r in rows])
    trained = np.zeros(mask.shape, bool)
    trained[mask] = np.concatenate([r["loss_mask"] for r in rows])
    return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(np.where(trained, ids, -100)),
            "attention_mask": torch.from_numpy(mask.astype(np.int64))}, int(lens.sum())


# ----------------------------------------------------------------------------- cases
def batches(case: str, g: int, work: Path):
    """An iterator of (tensors, real tokens) for one case."""
    from torch.utils.data import DataLoader

    if case == "floor":
        import lance

        ds = lance.dataset(str(work / "shuffled.lance"))
        return (with_ids(b) for b in ds.to_batches(batch_size=g, columns=FLOOR_COLUMNS))
    if case == "lance":
        from lance.sampler import ShardedBatchSampler
        from lance.torch.data import LanceDataset

        ds = LanceDataset(str(work / "table.lance"), batch_size=g, columns=["input_ids", "loss_mask"],
                          sampler=ShardedBatchSampler(0, 1, randomize=True), to_tensor_fn=lambda b, **kw: pad_arrow(b))
        return iter(DataLoader(ds, batch_size=None, num_workers=0))
    if case == "hf":
        import datasets

        hf = datasets.load_from_disk(str(work / "hf")).with_format("numpy")
        return iter(DataLoader(hf, batch_size=g, shuffle=True, collate_fn=pad_rows, num_workers=0))
    from prep.reader import Loader, ReaderDataset

    if case in ELASTIC:
        name, world = ELASTIC[case]
        ds = ReaderDataset(str(work / name), global_batch_size=g, rank=0, world_size=world)
        return ((b, b.num_tokens) for b in DataLoader(ds, batch_size=None))
    if case.startswith("prep"):
        ds = ReaderDataset(str(work / "epochs"), global_batch_size=g)
    else:
        ds = ReaderDataset(str(work / "table.lance"), global_batch_size=g, plan={"num_splits": SPLITS})
    workers = {"planned-w": 1, "prep-w1": 1, "prep-w2": 2}.get(case, 0)
    # with workers, every step from them (no in-process start, prep.reader.workers.handoff): this measures their transport
    loader = Loader(ds, num_workers=workers, start_in_process=False) if workers or case == "prep-L" \
        else DataLoader(ds, batch_size=None)
    return ((b, b.num_tokens) for b in loader)


def _preimport(case: str) -> None:
    """Imports a case needs, before the clock starts (imports are not reading)."""
    import torch  # noqa: F401
    from torch.utils.data import DataLoader  # noqa: F401

    names = {"floor": ["lance"], "lance": ["lance.torch.data", "lance.sampler"], "hf": ["datasets"]}
    for name in names.get(case, ["prep.reader", "lance"]):
        __import__(name)


def _descendants_cpu() -> float:
    """CPU seconds of this process's live descendants (a forkserver worker is not a child: rusage misses it)."""
    import psutil

    total = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


WORKER_CASES = ("planned-w", "prep-w1", "prep-w2")


def run_case(case: str, g: int, work: Path) -> dict:
    _preimport(case)
    steps = None
    if case in WORKER_CASES:  # the last batch is known, so workers are sampled once more before they exit
        from prep.reader import ReaderDataset

        steps = len(ReaderDataset(str(work / ("epochs" if case.startswith("prep") else "table.lance")),
                                  global_batch_size=g, **({} if case.startswith("prep") else {"plan": {"num_splits": SPLITS}})))
    started, cpu0 = time.perf_counter(), time.process_time()
    it = batches(case, g, work)
    first, tokens, cpu_children, sampled, count = None, 0, 0.0, started, 0
    for tensors, n in it:
        now = time.perf_counter()
        tokens += n
        count += 1
        if steps is not None and (now - sampled > 0.25 or count == steps or first is None):
            cpu_children, sampled = max(cpu_children, _descendants_cpu()), now
        if first is None:  # steady state starts after the first batch (worker start-up is in first_s)
            first, steady = now - started, (now, time.process_time() + cpu_children, tokens)
    end = time.perf_counter()
    wall, cpu = end - started, time.process_time() - cpu0 + cpu_children
    steady_tokens = tokens - steady[2]
    steady_cpu = time.process_time() + cpu_children - steady[1]
    return {"tokens": tokens, "wall_s": wall, "tok_per_s": tokens / wall, "cpu_per_mtok": cpu / tokens * 1e6,
            "first_s": first, "steady_tok_per_s": steady_tokens / (end - steady[0]),
            "steady_cpu_per_mtok": steady_cpu / steady_tokens * 1e6}


def run_seek(work: Path) -> dict:
    """Open + ``load_state_dict`` at 0%, 50% and 95% of the epoch + first batch (G = 32)."""
    import lance  # noqa: F401  (imported before the clock, as in the cases)

    from prep.reader import ReaderDataset

    steps = ReaderDataset(str(work / "epochs"), global_batch_size=32).schedule.steps[0]
    out = {}
    for frac in (0.0, 0.5, 0.95):
        started = time.perf_counter()
        ds = ReaderDataset(str(work / "epochs"), global_batch_size=32)
        ds.load_state_dict({**ds.state_dict(), "step": int(frac * steps)})
        next(iter(ds))
        out[f"{frac:.0%}"] = time.perf_counter() - started
    return out


# ----------------------------------------------------------------------------- driver
def measure(case: str, g: int, work: Path, runs: int) -> dict | None:
    """Median of ``runs`` fresh processes (per metric)."""
    import resource

    results = []
    for _ in range(runs):
        cmd = [sys.executable, __file__, "--work", str(work), "--_case", f"{case}:{g}"]
        before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - started
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(f"{case} G={g} FAILED: {proc.stderr.strip().splitlines()[-3:]}", flush=True)
            return None
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        results.append({**json.loads(line[7:]), "command_wall_s": wall, "command_cpu_s": cpu})
    return {k: statistics.median(r[k] for r in results) for k in results[0]}


LABELS = {"floor": "pre-shuffled table, sequential to_batches + vectorized pad (floor)",
          "lance": "lance.torch LanceDataset (G-row block shuffle)",
          "hf": "HF datasets + DataLoader(shuffle=True)",
          "prep": "prep.reader, materialized epoch, 32 splits",
          "prep-L": "  the same through Loader (no DataLoader)",
          "planned": "prep.reader, prepared table, on-the-fly random plan (32 splits)",
          "planned-w": "  the same through Loader, 1 forkserver worker process",
          "prep-w1": "  prep.reader materialized through Loader, 1 worker process",
          "prep-w2": "  prep.reader materialized through Loader, 2 worker processes",
          "S32/W32": "prep.reader rank 0 of 32, 32 splits (its own split)",
          "S48/W16": "prep.reader rank 0 of 16, 48 splits (its own 3 splits)",
          "S48/W32": "prep.reader rank 0 of 32, 48 splits (splits shared with rank 1)"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/prep-bench-reader9", help="where the inputs are built (cached)")
    p.add_argument("--runs", type=int, default=3, help="fresh processes per case; the median is kept (default 3)")
    p.add_argument("--batches", default="32,256,1024", help="global batch sizes (default 32,256,1024)")
    p.add_argument("--workers", action="store_true", help="only prep with 0, 1 and 2 worker processes (issue 12)")
    p.add_argument("--elastic", action="store_true", help="only rank 0 of W over S splits, W dividing S or not (issue 20)")
    p.add_argument("--_case", help=argparse.SUPPRESS)
    args = p.parse_args()
    work = Path(args.work)
    if args._case:
        case, g = args._case.split(":")
        print("RESULT " + json.dumps(run_seek(work) if case == "seek" else run_case(case, int(g), work)))
        return
    info = build(work)
    if args.elastic:
        materialize(work, "epochs48", 48)
    print(f"{info['rows']:,} rows, {info['tokens']:,} tokens; {os.cpu_count()} CPUs; median of {args.runs} fresh "
          f"processes per case", flush=True)
    has_hf = _importable("datasets")
    print(f"{'G':>5} {'case':<70} {'M tok/s':>8} {'CPU-s/Mtok':>10} {'first s':>8}  ratios | whole command", flush=True)
    for g in [int(x) for x in args.batches.split(",")]:
        cases = ["floor", "lance"] + (["hf"] if has_hf else []) + ["prep", "prep-L", "planned"] + (["planned-w"] if g == 32 else [])
        cases = ["prep", "prep-w1", "prep-w2"] if args.workers else list(ELASTIC) if args.elastic else cases
        res = {}
        for case in cases:
            r = measure(case, g, work, args.runs)
            if r is None:
                continue
            res[case] = r
            print(f"{g:>5} {LABELS[case]:<70} {r['tok_per_s'] / 1e6:8.1f} {r['cpu_per_mtok']:10.3f} "
                  f"{r['first_s']:8.3f}  {_ratios(case, r, res)} | {r['command_wall_s']:.2f} s wall, "
                  f"{r['command_cpu_s']:.2f} CPU-s", flush=True)
            if args.workers or args.elastic:  # after the first batch: what a long run sees once the workers are up
                base = res["S32/W32" if args.elastic else "prep"]
                print(f"{'':>5} {'  after the first batch':<70} {r['steady_tok_per_s'] / 1e6:8.1f} "
                      f"{r['steady_cpu_per_mtok']:10.3f} {'':>8}  {r['steady_tok_per_s'] / base['steady_tok_per_s']:.2f}x "
                      f"prep tok/s, {r['steady_cpu_per_mtok'] / base['steady_cpu_per_mtok']:.2f}x CPU", flush=True)
    if args.workers or args.elastic:
        return
    seek = measure("seek", 32, work, args.runs)
    if seek:
        print("resume (open + load_state_dict + first batch), materialized epoch, G=32: "
              + ", ".join(f"at {k} {v * 1e3:.0f} ms" for k, v in seek.items() if k.endswith("%")), flush=True)
    if not has_hf:
        print("hf skipped: `datasets` is not installed")


def _ratios(case: str, r: dict, res: dict) -> str:
    """tokens/s and CPU per token against the baselines the goals name."""
    out = []
    bases = ("prep",) if case in ("prep-w1", "prep-w2") else ("S32/W32",) if case in ELASTIC else ("floor", "lance", "hf")
    for base in bases:
        if base in res and base != case and case not in ("floor",):
            b = res[base]
            out.append(f"{r['tok_per_s'] / b['tok_per_s']:.2f}x {base} tok/s, {r['cpu_per_mtok'] / b['cpu_per_mtok']:.2f}x CPU")
    return "; ".join(out)


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    main()
