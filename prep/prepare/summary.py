"""The lines a prepare job's summary starts with, the same for every kind of job."""

from __future__ import annotations

from typing import Any

from prep.contracts.table import Step

__all__ = ["where_it_ran", "what_it_did"]


def where_it_ran(summary: dict[str, Any]) -> str:
    """The start of a summary's time line: ``on Ray (start 3.1s), `` or ``on this machine, ``."""
    if summary["executor"] == "ray":
        return f"on Ray (start {summary['seconds']['ray_start']}s), "
    return "on this machine, "


def what_it_did(summary: dict[str, Any]) -> list[str]:
    """The first lines of a summary: the table written, or what an append added (or that it added nothing), the files
    it moved or removed, the held files no longer among the inputs, and the history."""
    s, step = summary, summary["step"]
    if s["mode"] not in ("append", "update"):
        return [f"wrote {s['table']} ({s['kind']})"]
    missing = step.get("missing") or []
    gone = [f"  {len(missing):,} file(s) the table holds are not among the inputs; their rows stay (--remove-missing "
            f"removes them): {_names(missing)}"] if missing else []
    if step["version"] is None:
        return [f"nothing new: {s['table']} already holds all {step['unchanged']:,} listed file(s) as they are; no version committed", *gone]
    moved = step.get("moved") or []
    removed = step.get("removed", 0) - len(moved)
    return [f"{'updated' if s['mode'] == 'update' else 'appended to'} {s['table']} ({s['kind']}): version {step['version']}, "
            f"{step['added']:,} new file(s), {step['replaced']:,} replaced, {step['unchanged']:,} unchanged"
            + (f", {len(moved):,} moved" if moved else "") + (f", {removed:,} removed" if removed else ""),
            *(f"  moved: {was} -> {now} (its rows made anew under the new name)" for was, now in moved[:3]),
            *([f"  moved: ... and {len(moved) - 3:,} more"] if len(moved) > 3 else []),
            *gone, "  history:",
            *(f"    {Step.from_json(h, s['table']).describe()}" for h in s["history"])]


def _names(uris: list[str]) -> str:
    return ", ".join(uris[:3]) + (f" ... and {len(uris) - 3:,} more" if len(uris) > 3 else "")
