"""Train a small causal LM on a materialized SFT output with prep.reader, and resume it exactly.

A real loop, kept short: a Llama-style model built from a config (random init, no
hub download), AdamW, the reader's status line every ``--log-every`` steps, and a
checkpoint holding model + optimizer + reader state. ``--resume`` continues from
the checkpoint: the reader seeks to the step after the last one trained on, so the
run sees exactly the batches an uninterrupted run would have seen.

    prep materialize-shuffle --table out/gsm8k.lance --output out/gsm8k-epochs --epochs 3
    python examples/train_sft.py --data out/gsm8k-epochs --steps 20 --ckpt out/ckpt.pt
    python examples/train_sft.py --data out/gsm8k-epochs --steps 40 --ckpt out/ckpt.pt --resume

On a CPU most of a step is the 32k-vocabulary output layer: materialize with few
splits (``--splits 8``) and train with a small global batch (``--global-batch-size 8``)
for a demo that takes seconds a step.

Under ``torchrun --nproc-per-node N`` each process reads its rank's splits
(``RANK``/``WORLD_SIZE``) and gradients are averaged with DDP; the checkpoint is
written by rank 0 (every rank is at the same global step).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import time

import torch

from prep.reader import Loader, ReaderDataset
from prep.runtime.world import rank_and_world_size

log = logging.getLogger("train_sft")


def build_model(vocab_size: int, seed: int, hidden_size: int = 128) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=hidden_size * 8 // 3,
                         num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def vocab_size(dataset: ReaderDataset) -> int:
    """The table's tokenizer vocabulary (the model's output layer covers every id)."""
    return (dataset.layout.metadata.tokenizer.vocab_size if dataset.layout.metadata.tokenizer else None) or 32768


def record_batch(path: str | None, batch, rank: int = 0, trainer_epoch: int | None = None) -> None:
    """Appends the trained batch's origin to ``path`` (JSON lines): what the resume tests compare."""
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"rank": rank, "epoch": batch.epoch, "step": batch.step, "ids": batch.ids.tolist(),
                                "trainer_epoch": trainer_epoch}) + "\n")


def kill_if(step: int, kill_after_step: int | None) -> None:
    """SIGKILL this process after ``kill_after_step`` (a crash, for the kill-and-resume tests: no cleanup runs)."""
    if step == kill_after_step:
        os.kill(os.getpid(), signal.SIGKILL)


def save(path: str, **state) -> None:
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash mid-write leaves the previous checkpoint intact


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a materialized output (prep materialize-shuffle)")
    p.add_argument("--global-batch-size", type=int, default=48, help="rows per step over all ranks (default 48)")
    p.add_argument("--steps", type=int, default=20, help="train until this global step (default 20)")
    p.add_argument("--micro-batch-size", type=int, default=8,
                   help="rows per forward/backward; gradients accumulate over the local batch (default 8)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--log-every", type=int, default=5, help="status line every N steps (default 5)")
    p.add_argument("--ckpt", default="ckpt.pt", help="checkpoint path (default ckpt.pt)")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every N steps (default 10), and at the end")
    p.add_argument("--resume", action="store_true", help="continue from --ckpt")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes (default 0)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden-size", type=int, default=128, help="model width (default 128; the tests use 32)")
    p.add_argument("--log-batches", help="append each trained batch's epoch, step and row ids here (JSON lines)")
    p.add_argument("--kill-after-step", type=int, help="SIGKILL the process after this step (resume tests)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    rank, world = rank_and_world_size()  # the reader's own rules: torch.distributed, RANK/WORLD_SIZE, SLURM_*
    if world > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)

    dataset = ReaderDataset(args.data, global_batch_size=args.global_batch_size, rank=rank, world_size=world,
                            pin_memory=device.type == "cuda")
    loader = Loader(dataset, num_workers=args.num_workers, device=device)
    model = build_model(vocab_size(dataset), args.seed, args.hidden_size).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    step = 0
    if args.resume:
        ckpt = torch.load(args.ckpt, map_location=device, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        loader.load_state_dict(ckpt["reader"])  # strict: another data set or plan is an error
        step = ckpt["step"]
        log.info("resumed at step %d: reader epoch %d step %d", step, ckpt["reader"]["epoch"], ckpt["reader"]["step"])
    trained = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    model.train()
    started = time.perf_counter()
    for batch in loader if step < args.steps else ():
        # the loss is the mean over the batch's trained tokens (labels are shifted inside the model)
        record_batch(args.log_batches, batch, rank)
        targets = (batch["labels"][:, 1:] != -100).sum()
        loss = 0.0
        for start in range(0, batch.num_rows, args.micro_batch_size):
            rows = slice(start, start + args.micro_batch_size)
            inputs = {k: batch[k][rows] for k in ("input_ids", "attention_mask", "labels", "position_ids") if k in batch}
            part = trained(**inputs, num_items_in_batch=targets).loss
            part.backward()
            loss += part.item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step % args.log_every == 0 and rank == 0:
            log.info("step %d loss %.4f | %s", step, loss, loader.status_line())
        if (step % args.ckpt_every == 0 or step == args.steps) and rank == 0:
            # the reader state says what was consumed: batch `step` included, so resume starts after it
            save(args.ckpt, model=model.state_dict(), optimizer=optimizer.state_dict(), reader=loader.state_dict(),
                 step=step)
        kill_if(step, args.kill_after_step)
        if step >= args.steps:
            break
    if rank == 0:
        reader = loader.state_dict()
        log.info("done: step %d in %.1f s; reader at epoch %d step %d; checkpoint %s", step,
                 time.perf_counter() - started, reader["epoch"], reader["step"], args.ckpt)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
