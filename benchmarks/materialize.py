"""Benchmark: `prep materialize-shuffle` against ten lines of Lance on the same table, plus 10^10-row planning.

    .venv/bin/python benchmarks/materialize.py                  # the issue's workload (GSM8K train x16)
    .venv/bin/python benchmarks/materialize.py --repeat 2 --runs 1 --skip-plan   # a quick check
    .venv/bin/python benchmarks/materialize.py --repeat 134 --splits 48 --runs 1 --skip-ray --skip-plan \
        --before /tmp/prep-before          # 1 M rows, 194 M tokens; before/after in one run (docs/materialize.md)

The table: GSM8K train repeated ``--repeat`` times (16: 119,568 rows, 23.1 M
tokens) as one JSONL of ``{"text": question + "\\n" + answer}`` rows, prepared
by ``prep pretokenize`` (``format: pretrain``, the Mistral v3 tokenizer) and
cached in ``--workdir``. Each row below is the median of ``--runs`` (3) runs,
each in a fresh process:

- ``copy``: a Lance sequential scan -> ``write_dataset`` (default format): the copy ceiling.
- ``take``: ``take(full permutation)`` -> ``write_dataset`` in one process: what ten
  lines of user code do.
- ``cmd``: ``prep materialize-shuffle --epochs 1 --splits 32 [--clump 64]`` as a
  subprocess, timed from process start to exit (what a user waits for).
- ``job``: ``materialize_shuffle(...)`` alone in a fresh process (imports excluded):
  resolve, split writing, manifest.
- ``...-3ep``: full random, three epochs in one run (the job compared with three copies).
- ``ray-job``: the same on the Ray executor, Ray started before the clock (what a
  cluster run pays per job), to compare the two executors.
- ``before-job...``: with ``--before DIR``, the job rows again with the ``prep`` package of
  ``DIR`` (e.g. ``git archive COMMIT | tar -x -C DIR``), each right after its own row: a
  before/after on about the same load.

Baselines and jobs are timed around the operation (imports excluded); ``cmd``
includes everything. CPU seconds are the process's (all threads; for
``ray-job`` also every Ray process), steadier than wall time on a shared
machine. Ratios: ``cmd / take`` by wall time (goal <= 1.5), and the copy's
time over the job's (throughput relative to the copy, times the epochs; goals >= 0.5 for
clump 1, >= 0.8 for clump 64), by wall and by CPU time. ``peak MB`` is the stage process's
peak RSS (VmHWM). Then, in a fresh process:
planning an epoch of ``--plan-rows`` rows (default 10^10) into 48 splits in bounded memory.

Mixtures (``--mixture-only`` runs just this part, ``--skip-mixture`` leaves it out):
three tables of one tokenizer -- the GSM8K table above, Tiny Shakespeare's paragraphs
(``prep pretokenize``, pretrain rows, ``--repeat`` copies) and synthetic long documents
(1,000-4,000 random tokens) -- mixed by rows with weights proportional to their sizes
(so one epoch uses each row about once), against the concatenation of the three tables
materialized as one table (the same output rows): ``mix-job`` / ``concat-job``
(goal <= 1.1x) and the whole commands ``mix-cmd`` / ``concat-cmd``, by wall and by CPU time.
The concatenation is written in one piece (one Lance fragment), while ``prep pretokenize`` writes a
fragment per chunk (the GSM8K and Shakespeare sources: 62 and 19 at ``--repeat 32``), and a holder
keeps the rows as Lance returns them, a piece per fragment (:mod:`prep.materialize.rows.held`), so the
job also runs on ``concat-frag``: the same rows, one table, with the sources' fragments
(``mix-job`` / ``concat-frag-job``).
Mixture and single-table runs alternate, and the ratio is also given pair by pair (median and
range): the same work's CPU drifts by up to a quarter over minutes on a shared machine, and runs
taken in blocks turned that drift into the ratio.
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
import time
from pathlib import Path

from workdir import work_folder  # benchmarks/ is the script's folder, so on sys.path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
GSM8K = SHARED / "gsm8k" / "train.jsonl"
TOKENIZER = SHARED / "tokenizers" / "mistral-v3"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false", "RAY_DISABLE_USAGE_STATS": "1"}


def build_table(workdir: Path, repeat: int) -> Path:
    """The prepared table of the issue's workload, built once with `prep pretokenize` and cached."""
    table = workdir / f"gsm8k-x{repeat}-pretrain.lance"
    if (table / "_versions").exists():
        return table
    corpus = workdir / f"gsm8k-x{repeat}-text.jsonl"
    rows = [json.loads(line) for line in GSM8K.open()]
    with corpus.open("w") as f:
        for _ in range(repeat):
            for r in rows:
                f.write(json.dumps({"text": r["question"] + "\n" + r["answer"]}) + "\n")
    config = workdir / "pretokenize.yaml"
    config.write_text(f"input: {corpus}\noutput: {table}\ntokenizer: {TOKENIZER}\nformat: pretrain\n")
    subprocess.run([sys.executable, "-m", "prep", "pretokenize", "--config", str(config), "--overwrite"],
                   env=ENV, cwd=REPO, check=True)
    return table


