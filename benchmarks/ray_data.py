"""A Ray Data pipeline through prep (prep.integrations.ray_data) against ``prep pretokenize`` / ``decode-images``.

    python benchmarks/ray_data.py --rows 2000 --images 120 --json ray_data.json

Same input, same machine, each a fresh process measured whole (``benchmarks/measure.py``: the
command and every process under it, Ray's daemons and workers included, since each command
starts its own local Ray and stops it before it exits; prep's commands take the machine's CPUs):

- **prep local**: ``prep pretokenize --executor local`` (sandboxes on this machine, no Ray);
- **prep ray**: ``prep pretokenize --executor ray`` (starts a local Ray, one plain task per chunk);
- **ray data**: ``read_json -> map_batches(Tokenize) -> write_table`` (this file's ``--_pipeline``).

Images the same, on an ImageFolder tree: ``prep decode-images`` against
``read_binary_files -> map_batches(DecodeImages) -> write_table`` (labels from the paths).
Printed per path: wall s, CPU s (whole command and job), units, units per CPU-s, and the Ray Data
path's units per CPU-s over each prep executor's (the issue's goal: >= 0.8 of prep's Ray executor).
Every run's output is checked: the same rows and rejects on every path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
PREP = Path(sys.executable).parent / "prep"
ENV = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}


def pipeline(kind: str, src: str, out: str, cpus: int, tokenizer: str) -> None:
    """The Ray Data path, in this (measured) process: a private local Ray, stopped at the end."""
    import ray

    from prep.integrations.ray_data import DecodeImages, Tokenize, write_table

    ray.init(num_cpus=cpus, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="prep-rdb-", dir="/tmp"),
             log_to_driver=False)
    pool = dict(concurrency=max(1, cpus - 1), num_cpus=0.5, batch_format="pyarrow")  # below the CPUs: ray issue 44687
    if kind == "text":
        ds = ray.data.read_json(src).map_batches(Tokenize, fn_constructor_kwargs=dict(tokenizer=tokenizer, format="sft"), **pool)
    else:
        ds = ray.data.read_binary_files(src, include_paths=True)
        ds = ds.map_batches(_label_from_folder, batch_format="pyarrow")
        ds = ds.map_batches(DecodeImages, fn_constructor_kwargs=dict(size=224, labels=["ants", "bees"]), **pool)
    summary = write_table(ds, out)
    print(json.dumps(summary))
    ray.shutdown()


def _label_from_folder(batch):
    """ImageFolder's rule, as a user's step: the class is the image's folder."""
    import pyarrow as pa

    paths = batch.column("path").to_pylist()
    return batch.append_column("label", pa.array([p.rsplit("/", 2)[-2] for p in paths]))


def text_input(work: Path, rows: int) -> Path:
    src = work / "gsm8k.jsonl"
    with open(DATA / "gsm8k" / "train.jsonl") as f, open(src, "w") as w:
        w.writelines(line for _, line in zip(range(rows), f))
    return src


def image_input(work: Path, images: int) -> Path:
    root = work / "photos"
    for name in ("ants", "bees"):
        (root / name).mkdir(parents=True)
        for p in sorted((DATA / "hymenoptera" / "train" / name).iterdir())[: images // 2]:
            shutil.copy(p, root / name / p.name)
    return root


def run(kind: str, path: str, src: Path, out: Path, cpus: int, tokenizer: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(str(out).replace(".lance", ".rejects.lance"), ignore_errors=True)
    if path == "ray data":
        cmd = [sys.executable, __file__, "--_pipeline", kind, str(src), str(out), str(cpus), tokenizer]
    elif kind == "text":
        cmd = [str(PREP), "pretokenize", "--input", str(src), "--output", str(out), "--tokenizer", tokenizer, "--format", "sft",
               "--executor", path.split()[1], "--json", "-q"]
    else:
        cmd = [str(PREP), "decode-images", "--input", str(src), "--output", str(out), "--executor", path.split()[1], "--json", "-q"]
    m = measure.run(cmd, env=ENV)
    if m.returncode != 0:
        raise SystemExit(f"{path} {kind} failed ({m.returncode}): {m.stderr[-3000:]}")
    out_text = m.stdout.strip()
    summary = json.loads(out_text if out_text.startswith("{") else out_text.rsplit("\n", 1)[-1])  # prep's --json, or the pipeline's last line
    units = summary.get("tokens") if kind == "text" else summary["rows_written"]
    return {"kind": kind, "path": path, "wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2), "units": units,
            "rows": summary["rows_written"], "rejected": summary["rows_rejected"], "per_cpu_s": round(units / m.cpu_s, 1)}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_pipeline":
        kind, src, out, cpus, tokenizer = sys.argv[2:7]
        pipeline(kind, src, out, int(cpus), tokenizer)
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2000, help="GSM8K rows (default 2000)")
    p.add_argument("--images", type=int, default=120, help="hymenoptera photos, half ants half bees (default 120)")
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 1,
                   help="CPUs of the pipeline's Ray (default: the machine's, as prep's commands take)")
    p.add_argument("--kinds", default="text,images")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    tokenizer = str(DATA / "tokenizers" / "mistral-v3")
    work = Path(tempfile.mkdtemp(prefix="prep-rdbench-"))
    results = []
    try:
        inputs = {"text": lambda: text_input(work, args.rows), "images": lambda: image_input(work, args.images)}
        for kind in args.kinds.split(","):
            src = inputs[kind]()
            for path in ("prep local", "prep ray", "ray data"):
                r = run(kind, path, src, work / f"{kind}-{path.replace(' ', '-')}.lance", args.cpus, tokenizer)
                results.append(r)
                print(f"{kind:7s} {path:11s} wall {r['wall_s']:7.2f}s  CPU {r['cpu_s']:7.2f}s  {r['units']:>9,} "
                      f"{'tokens' if kind == 'text' else 'images'}  {r['per_cpu_s']:>9,.1f}/CPU-s", flush=True)
            mine = {r["path"]: r for r in results if r["kind"] == kind}
            assert len({(r["rows"], r["rejected"], r["units"]) for r in mine.values()}) == 1, mine
            for base in ("prep local", "prep ray"):
                print(f"{kind:7s} ray data / {base}: {mine['ray data']['per_cpu_s'] / mine[base]['per_cpu_s']:.2f}x per CPU-s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
