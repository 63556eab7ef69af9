"""HF ``Trainer`` (and TRL trainers built on it) fed by prep.reader, resuming exactly.

Trainer's own ``DataLoader(batch_size=per_device_train_batch_size)`` would stack whole
batches into a batch of batches ("stack expects each tensor to be equal size") and its
resume would skip batches the reader already seeks past. :class:`ReaderTrainerMixin`
replaces the train dataloader (the override HF documents for custom loading) with a
:class:`prep.reader.Loader` that yields one reader epoch per Trainer epoch, and
:class:`ReaderStateCallback` writes the reader state into every checkpoint folder.

    class MyTrainer(ReaderTrainerMixin, Trainer): ...      # or ReaderTrainerMixin, SFTTrainer
    trainer = MyTrainer(model=model, args=args, train_dataset=ReaderDataset(out, global_batch_size=64))
    trainer.train(resume_from_checkpoint=True)             # model, optimizer and the next batch
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from prep.errors import PrepError
from prep.integrations.progress import epochs_done, rows_per_epoch
from prep.integrations.ranks import check_rank
from prep.reader import Loader, ReaderDataset

__all__ = ["ReaderTrainerMixin", "ReaderStateCallback", "STATE_FILE"]

STATE_FILE = "prep_reader_state.json"
log = logging.getLogger(__name__)


class ReaderStateCallback(TrainerCallback):
    """Saves the loader's state (after the last batch an optimizer step used) in each checkpoint folder.

    Trainer fetches exactly the batches of one optimizer step before it steps, so at ``on_save``
    the loader has yielded what was trained on and nothing more.
    """

    def __init__(self, loader: Loader) -> None:
        self.loader = loader

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The epoch Trainer logs, from the reader: after a resume Trainer skipped nothing (the reader
        seeked), so its own fraction would restart at the epoch's first step."""
        state.epoch = epochs_done(self.loader)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            with open(os.path.join(folder, STATE_FILE), "w") as f:
                json.dump(self.loader.state_dict(), f)

    def restore(self, checkpoint: str) -> None:
        """Loads the reader state saved in ``checkpoint`` (a checkpoint folder)."""
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.isfile(path):
            raise PrepError(f"{path} not found: {checkpoint} was not saved with ReaderStateCallback")
        with open(path) as f:
            self.loader.load_state_dict(json.load(f))


class ReaderTrainerMixin:
    """Put before ``Trainer`` (or a TRL trainer) in the bases: ``class T(ReaderTrainerMixin, Trainer)``.

    ``train_dataset`` must be a :class:`~prep.reader.ReaderDataset`. Batches go to the model as the
    reader built them (one local batch per Trainer micro-step; Trainer moves them to the device),
    ``len()`` is the steps of an epoch, worker processes come from ``dataloader_num_workers``.
    Resuming sets ``ignore_data_skip``: the reader seeks to the next batch itself. Trainer's numbers
    come from the reader: samples (``train_samples_per_second``) count the reader's batch, not
    ``per_device_train_batch_size``, and the logged ``epoch`` is :func:`~prep.integrations.progress.epochs_done`,
    which continues after a resume.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        dataset = self.train_dataset
        if not isinstance(dataset, ReaderDataset):
            raise PrepError(f"ReaderTrainerMixin needs train_dataset=ReaderDataset(...), got {type(dataset).__name__}")
        check_rank(dataset, self.args.process_index, self.args.world_size, "Trainer")
        self.reader_loader = Loader(dataset, num_workers=self.args.dataloader_num_workers, epoch_per_iter=True)
        # Trainer counts samples (train_samples_per_second, "Total train batch size") with this, which it takes
        # from per_device_train_batch_size: a rank trains the reader's local batch instead.
        self._train_batch_size = dataset.local_batch_size
        self.reader_callback = ReaderStateCallback(self.reader_loader)
        self.add_callback(self.reader_callback)

    def get_train_dataloader(self) -> Loader:
        return self.reader_loader

    def num_examples(self, dataloader: Any) -> int:
        """Rows of one epoch (Trainer's ``len(dataloader.dataset)`` would be the reader's steps)."""
        if dataloader is self.reader_loader:
            return rows_per_epoch(self.reader_loader)
        return super().num_examples(dataloader)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = get_last_checkpoint(self.args.output_dir)
        if checkpoint:
            self.reader_callback.restore(checkpoint)
            self.args.ignore_data_skip = True  # Trainer would skip, on top of the reader's seek, the batches it trained
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
