"""What isolation costs per crashing or hanging input: `prep decode-images` clean vs with bad files.

    .venv/bin/python benchmarks/isolation.py                      # 150 photos, + 10 crashing PNGs
    .venv/bin/python benchmarks/isolation.py --bad 10 --hang 1 --executor ray

Each run is the whole command as a user runs it (``benchmarks/measure.py``: wall, and CPU of
every process of it). The clean job decodes ``--photos`` real photos; the bad job decodes
the same photos plus ``--bad`` PNGs that crash the decoder with SIGSEGV (``PREP_TEST_FAULTS``,
which crashes the thread holding the item, as a native decoder does) and ``--hang`` PNGs that
never finish (rejected after ``--item-timeout`` s). ``cpu_per_bad_item_s`` is the extra CPU
of the bad job over the clean one, divided by the bad files; the goal is ``cpu_ratio`` <= 1.5
at 10 crashing files among 150 photos (issue 31).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import run  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_INPUT = REPO.parent / "shared" / "data" / "hymenoptera" / "train"


def build(tree: Path, photos: list[Path], bad: int, hang: int) -> None:
    """``photos`` as an ImageFolder tree, plus ``bad`` + ``hang`` PNG re-encodings of the first photos."""
    from PIL import Image

    for p in photos:
        (tree / p.parent.name).mkdir(parents=True, exist_ok=True)
        (tree / p.parent.name / p.name).write_bytes(p.read_bytes())
    for k, p in enumerate(photos[: bad + hang]):
        buf = io.BytesIO()
        Image.open(p).convert("RGB").resize((96, 80)).save(buf, "PNG")
        name = f"crash-{k:03d}.png" if k < bad else f"hang-{k:03d}.png"
        (tree / p.parent.name / name).write_bytes(buf.getvalue())


def job(tree: Path, out: Path, args: argparse.Namespace, faults: str | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"}
    env.pop("PREP_TEST_FAULTS", None)
    if faults:
        env["PREP_TEST_FAULTS"] = faults
    cfg = out.with_suffix(".yaml")
    cfg.write_text(f"item_timeout_s: {args.item_timeout}\nimages_per_chunk: {args.images_per_chunk}\n")
    cmd = [str(REPO / ".venv" / "bin" / "prep"), "decode-images", "--input", str(tree), "--output", str(out), "--size", "64",
           "--executor", args.executor, "--config", str(cfg), "--max-reject-fraction", "0.5", "--json"]
    m = run(cmd, env=env)
    if m.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {m.returncode}:\n{m.stderr[-3000:]}")
    summary = json.loads(m.stdout)
    return {"wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2), "rows_read": summary["rows_read"],
            "rows_rejected": summary["rows_rejected"], "lingering": m.lingering}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="an ImageFolder tree (default: hymenoptera train)")
    ap.add_argument("--photos", type=int, default=150)
    ap.add_argument("--bad", type=int, default=10, help="PNGs that crash the decoder (default 10)")
    ap.add_argument("--hang", type=int, default=0, help="PNGs that hang the decoder (default 0)")
    ap.add_argument("--item-timeout", type=float, default=5.0, help="item_timeout_s of both jobs (default 5)")
    ap.add_argument("--images-per-chunk", type=int, default=64)
    ap.add_argument("--executor", choices=["local", "ray"], default="local")
    args = ap.parse_args(argv)
    photos = sorted(p for p in args.input.rglob("*.jpg"))[: args.photos]
    with tempfile.TemporaryDirectory(prefix="prep-bench-isolation-") as tmp:
        work = Path(tmp)
        build(work / "clean", photos, 0, 0)
        build(work / "bad", photos, args.bad, args.hang)
        clean = job(work / "clean", work / "clean.lance", args, None)
        bad = job(work / "bad", work / "bad.lance", args, "segv:/crash-;hang:/hang-")
    n = args.bad + args.hang
    result = {"photos": len(photos), "bad": args.bad, "hang": args.hang, "executor": args.executor, "clean": clean, "with_bad": bad,
              "cpu_ratio": round(bad["cpu_s"] / clean["cpu_s"], 2),
              "cpu_per_bad_item_s": round((bad["cpu_s"] - clean["cpu_s"]) / max(n, 1), 3),
              "load_average_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
