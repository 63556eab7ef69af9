"""Figures for ``prep inspect --plot`` and ``prep bench --plot`` (matplotlib: the ``plots`` extra).

matplotlib is imported only here and only when a figure is asked for, with the
Agg backend (no display needed); without it the error says which extra to install.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prep.errors import PrepError

__all__ = ["inspect_figure", "bench_figure"]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PrepError("--plot needs matplotlib: pip install 'prep-lance[plots]'") from None
    return plt


def _save(fig: Any, out: str) -> None:
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110)
    except (OSError, ValueError) as exc:
        raise PrepError(f"--plot {out}: cannot write the figure ({exc})") from None
    finally:
        fig.clf()


def inspect_figure(report: dict[str, Any], out: str) -> None:
    """Text table: token-length histogram with percentiles and the loss-mask share; image table: label counts and
    a grid of sample images; rejects: counts by reason; materialized output: rows per split and epoch (and sources)."""
    plt = _pyplot()
    kind = report["kind"]
    if kind == "table" and "lengths" in report:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        lengths = report["lengths"]
        ax.hist(lengths, bins=min(80, max(10, len(np.unique(lengths)))), color="#4c72b0")
        for q in (50, 90, 99):
            v = report["length"][f"p{q}"]
            ax.axvline(v, color="#c44e52", linestyle="--", linewidth=1)
            ax.text(v, ax.get_ylim()[1] * 0.95, f" p{q} {v:g}", color="#c44e52", fontsize=8, va="top")
        trained = report.get("tokens_trained")
        share = f"; {trained / max(1, report['tokens']):.1%} of tokens trained on (loss mask)" if trained is not None else ""
        ax.set(title=f"{report['num_rows']:,} rows, {report['tokens']:,} tokens{share}", xlabel="tokens per row", ylabel="rows")
    elif kind == "table":
        samples = [s for s in report.get("gallery", []) if s.get("pixels") is not None][:16]
        cols = max(1, min(4, len(samples)))
        rows = 1 + (len(samples) + cols - 1) // cols if samples else 1
        fig = plt.figure(figsize=(2.2 * max(cols, 3), 2.4 * rows + 1))
        ax = fig.add_subplot(rows, 1, 1)
        ax.bar(list(report["labels"]), list(report["labels"].values()), color="#4c72b0")
        ax.set(title=f"{report['num_rows']:,} images by label", ylabel="rows")
        for i, s in enumerate(samples):
            a = fig.add_subplot(rows, cols, cols + i + 1)
            a.imshow(s["pixels"])
            a.set_title(str(s.get("label")), fontsize=8)
            a.axis("off")
    elif kind == "rejects":
        fig, ax = plt.subplots(figsize=(8, 1.5 + 0.4 * max(1, len(report["reasons"]))))
        reasons = list(report["reasons"])[:15]
        ax.barh([r[:60] for r in reasons][::-1], [report["reasons"][r]["count"] for r in reasons][::-1], color="#c44e52")
        ax.set(title=f"{report['num_rows']:,} rejects by reason", xlabel="rows")
    else:
        shares = report.get("source_shares") or {}
        fig, axes = plt.subplots(1, 3 if shares else 2, figsize=(13 if shares else 10, 4))
        per_split = np.array([report["rows_per_split"][e] for e in report["epochs"]])
        for e, row in zip(report["epochs"], per_split):
            axes[0].plot(range(len(row)), row, marker=".", label=f"epoch {e}")
        axes[0].set(title="rows per split", xlabel="split", ylabel="rows", ylim=(0, per_split.max() * 1.15 + 1))
        axes[0].xaxis.get_major_locator().set_params(integer=True)
        axes[0].legend(fontsize=7)
        axes[1].bar([str(e) for e in report["rows_per_epoch"]], list(report["rows_per_epoch"].values()), color="#4c72b0")
        axes[1].set(title="rows per epoch", xlabel="epoch")
        if shares:
            axes[2].pie(list(shares.values()), labels=[k[-30:] for k in shares], textprops={"fontsize": 7})
            axes[2].set(title="sources (epoch 0)")
    _save(fig, out)


def bench_figure(result: Any, out: str) -> None:
    """Queue depths (rows raw and prefetched) and consumed rows/s over the run of a :class:`prep.tools.bench.BenchResult`."""
    plt = _pyplot()
    s = result.samples
    t = np.array([x.t for x in s])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.plot(t, [x.raw_rows for x in s], label="raw (read, not batched)")
    top.plot(t, [x.prefetched_rows for x in s], label="prefetched (batched, not consumed)")
    top.set(ylabel="rows queued", title=f"{result.path}: bound by {result.verdict.stage} ({result.verdict.label})")
    top.legend(fontsize=8)
    if len(s) > 1:
        rate = np.diff([x.consumed_rows for x in s]) / np.maximum(np.diff(t), 1e-9)
        bottom.step(t[1:], rate, where="pre", color="#55a868")
    bottom.set(xlabel="seconds", ylabel="rows/s consumed")
    _save(fig, out)
