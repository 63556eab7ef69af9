"""Remote benchmark: prewarm and the reader cache against an S3 endpoint with added latency.

Setup (cached per run in ``--work``): a local ``moto_server`` S3 endpoint, the tests' fault proxy
in front of it adding ``--latency-ms`` to every request (default 20 ms: "looks like real object
storage"), a synthetic token table (``--rows`` rows of up to 512 tokens) materialized to
``s3://bench/out`` as 1 epoch x 16 splits. Every case runs in a fresh process; the parent
times the whole process (start to exit) beside the job alone, and takes CPU time from the
child's rusage (the machine is shared: compare CPU beside wall).

    copy      plain parallel s3fs ``get`` of every split file (the ceiling for prewarm)
    prewarm   ``prep prewarm`` into an empty cache (fetch + verify)
    remote    prep.reader straight from s3:// (no cache)
    cold      prep.reader with an empty ``cache_dir`` (the two-stage path)
    warm      prep.reader with the cache prewarm filled
    local     prep.reader on a local copy of the output (the local-disk baseline)
    cold-train, warm-train   cold and warm with a trainer's step (``--step-ms`` per batch, default 5 ms):
              the case the cache is for, where reading is not the only thing the process does

    python benchmarks/remote.py                     # 3 runs per case, 20 ms latency
    python benchmarks/remote.py --runs 1 --latency-ms 0 --rows 50000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workdir import work_folder  # benchmarks/ is the script's folder, so on sys.path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

BUCKET = "bench"
CASES = ("copy", "prewarm", "remote", "cold", "warm", "local", "cold-train", "warm-train")
GLOBAL_BATCH = 256
READ_BYTES = 8 << 20  # reads of 8 MB: an epoch is many reads, as on a real data set (the default is 64 MB)


# ----------------------------------------------------------------------------- one case (child process)
def run_case(case: str, endpoint: str, work: Path, step_ms: float) -> dict:
    from prep.io import storage
    from prep.reader import ReaderDataset

    s3 = storage.S3Options(endpoint_url=endpoint)
    out = f"s3://{BUCKET}/out"
    t0 = time.perf_counter()
    if case == "copy":
        fs, path = storage.filesystem(out, s3)
        files = [f for f in fs.find(path) if "/epoch-" in f]
        dest = work / "copy"
        shutil.rmtree(dest, ignore_errors=True)
        fs.get(files, [str(dest / f[len(path) + 1:]) for f in files])
        result = {"bytes": sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())}
    elif case == "prewarm":
        from prep.cache.prewarm import prewarm

        shutil.rmtree(work / "prewarm-cache", ignore_errors=True)
        result = {"bytes": prewarm(out, cache=str(work / "prewarm-cache"), s3=s3)["bytes"]}
    else:
        training = case.endswith("-train")
        case = case.removesuffix("-train")
        path, kw = {"remote": (out, {}), "cold": (out, {"cache_dir": str(work / "cold-cache")}),
                    "warm": (out, {"cache_dir": str(work / "warm-cache")}), "local": (str(work / "warm-cache"), {})}[case]
        if case == "cold":
            shutil.rmtree(work / "cold-cache", ignore_errors=True)
        ds = ReaderDataset(path, global_batch_size=GLOBAL_BATCH, s3=s3, read_bytes=READ_BYTES, **kw)
        opened = time.perf_counter()
        tokens = 0
        for batch in ds:
            tokens += batch.num_tokens
            if training:
                time.sleep(step_ms / 1e3)
        result = {"tokens": tokens, "status": ds.status_line(), "epoch_s": time.perf_counter() - opened}
    result["job_s"] = time.perf_counter() - t0
    return result


# ----------------------------------------------------------------------------- setup and driver (parent)
def setup(work: Path, rows: int) -> tuple[subprocess.Popen, str]:
    """moto_server with the materialized output in it (moto keeps data in memory: built every run)."""
    import boto3

    import tables
    from conftest import free_port
    from prep.io import storage
    from prep.materialize import materialize_shuffle
    from prep.cache.prewarm import prewarm

    port = free_port()
    moto = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    s3 = storage.S3Options(endpoint_url=endpoint)
    table = f"s3://{BUCKET}/table.lance"
    tables.synthetic_table(table, num_rows=rows, max_len=512, storage_options=storage.lance_storage_options(table, s3))
    materialize_shuffle(table=table, output=f"s3://{BUCKET}/out", epochs=1, splits=16, s3=s3, executor="local")
    shutil.rmtree(work / "warm-cache", ignore_errors=True)
    prewarm(f"s3://{BUCKET}/out", cache=str(work / "warm-cache"), s3=s3)  # the warm and local cases read this
    return moto, endpoint


def measure(case: str, endpoint: str, work: Path, step_ms: float) -> dict:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "PYTHONPATH": str(REPO),
           "TOKENIZERS_PARALLELISM": "false"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--case", case, "--endpoint", endpoint, "--work", str(work),
                           "--step-ms", str(step_ms)],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"case {case} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(process_s=wall, cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, default=None, help="scratch directory (default: a new temp dir)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--rows", type=int, default=100_000, help="rows of the synthetic table (default 100,000: ~100 MB)")
    p.add_argument("--latency-ms", type=float, default=20.0, help="added to every request by the proxy (default 20)")
    p.add_argument("--cases", type=lambda t: t.split(","), default=list(CASES), help="comma-separated subset of the cases")
    p.add_argument("--step-ms", type=float, default=5.0, help="the trainer's step in the *-train cases (default 5)")
    args = p.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.endpoint, args.work, args.step_ms)))
        return
    from fault_proxy import FaultProxy

    work = work_folder(args.work or tempfile.mkdtemp(prefix="prep-bench-remote-"))
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1")
    moto, endpoint = setup(work, args.rows)
    try:
        with FaultProxy(endpoint, latency_s=args.latency_ms / 1e3) as proxy:
            results = {c: [measure(c, proxy.url, work, args.step_ms) for _ in range(args.runs)] for c in args.cases}
    finally:
        moto.terminate()
    print(f"{args.rows:,} rows, 16 splits, {args.latency_ms:g} ms added per request, median of {args.runs} runs")
    print("job: the copy, or opening the reader + one epoch; epoch: the epoch alone; process: start to exit")
    print(f"{'case':8} {'job s':>7} {'epoch s':>8} {'process s':>9} {'cpu s':>7}  rate")
    keys = ("job_s", "epoch_s", "process_s", "cpu_s")
    med = {c: {k: statistics.median(r.get(k, r["job_s"]) for r in rs) for k in keys} for c, rs in results.items()}
    for c, rs in results.items():
        m = med[c]
        rate = (f"{statistics.median(r['bytes'] for r in rs) / m['job_s'] / 1e6:,.1f} MB/s" if "bytes" in rs[0]
                else f"{statistics.median(r['tokens'] for r in rs) / m['epoch_s'] / 1e6:,.2f} M tok/s")
        print(f"{c:8} {m['job_s']:7.2f} {m['epoch_s']:8.2f} {m['process_s']:9.2f} {m['cpu_s']:7.2f}  {rate}")
    ratios = [("prewarm / copy throughput", "copy", "prewarm", "job_s", "goal >= 0.8"),
              ("cold / warm epoch time", "cold", "warm", "epoch_s", "reading flat out"),
              ("cold / warm epoch time", "cold-train", "warm-train", "epoch_s", f"{args.step_ms:g} ms step, goal <= 1.2"),
              ("warm / local epoch time", "warm", "local", "epoch_s", "goal: 1.0 within noise")]
    for label, a, b, key, note in ratios:
        if a in med and b in med:  # throughput ratio = inverse time ratio: copy time / prewarm time
            print(f"{label:26} {med[a][key] / med[b][key]:.2f}x ({note})")
    print("last status lines:")
    for c in ("remote", "cold", "warm", "cold-train"):
        if c in results:
            print(f"  {c}: {results[c][-1]['status']}")


if __name__ == "__main__":
    main()
