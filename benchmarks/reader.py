"""Reader benchmark: prep.reader against the loaders our users compare it with.

Same rows for every loader: tokenized GSM8K (mistral-v3), repeated with fresh ids
to ``--rows`` rows, plus a packed variant (rows of ``--seq-len`` tokens). Each case
runs in its own subprocess (clean CPU time and peak RSS) for one epoch or
``--max-seconds``, whichever ends first, and delivers torch tensors: batches of 32
rows padded to the batch's longest row (input_ids, labels, attention_mask), or
packed rows.

    (a)  prep.reader on a materialized epoch: DataLoader(ds, batch_size=None), num_workers 0;
         (a32) the same with int32 input_ids/position_ids (labels stay int64);
         (a1)/(a2) the same through prep.reader.Loader with 1 / 2 worker processes
    (b)  HF datasets with_format("numpy") + DataLoader(shuffle=True, batch_size=32, vectorized pad)
    (c)  lance.torch.data.LanceDataset on the prepared table, ShardedBatchSampler(randomize=True)
    (d)  lancedb.streaming.StreamingDataset + DataLoader(batch_size=32, vectorized pad), num_workers 0
    (e)  nanoGPT floor: every token in one np.memmap, random windows stacked (no shuffle quality,
         no resume, no masks)

Benchmark-only dependencies (not runtime deps of prep): ``datasets``, ``lancedb``.
Cases whose library is missing are reported as skipped.

    python benchmarks/reader.py --rows 20000 --max-seconds 10          # quick
    python benchmarks/reader.py --rows 1000000 --max-seconds 60        # the real run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

B = 32  # rows per training batch in every case
SPLITS = 16  # materialized splits: global batch 32 = 2 rows from each split
HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "data")


# ----------------------------------------------------------------------------- data
def build_data(work: str, rows: int, seq_len: int, materialize: str) -> None:
    """Prepared tables (sft + packed), their materialized epoch, an HF dataset and a memmap."""
    import pyarrow as pa

    done = os.path.join(work, f"ready-{rows}-{seq_len}.json")
    if os.path.exists(done):
        return
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.join(SHARED, "tokenizers", "mistral-v3"))
    with open(os.path.join(SHARED, "gsm8k", "train.jsonl")) as f:
        docs = [json.loads(line) for line in f]
    q = tok([d["question"] for d in docs])["input_ids"]
    a = tok([d["answer"] for d in docs], add_special_tokens=False)["input_ids"]
    toks = [np.array(p + r + [tok.eos_token_id], np.int32) for p, r in zip(q, a)]
    masks = [np.r_[np.zeros(len(p), np.int8), np.ones(len(r) + 1, np.int8)] for p, r in zip(q, a)]
    reps = -(-rows // len(toks))
    lengths = np.tile(np.array([len(t) for t in toks], np.int32), reps)[:rows]
    values = np.tile(np.concatenate(toks), reps)[: int(lengths.sum())]
    lmv = np.tile(np.concatenate(masks), reps)[: int(lengths.sum())]
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    ids = (np.arange(rows, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(12345)
    meta = {"format": "prep.table/1", "kind": "sft", "seq_len": None,
            "tokenizer": {"name": "mistral-v3", "eos_id": tok.eos_token_id, "bos_id": tok.bos_token_id,
                          "pad_id": tok.pad_token_id, "vocab_size": len(tok)},
            "counts": {"rows_read": rows, "rows_written": rows, "rows_rejected": 0, "tokens": int(lengths.sum())}}
    sft = pa.table({"id": pa.array(ids), "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
                    "loss_mask": pa.ListArray.from_arrays(pa.array(offsets), pa.array(lmv)), "length": pa.array(lengths)})
    _write(os.path.join(work, "sft.lance"), sft, meta)
    # packed: the same token stream cut into rows of seq_len, position ids restarting per document
    n = len(values) // seq_len
    pos = (np.arange(len(values)) - np.repeat(offsets[:-1], lengths))[: n * seq_len].astype(np.int32)
    fsl = lambda x, t: pa.FixedSizeListArray.from_arrays(pa.array(x[: n * seq_len], t), seq_len)  # noqa: E731
    packed = pa.table({"id": pa.array(ids[:n]), "input_ids": fsl(values, pa.int32()), "loss_mask": fsl(lmv, pa.int8()),
                       "position_ids": fsl(pos, pa.int32()), "length": pa.array(np.full(n, seq_len, np.int32))})
    _write(os.path.join(work, "packed.lance"), packed, {**meta, "kind": "packed", "seq_len": seq_len})
    for name in ("sft", "packed"):
        _materialize(os.path.join(work, f"{name}.lance"), os.path.join(work, f"{name}-out"), materialize)
    # HF datasets copy (Arrow files on disk, memory-mapped like a real HF dataset)
    try:
        import datasets

        for name, table in (("sft", sft), ("packed", packed)):
            datasets.Dataset(table.select(["input_ids", "loss_mask"])).save_to_disk(os.path.join(work, f"hf-{name}"))
    except ImportError:
        pass
    try:  # lancedb 0.40's permutation builder panics on tables written by pylance 14: let it write its own copy
        import lancedb

        db = lancedb.connect(os.path.join(work, "lancedb"))
        for name, table in (("sft", sft), ("packed", packed)):
            db.create_table(name, table.select(["id", "input_ids", "loss_mask"]).replace_schema_metadata(None))
    except ImportError:
        pass
    values.astype(np.uint16).tofile(os.path.join(work, "tokens.bin"))  # nanoGPT: uint16 tokens, no header
    with open(done, "w") as f:
        json.dump({"rows": rows, "tokens": int(lengths.sum()), "packed_rows": n}, f)


def _write(uri: str, table, meta: dict) -> None:
    import lance

    table = table.replace_schema_metadata({b"prep": json.dumps(meta)})
    lance.write_dataset(table, uri, mode="create", max_rows_per_file=1 << 20)


def _materialize(table: str, out: str, how: str) -> None:
    if how == "prep":
        env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1"}
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "prep"), "materialize-shuffle", "--table", table,
                        "--output", out, "--epochs", "1", "--splits", str(SPLITS), "--num-cpus", "2"], check=True, env=env)
        return
    # direct: the documented layout written here with prep.plan (same rows and order, no Ray)
    import lance

    from prep.plan import plan_fingerprint, split_rows
    from prep.storage import write_json_atomic

    ds = lance.dataset(table)
    plan = {"num_splits": SPLITS, "strategy": "random", "hash_columns": ["id"], "clump": 1, "seed": 0, "filter": None,
            "columns": None}
    splits = []
    for s in range(SPLITS):
        rows = split_rows(num_rows=ds.count_rows(), num_splits=SPLITS, split=s, epoch=0, strategy="random")
        rel = f"epoch-00000/split-{s:05d}.lance"
        part = ds.take(np.sort(rows)).take(np.argsort(np.argsort(rows)))
        lance.write_dataset(part.replace_schema_metadata(ds.schema.metadata), os.path.join(out, rel), mode="create")
        splits.append({"split": s, "path": rel, "num_rows": len(rows), "checksum": ""})
    meta = json.loads(ds.schema.metadata[b"prep"])
    write_json_atomic(os.path.join(out, "manifest.json"), {
        "format": "prep.materialized/1", "prep_version": "0.1.0", "fingerprint": plan_fingerprint(table, ds.version, plan),
        "source": {"uri": table, "version": ds.version, "num_rows": ds.count_rows(), "metadata": meta}, "plan": plan,
        "num_selected_rows": ds.count_rows(), "columns": ds.schema.names, "epochs": [{"epoch": 0, "splits": splits}]})


# ----------------------------------------------------------------------------- shared collate
def pad(lists_ids: list, lists_mask: list | None = None, pad_id: int = 0) -> tuple[dict, int]:
    """Vectorized pad of a list of 1-D token arrays (the collate the baselines get)."""
    import torch

    lens = np.fromiter((len(x) for x in lists_ids), np.int64, len(lists_ids))
    mask = np.arange(lens.max()) < lens[:, None]
    ids = np.full(mask.shape, pad_id, np.int64)
    ids[mask] = np.concatenate(lists_ids)
    trained = np.zeros(mask.shape, bool)
    trained[mask] = np.concatenate(lists_mask) if lists_mask is not None else 1
    return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(np.where(trained, ids, -100)),
            "attention_mask": torch.from_numpy(mask.astype(np.int64))}, int(lens.sum())


def pad_arrow(batch) -> tuple[dict, int]:
    """Vectorized pad straight from Arrow offsets (for the Lance baselines)."""
    import torch

    col, lm = batch.column("input_ids"), batch.column("loss_mask")
    if hasattr(col, "flatten") and col.type.__class__.__name__ == "FixedSizeListType":
        w = col.type.list_size
        ids = col.flatten().to_numpy().reshape(-1, w).astype(np.int64)
        lmv = lm.flatten().to_numpy().reshape(-1, w)
        return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(np.where(lmv, ids, -100)),
                "attention_mask": torch.ones(ids.shape, dtype=torch.int64)}, ids.size
    offs = col.offsets.to_numpy()
    lens = np.diff(offs)
    mask = np.arange(lens.max()) < lens[:, None]
    ids = np.zeros(mask.shape, np.int64)
    ids[mask] = col.values.to_numpy()[offs[0]:offs[-1]]
    trained = np.zeros(mask.shape, bool)
    trained[mask] = lm.values.to_numpy()[offs[0]:offs[-1]]
    return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(np.where(trained, ids, -100)),
            "attention_mask": torch.from_numpy(mask.astype(np.int64))}, int(lens.sum())


# ----------------------------------------------------------------------------- cases
def batches_for(case: str, work: str, variant: str, seq_len: int):
    """An iterator of (tensors, real tokens) for one case."""
    import torch
    from torch.utils.data import DataLoader

    out = os.path.join(work, f"{variant}-out")
    if case in ("a", "a1", "a2", "a32"):
        from prep.reader import Loader, ReaderDataset

        ds = ReaderDataset(out, global_batch_size=B, token_dtype=torch.int32 if case == "a32" else torch.int64)
        loader = DataLoader(ds, batch_size=None) if case in ("a", "a32") else Loader(ds, num_workers=int(case[1]))
        return ((b, b.num_tokens) for b in loader)
    if case == "b":
        import datasets

        hf = datasets.load_from_disk(os.path.join(work, f"hf-{variant}")).with_format("numpy")
        collate = lambda rows: pad([r["input_ids"] for r in rows], [r["loss_mask"] for r in rows])  # noqa: E731
        return iter(DataLoader(hf, batch_size=B, shuffle=True, collate_fn=collate, num_workers=0))
    if case == "c":
        from lance.sampler import ShardedBatchSampler
        from lance.torch.data import LanceDataset

        ds = LanceDataset(os.path.join(work, f"{variant}.lance"), batch_size=B, columns=["input_ids", "loss_mask"],
                          sampler=ShardedBatchSampler(0, 1, randomize=True), to_tensor_fn=lambda b, **kw: pad_arrow(b))
        return iter(DataLoader(ds, batch_size=None, num_workers=0))
    if case == "d":
        import lancedb
        from lancedb.streaming import StreamingDataset

        table = lancedb.connect(os.path.join(work, "lancedb")).open_table(variant)
        ds = StreamingDataset(table, columns=["input_ids", "loss_mask"], shuffle_seed=0)
        collate = lambda rows: pad([np.asarray(r["input_ids"]) for r in rows],  # noqa: E731
                                   [np.asarray(r["loss_mask"]) for r in rows])
        return iter(DataLoader(ds, batch_size=B, collate_fn=collate, num_workers=0))
    if case == "e":
        block = seq_len if variant == "packed" else 192  # ~ the mean GSM8K row (191 tokens)
        path = os.path.join(work, "tokens.bin")

        def get_batch():  # nanoGPT train.py get_batch, verbatim in spirit
            data = np.memmap(path, dtype=np.uint16, mode="r")
            ix = torch.randint(len(data) - block - 1, (B,))
            x = torch.stack([torch.from_numpy(data[i:i + block].astype(np.int64)) for i in ix])
            y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block].astype(np.int64)) for i in ix])
            return {"x": x, "y": y}, B * block

        total = os.path.getsize(path) // 2
        return (get_batch() for _ in range(total // (B * block)))
    raise ValueError(case)


def _preimport(case: str) -> None:
    """Import what a case needs before the clock starts (imports are not reading)."""
    import torch  # noqa: F401
    from torch.utils.data import DataLoader  # noqa: F401

    reader = ["prep.reader", "lance"]
    modules = {"a": reader, "a1": reader, "a2": reader, "a32": reader, "b": ["datasets"],
               "c": ["lance.torch.data", "lance.sampler"], "d": ["lancedb", "lancedb.streaming"], "e": []}[case]
    for name in modules:
        __import__(name)


def _peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss it does not inherit the parent's peak across exec)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


class _Descendants:
    """Samples this process + all its descendants (DataLoader workers and the forkserver they are
    forked from, which is not their parent: rusage of children misses them) every 0.1 s."""

    def __init__(self) -> None:
        import threading

        import psutil

        self.peak, self._me, self._stop = 0, psutil.Process(), threading.Event()
        self._cpu: dict[int, float] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            rss = self._me.memory_info().rss
            for p in self._me.children(recursive=True):
                try:
                    rss += p.memory_info().rss
                    t = p.cpu_times()
                    self._cpu[p.pid] = t.user + t.system
                except Exception:  # a worker exiting between listing and reading
                    pass
            self.peak = max(self.peak, rss)

    def stop(self) -> tuple[float, float]:
        """(peak RSS of this process + descendants in MiB, CPU seconds of the descendants)."""
        self._stop.set()
        self._thread.join()
        return self.peak / 2**20, sum(self._cpu.values())


def run_case(case: str, work: str, variant: str, seq_len: int, max_seconds: float) -> dict:
    _preimport(case)
    sampler = _Descendants()
    started, cpu0 = time.perf_counter(), time.process_time()
    it = batches_for(case, work, variant, seq_len)
    first, rows, tokens = None, 0, 0
    for tensors, n in it:
        if first is None:
            first = time.perf_counter() - started
        rows += next(iter(tensors.values())).shape[0]
        tokens += n
        if time.perf_counter() - started > max_seconds:
            break
    wall = time.perf_counter() - started
    close = getattr(it, "close", None)
    if close:
        close()
    del it
    import gc

    gc.collect()
    total_rss, descendants_cpu = sampler.stop()
    cpu = time.process_time() - cpu0 + descendants_cpu
    return {"case": case, "variant": variant, "rows": rows, "tokens": tokens, "wall_s": wall, "cpu_s": cpu,
            "rows_per_s": rows / wall, "tok_per_s": tokens / wall, "cpu_s_per_mtok": cpu / max(tokens, 1) * 1e6,
            "first_batch_s": first, "peak_rss_mib": _peak_rss_mib(), "peak_total_rss_mib": total_rss}


def run_seek(work: str, variant: str) -> dict:
    """Open + load_state_dict at 0%, 50%, 95% of the epoch + first batch."""
    import lance  # noqa: F401  (imported before the clock, as in the cases)

    from prep.reader import ReaderDataset

    out = os.path.join(work, f"{variant}-out")
    steps = ReaderDataset(out, global_batch_size=B).schedule.steps[0]
    res = {"case": "seek", "variant": variant, "steps": steps}
    for frac in (0.0, 0.5, 0.95):
        t0 = time.perf_counter()
        ds = ReaderDataset(out, global_batch_size=B)
        ds.load_state_dict({**ds.state_dict(), "step": int(frac * steps)})
        batch = next(iter(ds))
        res[f"{int(frac * 100)}%"] = time.perf_counter() - t0
        assert batch.step == int(frac * steps)
    return res


# ----------------------------------------------------------------------------- driver
CASES = {"a": "prep.reader, num_workers=0", "a32": "prep.reader, int32 input_ids",
         "a1": "prep.reader Loader, num_workers=1",
         "a2": "prep.reader Loader, num_workers=2", "b": "HF datasets + DataLoader(shuffle)",
         "c": "lance.torch LanceDataset (shuffled batches)", "d": "lancedb StreamingDataset",
         "e": "nanoGPT memmap floor"}
NEEDS = {"b": "datasets", "d": "lancedb"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of tokenized GSM8K (repeated) (default 1M)")
    p.add_argument("--seq-len", type=int, default=2048, help="packed variant row length (default 2048)")
    p.add_argument("--work", default="/tmp/prep-bench-reader", help="where the data is built (cached)")
    p.add_argument("--max-seconds", type=float, default=60.0, help="stop a case after this long (default 60)")
    p.add_argument("--cases", default="a,a32,a1,a2,b,c,d,e", help="comma-separated cases (default all)")
    p.add_argument("--variants", default="sft,packed", help="sft and/or packed (default both)")
    p.add_argument("--materialize", choices=["prep", "direct"], default="prep",
                   help="write the epoch with `prep materialize-shuffle` (default) or directly with prep.plan")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--_case", help=argparse.SUPPRESS)
    p.add_argument("--_variant", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._case and args._case != "build":  # a subprocess running one case
        res = run_seek(args.work, args._variant) if args._case == "seek" else \
            run_case(args._case, args.work, args._variant, args.seq_len, args.max_seconds)
        print("RESULT " + json.dumps(res))
        return
    t0 = time.time()
    if args._case == "build":
        build_data(args.work, args.rows, args.seq_len, args.materialize)
        return
    # build in a child: this driver stays small, so the cases' peak RSS is their own
    subprocess.run([sys.executable, __file__, "--work", args.work, "--rows", str(args.rows), "--seq-len",
                    str(args.seq_len), "--materialize", args.materialize, "--_case", "build"], check=True)
    with open(os.path.join(args.work, f"ready-{args.rows}-{args.seq_len}.json")) as f:
        info = json.load(f)
    print(f"data: {info['rows']:,} rows, {info['tokens']:,} tokens; packed: {info['packed_rows']:,} rows of "
          f"{args.seq_len} (built or found in {time.time() - t0:.0f} s); {os.cpu_count()} CPUs", flush=True)
    results = []
    for variant in args.variants.split(","):
        for case in args.cases.split(",") + ["seek"]:
            if case in NEEDS and not _importable(NEEDS[case]):
                print(f"{variant:6s} {case:4s} skipped: {NEEDS[case]} is not installed", flush=True)
                continue
            cmd = [sys.executable, __file__, "--work", args.work, "--seq-len", str(args.seq_len),
                   "--max-seconds", str(args.max_seconds), "--_case", case, "--_variant", variant]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                print(f"{variant:6s} {case:4s} FAILED: {proc.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            res = json.loads(line[len("RESULT "):])
            results.append(res)
            print(_fmt(res), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"data": info, "results": results}, f, indent=2)


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _fmt(r: dict) -> str:
    if r["case"] == "seek":
        return (f"{r['variant']:6s} seek  open + resume + first batch at 0% {r['0%'] * 1e3:.0f} ms, "
                f"50% {r['50%'] * 1e3:.0f} ms, 95% {r['95%'] * 1e3:.0f} ms ({r['steps']} steps an epoch)")
    return (f"{r['variant']:6s} {r['case']:4s} {CASES[r['case']]:44s} {r['rows_per_s']:>10,.0f} rows/s "
            f"{r['tok_per_s']:>13,.0f} tok/s {r['cpu_s_per_mtok']:8.4f} CPU-s/Mtok  first batch "
            f"{r['first_batch_s'] * 1e3:7.0f} ms  peak RSS {r['peak_rss_mib']:6.0f} MiB"
            + (f" (with workers {r['peak_total_rss_mib']:.0f} MiB)" if r["case"] in ("a1", "a2") else "")
            + f"  ({r['rows']:,} rows, {r['wall_s']:.1f} s)")


if __name__ == "__main__":
    main()