def build_mixture_tables(workdir: Path, repeat: int, gsm8k: Path) -> tuple[Path, Path]:
    """The mixture file over GSM8K, Shakespeare and long synthetic documents, and their concatenation as one table."""
    import lance
    import numpy as np
    import pyarrow as pa

    mix_file, concat = workdir / f"mix-x{repeat}.yaml", workdir / f"mix-x{repeat}-concat.lance"
    if mix_file.exists() and (concat / "_versions").exists() and (concat_frag(concat) / "_versions").exists():
        return mix_file, concat
    shakespeare = workdir / f"shakespeare-x{repeat}-pretrain.lance"
    corpus = workdir / f"shakespeare-x{repeat}.jsonl"
    paragraphs = [p for p in (SHARED / "tinyshakespeare" / "input.txt").read_text().split("\n\n") if p.strip()]
    with corpus.open("w") as f:
        for _ in range(repeat):
            f.writelines(json.dumps({"text": p}) + "\n" for p in paragraphs)
    config = workdir / "pretokenize-shakespeare.yaml"
    config.write_text(f"input: {corpus}\noutput: {shakespeare}\ntokenizer: {TOKENIZER}\nformat: pretrain\n")
    subprocess.run([sys.executable, "-m", "prep", "pretokenize", "--config", str(config), "--overwrite"],
                   env=ENV, cwd=REPO, check=True)
    base = lance.dataset(str(gsm8k))
    schema = base.schema  # the same columns and the same prep metadata (kind, tokenizer hash)
    rng = np.random.default_rng(0)
    n = 500 * repeat
    lengths = rng.integers(1000, 4001, n).astype(np.int32)
    offsets = pa.array(np.r_[0, np.cumsum(lengths)].astype(np.int32))
    tokens = rng.integers(3, 32768, int(lengths.sum()), dtype=np.int32)
    long_docs = pa.table([pa.array(np.arange(n, dtype=np.uint64) + np.uint64(1 << 40)),
                          pa.ListArray.from_arrays(offsets, pa.array(tokens)),
                          pa.ListArray.from_arrays(offsets, pa.array(np.ones(len(tokens), np.int8))),
                          pa.array(lengths)], schema=schema)
    synthetic = workdir / f"long-x{repeat}.lance"
    lance.write_dataset(long_docs, str(synthetic), mode="overwrite")
    tables = [gsm8k, shakespeare, synthetic]
    rows = [lance.dataset(str(t)).count_rows() for t in tables]
    mix_file.write_text("weight_by: rows\nglobal_batch: 64\nsources:\n" + "".join(
        f"  - {{table: {t}, weight: {r}}}\n" for t, r in zip(tables, rows)))
    parts = (lance.dataset(str(t)).to_table().replace_schema_metadata(schema.metadata) for t in tables)
    lance.write_dataset(pa.concat_tables(parts), str(concat), mode="overwrite")
    mode = "overwrite"
    for t in tables:  # the same rows again, a fragment per source fragment
        for fragment in lance.dataset(str(t)).get_fragments():
            lance.write_dataset(fragment.to_table().replace_schema_metadata(schema.metadata), str(concat_frag(concat)),
                                mode=mode)
            mode = "append"
    return mix_file, concat


def concat_frag(concat: Path) -> Path:
    """Where the concatenation with the sources' fragments is written, beside ``concat``."""
    return concat.with_name(concat.name.replace("-concat", "-concat-frag"))


def _cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _peak_mb() -> float:
    return int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) / 1024


