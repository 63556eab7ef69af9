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
    """The first lines of a summary: the table written, or what an append added (or that it added nothing) and the history."""
    s, step = summary, summary["step"]
    if s["mode"] not in ("append", "update"):
        return [f"wrote {s['table']} ({s['kind']})"]
    if step["version"] is None:
        return [f"nothing new: {s['table']} already holds all {step['unchanged']:,} listed file(s) as they are; no version committed"]
    return [f"{'updated' if s['mode'] == 'update' else 'appended to'} {s['table']} ({s['kind']}): version {step['version']}, "
            f"{step['added']:,} new file(s), {step['replaced']:,} replaced, {step['unchanged']:,} unchanged", "  history:",
            *(f"    {Step.from_json(h, s['table']).describe()}" for h in s["history"])]
