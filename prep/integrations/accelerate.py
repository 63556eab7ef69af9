"""An Accelerate training loop fed by prep.reader, its state in ``save_state``/``load_state``.

``accelerator.prepare(DataLoader(reader))`` would shard the reader's batches again across
processes (each rank already reads only its splits) or, with ``dispatch_batches``, send
rank 0's batches to every rank. :func:`reader_loader` returns a :class:`prep.reader.Loader`
instead: ``prepare()`` passes it through untouched (it is not a ``DataLoader``), it moves
batches to ``accelerator.device`` itself, and it is registered for checkpointing. Each pass
over it yields one reader epoch (``len()`` is an epoch's steps), so the usual epoch loop
trains each epoch once.

    loader = reader_loader(accelerator, ReaderDataset(out, global_batch_size=64))
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.load_state(ckpt)                     # on resume: the reader continues after the last step
    step = loader.steps_done                         # the steps the checkpointed run had taken
    for epoch in range(loader.position[0], 2):       # the epoch it was in, then the rest
        for batch in loader: ...
"""

from __future__ import annotations

from typing import Any

from prep.integrations.ranks import check_rank
from prep.reader import Loader, ReaderDataset

__all__ = ["reader_loader"]


def reader_loader(accelerator: Any, dataset: ReaderDataset, *, num_workers: int = 0, **loader_kwargs: Any) -> Loader:
    """A loader on ``accelerator.device`` whose state ``accelerator.save_state`` saves and ``load_state`` restores.

    One reader epoch per pass (``epoch_per_iter=True``: a pass yielding every epoch would make
    ``for epoch in range(2): for batch in loader`` train four); ``epoch_per_iter=False`` asks for all
    epochs in one pass.

    Raises:
        PrepError: the dataset was built for another rank or world size than the accelerator's.
    """
    check_rank(dataset, accelerator.process_index, accelerator.num_processes, "Accelerate")
    loader_kwargs.setdefault("epoch_per_iter", True)
    loader = Loader(dataset, num_workers=num_workers, device=accelerator.device, **loader_kwargs)
    accelerator.register_for_checkpointing(loader)
    return loader