def stage(name: str, table: str, out: str, clump: int, splits: int, epochs: int = 1) -> dict:
    """One measurement in this (fresh) process: the operation's wall and CPU seconds, and the peak RSS."""
    import lance
    import numpy as np

    shutil.rmtree(out, ignore_errors=True)
    if name in ("copy", "take"):
        ds = lance.dataset(table)
        t, c = time.perf_counter(), _cpu_self()
        if name == "copy":
            lance.write_dataset(ds.scanner().to_reader(), out)
        else:
            lance.write_dataset(ds.take(np.random.default_rng(0).permutation(ds.count_rows())), out)
        return {"seconds": time.perf_counter() - t, "cpu_seconds": _cpu_self() - c, "peak_mb": _peak_mb()}
    from prep.materialize import materialize_mixture, materialize_shuffle

    if name == "mix-job":  # ``table`` is the mixture file here
        t, c = time.perf_counter(), _cpu_self()
        materialize_mixture(mixture=table, output=out, epochs=epochs, splits=splits, executor="local")
        return {"seconds": time.perf_counter() - t, "cpu_seconds": _cpu_self() - c, "peak_mb": _peak_mb()}
    kw = dict(table=table, output=out, epochs=epochs, splits=splits, clump=clump)
    if name in ("job", "concat-job", "concat-frag-job"):
        t, c = time.perf_counter(), _cpu_self()
        materialize_shuffle(executor="local", **kw)
        return {"seconds": time.perf_counter() - t, "cpu_seconds": _cpu_self() - c, "peak_mb": _peak_mb()}
    import psutil

    from prep.runtime.ray_cluster import init_ray

    init_ray(num_cpus=os.cpu_count())

    def cpu_all() -> float:
        total = 0.0
        for p in [psutil.Process(), *psutil.Process().children(recursive=True)]:
            try:
                total += sum(p.cpu_times()[:2])
            except psutil.Error:
                pass
        return total

    t, c = time.perf_counter(), cpu_all()
    materialize_shuffle(executor="ray", **kw)
    return {"seconds": time.perf_counter() - t, "cpu_seconds": cpu_all() - c, "peak_mb": _peak_mb()}


def fresh(name: str, table: Path, out: Path, clump: int, splits: int, epochs: int = 1, code: Path = REPO) -> dict:
    """``stage`` in a fresh process, with the ``prep`` package of ``code``; for ``cmd``, the prep
    command itself, process start to exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    if name in ("cmd", "concat-cmd", "mix-cmd"):
        shutil.rmtree(out, ignore_errors=True)
        what = ["--mixture", str(table)] if name == "mix-cmd" else ["--table", str(table), "--clump", str(clump)]
        cmd = [sys.executable, "-m", "prep", "materialize-shuffle", *what, "--output", str(out),
               "--epochs", str(epochs), "--splits", str(splits)]
        env = {k: v for k, v in ENV.items() if k != "RAY_ADDRESS"}  # one machine, no cluster: what a user runs
        subprocess.run(cmd, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {"seconds": time.perf_counter() - t,
                "cpu_seconds": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}
    proc = subprocess.run([sys.executable, __file__, "--stage", name, "--table", str(table), "--out", str(out),
                           "--clump", str(clump), "--splits", str(splits), "--epochs", str(epochs)],
                          env={**ENV, "PYTHONPATH": str(code)}, cwd=code, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"stage {name} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def plan_check(rows: int, sample: int) -> dict:
    """Runs in a fresh process: planning cost and peak RSS at ``rows`` rows."""
    code = f"""
