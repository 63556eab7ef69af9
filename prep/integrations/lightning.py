"""A ``LightningDataModule`` over prep.reader whose checkpointed state is the last *trained* batch's.

Lightning fetches one batch ahead of the training step (and its fit loop saves the state
of any loader that has a ``state_dict``): the loader's own state at checkpoint time describes
a batch that was never trained on. :class:`ReaderDataModule` records ``batch.state`` when
Lightning hands a batch to the training step (``on_before_batch_transfer``), saves that in
checkpoints, and gives Lightning a loader without a ``state_dict`` of its own.

    dm = ReaderDataModule(out, global_batch_size=64)
    L.Trainer(max_epochs=3, ...).fit(model, datamodule=dm, ckpt_path="last")
"""

from __future__ import annotations

from typing import Any, Iterator

import lightning as L

from prep.reader import Batch, Loader, ReaderDataset

__all__ = ["ReaderDataModule"]


class _Batches:
    """The loader as Lightning sees it: iterable with a length, no state of its own to save."""

    def __init__(self, loader: Loader) -> None:
        self._loader = loader

    def __iter__(self) -> Iterator[Batch]:
        return iter(self._loader)

    def __len__(self) -> int:
        return len(self._loader)


class ReaderDataModule(L.LightningDataModule):
    """Whole local batches of this rank, one reader epoch per Lightning epoch (both numbered from 0).

    Args:
        path: a materialized output (or a prepared table with ``plan=``).
        num_workers: DataLoader worker processes (default 0: the reader's threads overlap I/O).
        **reader_kwargs: :class:`~prep.reader.ReaderDataset` arguments (``global_batch_size`` ...);
            rank and world size come from the Lightning trainer.
    """

    def __init__(self, path: str, *, num_workers: int = 0, **reader_kwargs: Any) -> None:
        super().__init__()
        self._path, self._num_workers, self._reader_kwargs = path, num_workers, reader_kwargs
        self.loader: Loader | None = None
        self._state: dict[str, Any] | None = None  # after the last batch handed to training, or loaded

    def setup(self, stage: str) -> None:
        if self.loader is None:
            rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (None, None)
            dataset = ReaderDataset(self._path, rank=rank, world_size=world, **self._reader_kwargs)
            self.loader = Loader(dataset, num_workers=self._num_workers, epoch_per_iter=True)
            if self._state is not None:
                self.loader.load_state_dict(self._state)

    def train_dataloader(self) -> _Batches:
        assert self.loader is not None, "setup() builds the loader"
        return _Batches(self.loader)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if isinstance(batch, Batch) and batch.state is not None and self.trainer and self.trainer.training:
            self._state = batch.state  # this batch goes to the training step now, whatever was prefetched
        return batch

    def state_dict(self) -> dict[str, Any]:
        state = self._state if self._state is not None else self.loader.state_dict() if self.loader else None
        return {} if state is None else {"reader": state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "reader" in state_dict:
            self._state = state_dict["reader"]
            if self.loader is not None:
                self.loader.load_state_dict(self._state)
