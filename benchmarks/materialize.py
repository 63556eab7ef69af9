"""Benchmark: materialize-shuffle against a plain copy of the same table, plus 10^10-row planning.

    .venv/bin/python benchmarks/materialize.py --rows 1000000          # the real run (~1 GB table)
    .venv/bin/python benchmarks/materialize.py --rows 50000 --plan-rows 1e8   # a quick check

On one Ray (``--num-cpus``, default 2) and one table of tokenized GSM8K rows
(the real tokenizer; the 7,473 rows repeated with fresh ids up to ``--rows``):

- ``copy``: the ceiling: Ray tasks (one per split) each scan a contiguous range
  of the table and write it as a Lance dataset (default format); no shuffle, no checksum.
- ``copy-2.0``: the same copy written as Lance 2.0, the format of the materialized splits.
- ``random-e1`` / ``random``: ``materialize_shuffle(strategy="random", clump=1)`` (full
  shuffle) for 1 epoch / ``--epochs`` epochs (the gather map pass serves all epochs of a run).
- ``clump64-e1`` / ``clump64``: the same with ``clump=64``.
- ``random-take``: clump 1 forced through the ``take`` path (no gather pass), to
  show why the gather pass exists.

For each: seconds, rows/s, tokens/s, MB/s (Arrow value bytes), the ratio to
the copy (by wall time, and by CPU seconds of all Ray processes, which is
steadier on a shared machine), and peak memory (USS, private memory, of the
largest Ray worker; and RSS of all Ray processes together, sampled every 0.1 s). Then, in a fresh process: planning an epoch of
``--plan-rows`` rows (default 10^10) into 48 splits: enumerate the first
``--plan-sample`` positions of a few splits, locate single rows, and print
that process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import lance  # noqa: E402
import psutil  # noqa: E402

import tables  # noqa: E402
from prep import lance_io  # noqa: E402
from prep.materialize import gather, materialize_shuffle  # noqa: E402
from prep.materialize.job import DEFAULT_LANCE_FORMAT  # noqa: E402


class RssSampler:
    """Peak RSS of this process's descendants (the local Ray), sampled in a thread."""

    def __init__(self, interval: float = 0.1):
        self.interval, self.peak_total, self.peak_worker = interval, 0, 0
        self.cpu, self._cpu0 = 0.0, self._cpu_times()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for p in me.children(recursive=True):
                try:
                    name = " ".join(p.cmdline()[:1])
                    # USS: private memory; RSS would count the object store pages a worker maps
                    rss = p.memory_full_info().uss if "ray::" in name else p.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                if "ray::" in name:
                    self.peak_worker = max(self.peak_worker, rss)
            self.peak_total = max(self.peak_total, total)
            time.sleep(self.interval)

    @staticmethod
    def _cpu_times() -> dict[int, float]:
        out = {}
        for p in [psutil.Process(), *psutil.Process().children(recursive=True)]:
            try:
                c = p.cpu_times()
                out[p.pid] = c.user + c.system
            except psutil.Error:
                pass
        return out

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        now = self._cpu_times()  # CPU seconds of the driver and the Ray processes during the run
        self.cpu = sum(v - self._cpu0.get(pid, 0.0) for pid, v in now.items())


def _copy_range(src: str, dst: str, start: int, stop: int, batch: int, fmt: str | None) -> int:
    ds = lance.dataset(src)
    reader = ds.scanner(offset=start, limit=stop - start, batch_size=batch).to_reader()
    lance.write_dataset(reader, dst, mode="create", max_rows_per_file=1 << 30, data_storage_version=fmt)
    return stop - start