import json, time, numpy as np
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
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=ENV, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=16, help="GSM8K train copies in the table (default 16)")
    ap.add_argument("--splits", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3, help="fresh-process runs per row; the median is printed (default 3)")
    ap.add_argument("--workdir", default="/tmp/prep-bench-materialize")
    ap.add_argument("--skip-ray", action="store_true", help="leave out the ray-job rows")
    ap.add_argument("--plan-rows", type=float, default=1e10)
    ap.add_argument("--plan-sample", type=int, default=3_000_000, help="positions enumerated per planned split")
    ap.add_argument("--skip-plan", action="store_true")
    ap.add_argument("--skip-mixture", action="store_true", help="leave out the mixture rows")
    ap.add_argument("--mixture-only", action="store_true", help="only the mixture rows")
    ap.add_argument("--before", type=Path, help="a checkout of prep whose job rows are measured too (before/after)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--clump", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--epochs", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage:
        print(json.dumps(stage(args.stage, args.table, args.out, args.clump, args.splits, args.epochs)))
        return

    work = work_folder(args.workdir)
    table = build_table(work, args.repeat)
    import lance

    if not args.skip_mixture:
        mixture_rows(work, table, args)
    if args.mixture_only:
        return
    ds = lance.dataset(str(table))
    print(f"table: {table} ({ds.count_rows():,} rows, Lance {ds.data_storage_version}); {os.cpu_count()} CPUs; "
          f"load average before: {os.getloadavg()[0]:.1f} (a shared machine: compare CPU seconds too)")
    # (key, stage, clump, epochs, code)
    rows = [("copy", "copy", 1, 1, REPO), ("take", "take", 1, 1, REPO)]
    for clump in (1, 64):
        rows += [(f"cmd-clump{clump}", "cmd", clump, 1, REPO), (f"job-clump{clump}", "job", clump, 1, REPO)]
        if clump == 1:
            rows += [("cmd-clump1-3ep", "cmd", 1, 3, REPO), ("job-clump1-3ep", "job", 1, 3, REPO)]
        if not args.skip_ray:
            rows.append((f"ray-job-clump{clump}", "ray-job", clump, 1, REPO))
    if args.before:  # each job row right after the same row before, so that both see about the same load
        rows = [row for key, stage_, clump, epochs, code in rows for row in (
            [(key, stage_, clump, epochs, code)]
            + ([(f"before-{key}", stage_, clump, epochs, args.before.resolve())] if stage_ == "job" else []))]
    results: dict[str, dict] = {}
    for key, name, clump, epochs, code in rows:
        runs = [fresh(name, table, work / "out", clump, args.splits, epochs, code) for _ in range(args.runs)]
        results[key] = {k: statistics.median(r[k] for r in runs) for k in ("seconds", "cpu_seconds")}
        results[key]["peak_mb"] = max(r.get("peak_mb", 0.0) for r in runs)
        results[key]["epochs"] = epochs
        results[key]["runs_seconds"] = [round(r["seconds"], 3) for r in runs]
    shutil.rmtree(work / "out", ignore_errors=True)
    copy, take = results["copy"], results["take"]
    print(f"{'row':24s} {'wall s':>7s} {'CPU s':>7s} {'peak MB':>8s}  ratios (median of {args.runs}, each in a fresh process)")
    for key, r in results.items():
        note, e = "", r["epochs"]
        if key.startswith("cmd"):
            note = (f"cmd/take{f' (x{e})' if e > 1 else ''}: {r['seconds'] / take['seconds'] / e:.2f}x wall (goal <= 1.5), "
                    f"{r['cpu_seconds'] / take['cpu_seconds'] / e:.2f}x CPU")
        elif "job" in key:
            goal = 0.8 if "clump64" in key else 0.5
            note = (f"vs {f'{e} copies' if e > 1 else 'copy'}: {e * copy['seconds'] / r['seconds']:.2f}x by wall "
                    f"(goal >= {goal}), {e * copy['cpu_seconds'] / r['cpu_seconds']:.2f}x by CPU")
        peak = f"{r['peak_mb']:8.0f}" if r.get("peak_mb") else f"{'':8s}"
        print(f"{key:24s} {r['seconds']:7.2f} {r['cpu_seconds']:7.2f} {peak}  {note}")
        r["note"] = note
    print(f"load average after: {os.getloadavg()[0]:.1f}")
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


def mixture_rows(work: Path, gsm8k: Path, args: argparse.Namespace) -> None:
    """The three-table mixture against its concatenation materialized as one table (module docstring)."""
    import lance

    mix_file, concat = build_mixture_tables(work, args.repeat, gsm8k)
    print(f"mixture: {mix_file} ({mix_file.read_text().count('table:')} tables), concatenation {concat} "
          f"({lance.dataset(str(concat)).count_rows():,} rows); load average before: {os.getloadavg()[0]:.1f}")
    results: dict = {}
    names = {"job": ("concat-job", "concat-frag-job", "mix-job"), "cmd": ("concat-cmd", "mix-cmd")}
    tables = {"mix": mix_file, "concat-frag": concat_frag(concat), "concat": concat}
    runs: dict[str, list[dict]] = {name: [] for kind in names.values() for name in kind}
    for kind in ("job", "cmd"):
        for _ in range(args.runs):  # alternating: the machine's speed drifts over minutes, a pair shares it
            for name in names[kind]:
                runs[name].append(fresh(name, tables[name.rsplit("-", 1)[0]], work / "out", 1, args.splits))
    for name, done in runs.items():
        results[name] = {k: statistics.median(r[k] for r in done) for k in ("seconds", "cpu_seconds")}
        results[name]["runs_seconds"] = [round(r["seconds"], 3) for r in done]
        results[name]["runs_cpu_seconds"] = [round(r["cpu_seconds"], 3) for r in done]
    shutil.rmtree(work / "out", ignore_errors=True)
    print(f"{'row':22s} {'wall s':>7s} {'CPU s':>7s}  (median of {args.runs}, each in a fresh process, "
          "mixture and single table alternating)")
    for name, r in results.items():
        print(f"{name:22s} {r['seconds']:7.2f} {r['cpu_seconds']:7.2f}")
        if not name.startswith("mix"):
            continue
        for single in [n for n in names[name.split("-")[-1]] if not n.startswith("mix")]:
            base = results[single]
            pairs = [m["cpu_seconds"] / c["cpu_seconds"] for m, c in zip(runs[name], runs[single])]
            r[f"pair_cpu_ratios_{single}"] = [round(x, 3) for x in pairs]
            print(f"  {name} / {single}: {r['seconds'] / base['seconds']:.2f}x wall, "
                  f"{r['cpu_seconds'] / base['cpu_seconds']:.2f}x CPU (goal <= 1.1); pair by pair "
                  f"{statistics.median(pairs):.2f}x CPU (median; {min(pairs):.2f}-{max(pairs):.2f})")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).with_suffix(".mixture.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
