"""A ``LightningDataModule`` over prep.reader whose checkpointed state is the last *trained* batch's.

Lightning fetches one batch ahead of the training step: the loader's own state at checkpoint
time describes a batch that was never trained on. :class:`ReaderDataModule` records
``batch.state`` when Lightning hands a batch to the training step (``on_before_batch_transfer``)
and saves that, both as the data module's state and as the state of the loader Lightning sees:
its fit loop counts a loader with ``state_dict``/``load_state_dict`` as resumable (and warns on
every mid-epoch resume of one without), and saves and restores it, so it must be this one.

    dm = ReaderDataModule(out, global_batch_size=64)
    L.Trainer(max_epochs=3, ...).fit(model, datamodule=dm, ckpt_path="last")
"""

from __future__ import annotations

from typing import Any, Iterator

import lightning as L

from prep.reader import Batch, Loader, ReaderDataset

__all__ = ["ReaderDataModule"]


class _Batches:
    """The loader as Lightning sees it: iterable with a length, whose state is the last *trained* batch's."""

    def __init__(self, module: "ReaderDataModule") -> None:
        self._module = module

    def __iter__(self) -> Iterator[Batch]:
        return iter(self._module.loader)

    def __len__(self) -> int:
        return len(self._module.loader)

    def state_dict(self) -> dict[str, Any]:
        return self._module.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._module.load_state_dict(state_dict)


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
        return _Batches(self)

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
