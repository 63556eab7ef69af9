"""torchdata's ``StatefulDataLoader`` over prep.reader: a drop-in whose ``state_dict`` resumes exactly.

``ReaderDataset`` is stateful in the way ``StatefulDataLoader`` expects: in the main process
its state is the next step the consumer gets; in a worker process, the next step that
worker builds (``StatefulDataLoader`` snapshots one state per worker with every batch and
restores each worker's own, then continues the round robin after the last worker that
yielded). Batches are whole local batches, so ``batch_size=None``.

    loader = stateful_loader(ReaderDataset(out, global_batch_size=64), num_workers=2)
    loader.load_state_dict(ckpt["loader"])           # on resume
    ckpt = {"loader": loader.state_dict(), ...}      # after the step that used the last batch
"""

from __future__ import annotations

from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader

from prep.reader import ReaderDataset
from prep.reader.loader import worker_context

__all__ = ["stateful_loader"]


def stateful_loader(dataset: ReaderDataset, *, num_workers: int = 0, **kwargs: Any) -> StatefulDataLoader:
    """``StatefulDataLoader(dataset, batch_size=None, ...)``; workers start with ``forkserver`` (Lance is not fork-safe)."""
    if num_workers > 0:
        kwargs.setdefault("multiprocessing_context", worker_context())
    return StatefulDataLoader(dataset, batch_size=None, num_workers=num_workers, **kwargs)