def run_copy(ray, src: str, out: str, splits: int, batch: int, fmt: str | None = None) -> None:
    n = lance.dataset(src).count_rows()
    task = ray.remote(num_cpus=1)(_copy_range)
    os.makedirs(out, exist_ok=True)
    refs = [task.remote(src, f"{out}/part-{s:05d}.lance", s * n // splits, (s + 1) * n // splits, batch, fmt)
            for s in range(splits)]
    assert sum(ray.get(refs)) == n


def plan_check(rows: int, sample: int) -> dict:
    """Runs in a fresh process: planning cost and peak RSS at ``rows`` rows."""
    code = f"""
import json, resource, time, numpy as np
from prep import plan
n, S, sample = {rows}, 48, {sample}
out = {{"rows": n, "splits": S}}
t = time.time(); got = 0
for split in (0, 17, 47):
    for chunk in plan.iter_split_rows(num_rows=n, num_splits=S, split=split, epoch=3, strategy="random", seed=1, chunk_rows=1 << 20):
        got += len(chunk)
        assert chunk.min() >= 0 and chunk.max() < n
        if got >= sample * (1 + (split > 0) + (split > 17)):
            break
dt = time.time() - t
out["positions_enumerated"] = got
out["positions_per_s"] = got / dt
out["split_size"] = plan.split_size(num_rows=n, num_splits=S, split=17, strategy="random", seed=1)
out["est_epoch_cpu_hours"] = n / out["positions_per_s"] / 3600
rng = np.random.default_rng(0)
t = time.time(); ok = 0
for row in rng.integers(0, n, 200):
    s, i = plan.locate_row(row=int(row), num_rows=n, num_splits=S, epoch=3, strategy="random", seed=1)
    back = plan.split_rows_range(num_rows=n, num_splits=S, split=s, epoch=3, strategy="random", seed=1, start=i, stop=i + 1)
    ok += int(back[0] == row)
out["locate_round_trips_ok"] = f"{{ok}}/200"
out["locate_ms"] = (time.time() - t) / 200 * 1000
out["peak_rss_mb"] = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024  # ru_maxrss survives exec
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="table rows (default 1,000,000)")
    ap.add_argument("--splits", type=int, default=48)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per materialization, except *-e1 modes (default 3)")
    ap.add_argument("--modes", default="copy,copy-2.0,random-e1,random,clump64-e1,clump64,random-take")
    ap.add_argument("--lance-format", default=DEFAULT_LANCE_FORMAT, help="format of the materialized splits")
    ap.add_argument("--workdir", default="/tmp/prep-bench-materialize")
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--read-rows", type=int, default=16384)
    ap.add_argument("--plan-rows", type=float, default=1e10)
    ap.add_argument("--plan-sample", type=int, default=3_000_000, help="positions enumerated per planned split")
    ap.add_argument("--skip-plan", action="store_true")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    import ray

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = str(work / f"gsm8k-{args.rows}.lance")
    if not lance_io.table_exists(src):
        t = time.time()
        tables.gsm8k_table(src, num_rows=args.rows, fragment_rows=1 << 18)
        print(f"built {src} in {time.time() - t:.1f}s")
    meta = lance_io.prep_metadata(lance.dataset(src))
    rows, tokens = meta["counts"]["rows_written"], meta["counts"]["tokens"]
    value_bytes = tokens * 5 + rows * (8 + 4 + 4 + 4)  # input_ids int32 + loss_mask int8, id, length, 2 offsets
    print(f"table: {rows:,} rows, {tokens:,} tokens, {value_bytes / 1e6:,.0f} MB of Arrow values; "
          f"{os.cpu_count()} CPUs on this host, Ray gets {args.num_cpus}")

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
    results = {}
    try:
        # warm up: start the workers and import Lance in them, untimed
        run_copy(ray, src, str(work / "warmup"), args.num_cpus * 2, args.read_rows)
        shutil.rmtree(work / "warmup", ignore_errors=True)
        for mode in args.modes.split(","):
            out = str(work / f"out-{mode}")
            shutil.rmtree(out, ignore_errors=True)
            epochs = 1 if mode.startswith("copy") or mode.endswith("-e1") or mode == "random-take" else args.epochs
            with RssSampler() as rss:
                t = time.time()
                if mode.startswith("copy"):
                    run_copy(ray, src, out, args.splits, args.read_rows, mode[5:] or None)
                else:
                    clump = 64 if mode.startswith("clump64") else 1
                    saved = gather.GATHER_BELOW_CLUMP  # read by the driver only (gather._gather_mode)
                    gather.GATHER_BELOW_CLUMP = 1 if mode == "random-take" else saved
                    try:
                        materialize_shuffle(table=src, output=out, epochs=epochs, splits=args.splits, clump=clump,
                                            read_rows=args.read_rows, lance_format=args.lance_format)
                    finally:
                        gather.GATHER_BELOW_CLUMP = saved
                dt = time.time() - t
            r = {"seconds": dt, "cpu_seconds": rss.cpu, "epochs": epochs, "rows_per_s": rows * epochs / dt,
                 "tokens_per_s": tokens * epochs / dt, "mb_per_s": value_bytes * epochs / dt / 1e6,
                 "rows_per_cpu_s": rows * epochs / rss.cpu,
                 "peak_worker_uss_mb": rss.peak_worker / 1e6, "peak_ray_rss_mb": rss.peak_total / 1e6}
            results[mode] = r
            base = results.get("copy")
            r["ratio_to_copy"] = r["rows_per_s"] / base["rows_per_s"] if base else float("nan")
            r["cpu_ratio_to_copy"] = r["rows_per_cpu_s"] / base["rows_per_cpu_s"] if base else float("nan")
            print(f"{mode:13s} {epochs} ep {dt:6.1f}s {r['rows_per_s']:>9,.0f} rows/s {r['tokens_per_s'] / 1e6:5.1f} M tok/s "
                  f"{r['mb_per_s']:6.1f} MB/s  x{r['ratio_to_copy']:4.2f} of copy (by CPU time x{r['cpu_ratio_to_copy']:4.2f})  "
                  f"peak worker USS {r['peak_worker_uss_mb']:,.0f} MB, all Ray RSS {r['peak_ray_rss_mb']:,.0f} MB", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        ray.shutdown()
    print(f"driver peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    if not args.skip_plan:
        p = plan_check(int(args.plan_rows), args.plan_sample)
        results["plan"] = p
        print(f"plan of {p['rows']:,} rows into {p['splits']} splits (split size {p['split_size']:,}): "
              f"{p['positions_enumerated']:,} positions enumerated at {p['positions_per_s'] / 1e6:.1f} M/s "
              f"(a whole epoch: ~{p['est_epoch_cpu_hours']:.1f} CPU-hours, spread over the split tasks); "
              f"locate one row {p['locate_ms']:.2f} ms, round trips {p['locate_round_trips_ok']}; "
              f"peak RSS {p['peak_rss_mb']:,.0f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
