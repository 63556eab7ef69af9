"""The numbers a trainer shows for prep.reader's progress: fractional epochs and rows per epoch.

Trainers compute them from their own batch size and step counters: HF Trainer multiplies by
``per_device_train_batch_size`` (which the reader ignores) and, after a resume in which the reader
seeked instead of Trainer skipping, restarts its epoch fraction. These read the loader instead.
"""

from __future__ import annotations

from prep.reader import Loader

__all__ = ["epochs_done", "rows_per_epoch"]


def epochs_done(loader: Loader) -> float:
    """Epochs trained as a fraction, from the first epoch read: the epoch's index plus the share of its
    steps done. After ``load_state_dict``, where the checkpointed run stopped: it never falls on resume.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> loader = NS(steps_done=4, dataset=NS(schedule=NS(steps=(3, 2))))  # epochs of 3 and 2 steps
        >>> epochs_done(loader)
        1.5
    """
    done = loader.steps_done
    steps = loader.dataset.schedule.steps
    for index, n in enumerate(steps):
        if done <= n:
            return index + done / n if n else float(index)
        done -= n
    return float(len(steps))


def rows_per_epoch(loader: Loader) -> int:
    """Rows all ranks together train in one epoch (an epoch's steps times the global batch)."""
    return len(loader) * loader.dataset.global_batch_size
