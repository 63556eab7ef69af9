"""The reader state: a handful of named scalars, loaded strictly.

``{format, fingerprint, source_version, num_splits, global_batch_size, epoch, step, world_size}``:
``(epoch, step)`` is the next global step to deliver; the rest pins the data and
the batch arithmetic. The world size is informational: any world size that
divides the global batch continues the same global batch sequence.

The fingerprint covers the table version, so a state pins the data: an on-the-fly plan
over a table that grew since is reopened at the version the state names
(:func:`pinned_layout`), and a materialized output extended onto a newer version keeps
its fingerprint (its old epochs are unchanged), so its states resume across the boundary.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from prep.errors import PrepError
from prep.reader.stage import EPOCH_KEY, STEP_KEY, Layout

if TYPE_CHECKING:  # the dataset imports this module
    from prep.reader.dataset import ReaderDataset

__all__ = ["STATE_FORMAT", "FORMAT_KEY", "FINGERPRINT_KEY", "SOURCE_VERSION_KEY", "NUM_SPLITS_KEY",
           "GLOBAL_BATCH_KEY", "WORLD_SIZE_KEY", "EPOCH_KEY", "STEP_KEY", "make", "check", "pinned_layout"]

STATE_FORMAT = "prep.reader/1"
FORMAT_KEY = "format"
FINGERPRINT_KEY = "fingerprint"
SOURCE_VERSION_KEY = "source_version"
NUM_SPLITS_KEY = "num_splits"
GLOBAL_BATCH_KEY = "global_batch_size"
WORLD_SIZE_KEY = "world_size"
_KEYS = {FORMAT_KEY, FINGERPRINT_KEY, SOURCE_VERSION_KEY, NUM_SPLITS_KEY, GLOBAL_BATCH_KEY, WORLD_SIZE_KEY,
         EPOCH_KEY, STEP_KEY}


def make(ds: ReaderDataset, epoch: int, step: int) -> dict[str, Any]:
    """The state of reader ``ds`` positioned at ``(epoch, step)``."""
    return {
        FORMAT_KEY: STATE_FORMAT,
        FINGERPRINT_KEY: ds.layout.fingerprint,
        SOURCE_VERSION_KEY: ds.layout.source_version,
        NUM_SPLITS_KEY: ds.layout.num_splits,
        GLOBAL_BATCH_KEY: ds.global_batch_size,
        WORLD_SIZE_KEY: ds.world_size,
        EPOCH_KEY: int(epoch),
        STEP_KEY: int(step),
    }


def pinned_layout(layout: Layout, state: Any) -> Layout | None:
    """``layout`` reopened at the table version an on-the-fly plan's ``state`` was taken on, when the reader
    opened another one (the table grew since) and the state is of the same plan over it; None otherwise
    (then :func:`check` judges the state). A resume there reads the rows it read before."""
    from prep.reader.layouts.planned import Planned  # the one layout a state pins (Lance: on a resume only)

    if not isinstance(layout, Planned) or not isinstance(state, dict) or state.get(FINGERPRINT_KEY) == layout.fingerprint:
        return None  # a materialized output's epochs are written: its fingerprint alone decides
    version = state.get(SOURCE_VERSION_KEY)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1 or version == layout.source_version:
        return None
    return layout.at_version(version) if layout.plan.fingerprint(layout.uri, version) == state.get(FINGERPRINT_KEY) else None


def check(ds: ReaderDataset, state: dict[str, Any]) -> tuple[int, int]:
    """The ``(epoch, step)`` to resume at, after checking ``state`` belongs to reader ``ds``.

    Raises:
        PrepError: unknown or missing keys, another format, fingerprint, table version,
            split count or global batch size, or a position outside the epochs being read.
    """
    if not isinstance(state, dict):
        raise PrepError(f"reader state must be a dict, got {type(state).__name__}")
    missing, unknown = sorted(_KEYS - set(state)), sorted(set(state) - _KEYS)
    if missing or unknown:
        raise PrepError(f"reader state is malformed: missing keys {missing}, unknown keys {unknown}")
    if state[FORMAT_KEY] != STATE_FORMAT:
        raise PrepError(f"reader state format={state[FORMAT_KEY]!r}, this reader reads {STATE_FORMAT!r}")
    ours = make(ds, 0, 0)
    if state[FINGERPRINT_KEY] != ours[FINGERPRINT_KEY]:
        raise PrepError(
            f"reader state was taken on data with fingerprint {state[FINGERPRINT_KEY]} (table version "
            f"{state[SOURCE_VERSION_KEY]}), but {ds.layout.uri} has fingerprint {ours[FINGERPRINT_KEY]} (table version "
            f"{ours[SOURCE_VERSION_KEY]}): another table, table version or shuffle plan; resume on the data it came from")
    for key in (NUM_SPLITS_KEY, GLOBAL_BATCH_KEY):
        if isinstance(state[key], bool) or not isinstance(state[key], numbers.Integral):
            raise PrepError(f"reader state {key}={state[key]!r} is a {type(state[key]).__name__}, not an integer: "
                            "the state was rewritten on its way back (load the dict state_dict() returned)")
        if state[key] != ours[key]:
            raise PrepError(f"reader state has {key}={state[key]}, this reader has {key}={ours[key]}: "
                            "the global batches would differ; resume with the same value")
    epoch, step = state[EPOCH_KEY], state[STEP_KEY]
    if not isinstance(epoch, int) or not isinstance(step, int):
        raise PrepError(f"reader state epoch={epoch!r} step={step!r} must be integers")
    ds.schedule.index(epoch, step)  # raises if outside the epochs being read
    return ds.schedule.position(ds.schedule.index(epoch, step))
