"""Train a tiny causal LM with Lightning on a materialized output, and resume it exactly.

``ReaderDataModule`` gives Lightning the rank's whole local batches (one reader epoch per
Lightning epoch, both numbered from 0) and puts the reader state of the last batch
trained on (not the one Lightning prefetched) into every checkpoint.

    python examples/train_lightning.py --data out/gsm8k-epochs --steps 20 --ckpt-dir out/pl
    python examples/train_lightning.py --data out/gsm8k-epochs --steps 40 --ckpt-dir out/pl --resume
"""

from __future__ import annotations

import argparse

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from prep.integrations.lightning import ReaderDataModule
from prep.reader import ReaderDataset
from train_sft import build_model, kill_if, record_batch, vocab_size

MODEL_INPUTS = ("input_ids", "attention_mask", "labels", "position_ids")


class TinyLM(L.LightningModule):
    def __init__(self, vocab: int, hidden_size: int, lr: float = 3e-4, log_batches: str | None = None) -> None:
        super().__init__()
        self.model, self.lr, self.log_batches = build_model(vocab, seed=0, hidden_size=hidden_size), lr, log_batches

    def training_step(self, batch, batch_idx):
        # `batch` is Lightning's device copy: its epoch/step/ids came along
        record_batch(self.log_batches, batch, self.global_rank, self.current_epoch)
        return self.model(**{k: v for k, v in batch.items() if k in MODEL_INPUTS}).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


class KillAfter(Callback):
    def __init__(self, step: int | None) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        kill_if(trainer.global_step, self.step)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a materialized output (prep materialize-shuffle)")
    p.add_argument("--global-batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=20, help="optimizer steps in all (Lightning's max_steps)")
    p.add_argument("--ckpt-dir", default="out/lightning")
    p.add_argument("--save-steps", type=int, default=10)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from --ckpt-dir/last.ckpt")
    p.add_argument("--hidden-size", type=int, default=128, help="model width (default 128; the tests use 32)")
    p.add_argument("--log-batches", help="append each trained batch's epoch, step and ids here (JSON lines)")
    p.add_argument("--kill-after-step", type=int, help="SIGKILL the process after this step (resume tests)")
    args = p.parse_args()

    data = ReaderDataModule(args.data, global_batch_size=args.global_batch_size, num_workers=args.num_workers)
    vocab = vocab_size(ReaderDataset(args.data, global_batch_size=args.global_batch_size))  # reads the manifest only
    model = TinyLM(vocab=vocab, hidden_size=args.hidden_size, log_batches=args.log_batches)
    checkpoints = ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=args.save_steps, save_last=True, save_top_k=-1)
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[checkpoints, KillAfter(args.kill_after_step)])
    trainer.fit(model, datamodule=data, ckpt_path="last" if args.resume else None)


if __name__ == "__main__":
    main()
