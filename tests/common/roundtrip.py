"""The save/load contract every reader stage follows: ``reset(get_state())`` on a new stage continues exactly."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["items", "run_save_load_round_trip"]


def items(stage: Any, limit: int | None = None) -> list:
    """``stage.next()`` until StopIteration (or ``limit`` items)."""
    out = []
    while limit is None or len(out) < limit:
        try:
            out.append(stage.next())
        except StopIteration:
            break
    return out


def run_save_load_round_trip(make: Callable[[], Any], keys: Callable[[list], list], midpoints: list[int]) -> list:
    """Stops after ``m`` items, saves the state, resets a new stage to it: the rest must follow exactly.

    Also checks a reset to the start and a reset to the state at the end (nothing more).
    Returns the keys of the uninterrupted run (so a caller can check what it holds).
    """
    stage = make()
    full = keys(items(stage))
    end_state = stage.get_state()
    stage.shutdown()
    assert full, "the stage yielded nothing: the round trip would prove nothing"
    for m in midpoints:
        assert 0 < m < len(full), f"midpoint {m} is not inside the {len(full)} items"
        first = make()
        head = items(first, m)
        state = first.get_state()
        first.shutdown()
        second = make()
        second.reset(state)
        tail = items(second)
        second.shutdown()
        assert keys(head) + keys(tail) == full, f"midpoint {m}"
    again = make()
    again.reset(None)
    assert keys(items(again)) == full
    again.reset(end_state)
    assert items(again) == []
    again.shutdown()
    return full
