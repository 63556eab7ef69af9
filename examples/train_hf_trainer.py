"""Train a tiny causal LM with HF Trainer on a materialized output, and resume it exactly.

The only changes to a plain Trainer script: ``ReaderTrainerMixin`` in front of ``Trainer``
(TRL's ``SFTTrainer`` works the same way) and a ``ReaderDataset`` as ``train_dataset``.
Each checkpoint folder gets ``prep_reader_state.json``; ``--resume`` continues from the
last checkpoint with the batch after the last one trained on. Trainer's epoch is the
reader's epoch (both from 0).

    python examples/train_hf_trainer.py --data out/gsm8k-epochs --steps 20 --output-dir out/hf
    python examples/train_hf_trainer.py --data out/gsm8k-epochs --steps 40 --output-dir out/hf --resume
"""

from __future__ import annotations

import argparse

from transformers import Trainer, TrainerCallback, TrainingArguments

from prep.integrations.hf import ReaderTrainerMixin
from prep.reader import ReaderDataset
from train_sft import build_model, kill_if, record_batch, vocab_size

MODEL_INPUTS = ("input_ids", "attention_mask", "labels", "position_ids")


class ReaderTrainer(ReaderTrainerMixin, Trainer):
    log_batches: str | None = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # `inputs` is Trainer's device copy of the batch: its epoch/step/ids came along
        record_batch(self.log_batches, inputs, self.args.process_index, int(self.state.epoch or 0))
        inputs = {k: v for k, v in inputs.items() if k in MODEL_INPUTS}
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


class KillAfter(TrainerCallback):
    def __init__(self, step: int | None) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        kill_if(state.global_step, self.step)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a materialized output (prep materialize-shuffle)")
    p.add_argument("--global-batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=20, help="optimizer steps in all (Trainer's max_steps)")
    p.add_argument("--output-dir", default="out/hf-trainer")
    p.add_argument("--save-steps", type=int, default=10)
    p.add_argument("--num-workers", type=int, default=0, help="Trainer's dataloader_num_workers")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    p.add_argument("--hidden-size", type=int, default=128, help="model width (default 128; the tests use 32)")
    p.add_argument("--log-batches", help="append each trained batch's epoch, step and ids here (JSON lines)")
    p.add_argument("--kill-after-step", type=int, help="SIGKILL the process after this step (resume tests)")
    args = p.parse_args()

    dataset = ReaderDataset(args.data, global_batch_size=args.global_batch_size)
    training = TrainingArguments(output_dir=args.output_dir, max_steps=args.steps, save_steps=args.save_steps,
                                 logging_steps=1, learning_rate=3e-4, dataloader_num_workers=args.num_workers,
                                 report_to=[], use_cpu=True, seed=0)
    model = build_model(vocab_size(dataset), seed=0, hidden_size=args.hidden_size)
    trainer = ReaderTrainer(model=model, args=training, train_dataset=dataset, callbacks=[KillAfter(args.kill_after_step)])
    trainer.log_batches = args.log_batches
    trainer.train(resume_from_checkpoint=args.resume or None)


if __name__ == "__main__":
    main()
