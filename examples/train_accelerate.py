"""Train a tiny causal LM in an Accelerate loop on a materialized output, and resume it exactly.

``reader_loader`` gives the loop the rank's whole local batches on ``accelerator.device``
(``accelerator.prepare`` leaves it alone: no re-sharding, no dispatching) and registers
it, so ``accelerator.save_state`` saves the reader state and ``load_state`` restores it.
Run it with ``accelerate launch`` or ``torchrun`` for several processes.

    python examples/train_accelerate.py --data out/gsm8k-epochs --ckpt-dir out/acc --kill-after-step 20
    python examples/train_accelerate.py --data out/gsm8k-epochs --ckpt-dir out/acc --resume
"""

from __future__ import annotations

import argparse
import os

import torch
from accelerate import Accelerator

from prep.integrations.accelerate import reader_loader
from prep.reader import ReaderDataset
from train_sft import build_model, kill_if, record_batch, vocab_size

MODEL_INPUTS = ("input_ids", "attention_mask", "labels", "position_ids")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a materialized output (prep materialize-shuffle)")
    p.add_argument("--global-batch-size", type=int, default=8)
    p.add_argument("--epochs", type=int, help="train this many epochs (default: all the data has)")
    p.add_argument("--steps", type=int, help="stop after this global step (default: at the end of the epochs)")
    p.add_argument("--ckpt-dir", default="out/accelerate")
    p.add_argument("--save-steps", type=int, default=10)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from the last --ckpt-dir/step-N")
    p.add_argument("--hidden-size", type=int, default=128, help="model width (default 128; the tests use 32)")
    p.add_argument("--log-batches", help="append each trained batch's epoch, step and ids here (JSON lines)")
    p.add_argument("--kill-after-step", type=int, help="SIGKILL the process after this step (resume tests)")
    args = p.parse_args()

    accelerator = Accelerator(cpu=True)
    dataset = ReaderDataset(args.data, global_batch_size=args.global_batch_size)  # rank: from the accelerator's group
    loader = reader_loader(accelerator, dataset, num_workers=args.num_workers)
    model = build_model(vocab_size(dataset), seed=0, hidden_size=args.hidden_size)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=3e-4))
    if args.resume:  # model, optimizer, RNG and reader; the reader's position gives the step count and the epoch
        last = max(int(name.removeprefix("step-")) for name in os.listdir(args.ckpt_dir))
        accelerator.load_state(os.path.join(args.ckpt_dir, f"step-{last}"))
    step = loader.steps_done  # 0 on a fresh start
    model.train()
    for epoch in range(loader.position[0], args.epochs or len(dataset.steps_per_epoch)):
        for batch in loader:  # one epoch per pass (the rest of it after a resume)
            record_batch(args.log_batches, batch, accelerator.process_index, epoch)
            accelerator.backward(model(**{k: v for k, v in batch.items() if k in MODEL_INPUTS}).loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step % args.save_steps == 0:
                accelerator.save_state(os.path.join(args.ckpt_dir, f"step-{step}"))
            kill_if(step, args.kill_after_step)
            if step == args.steps:
                return


if __name__ == "__main__":
    main()
