"""Ray Train: a TorchTrainer whose workers read their share of a materialized output with prep.reader.

Each worker builds its ``ReaderDataset`` after Ray Train has set up the process group, so prep's
rank resolution takes the rank and world size Ray Train gives it (checked against
``ray.train.get_context()``); every ``--ckpt-every`` steps rank 0 puts the reader state in the
checkpoint it gives ``ray.train.report``. When a worker dies, ``FailureConfig`` restarts the group
from the last checkpoint and the reader resumes at the next global step; a restart on fewer
workers (``--resume-from`` a checkpoint, with a smaller ``--workers``) continues the same global batches.

    prep materialize-shuffle --table out/gsm8k.lance --output out/gsm8k-epochs --epochs 1 --splits 2
    python examples/ray_train.py --data out/gsm8k-epochs --storage /tmp/ray-train --workers 2

CPU only (gloo); the model is a toy (an embedding bag over the tokens): the point is the data path.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile

import ray
import torch
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train_loop(config: dict) -> None:
    """One Ray Train worker: its rank's batches of every global step, a checkpoint with the reader state."""
    from torch.nn.parallel import DistributedDataParallel

    from prep.integrations.ranks import check_rank
    from prep.reader import Loader, ReaderDataset

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    dataset = ReaderDataset(config["data"], global_batch_size=config["global_batch"])  # rank from the process group
    check_rank(dataset, rank, world, "Ray Train")
    loader = Loader(dataset)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(32768, 16), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    checkpoint = ray.train.get_checkpoint()  # the latest of this run (a restart), else the one to continue from
    if checkpoint is None and config.get("resume_from"):
        checkpoint = Checkpoint(config["resume_from"])
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, "state.pt"), weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["reader"])  # any world size that divides the global batch
        step = state["step"]
    trained = DistributedDataParallel(model)
    for batch in loader if step < config["steps"] else ():
        if config.get("kill_after_step") == step and rank == world - 1 and not os.path.exists(config["killed"]):
            open(config["killed"], "w").close()  # once: the restarted worker trains on
            os.kill(os.getpid(), signal.SIGKILL)
        if config.get("log"):
            with open(config["log"], "a") as f:
                f.write(json.dumps({"rank": rank, "world": world, "epoch": batch.epoch, "step": batch.step,
                                    "ids": batch.ids.tolist()}) + "\n")
        loss = trained(batch["input_ids"].clamp(max=32767)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        metrics = {"step": step, "loss": loss.item()}
        if step % config["ckpt_every"] == 0 or step == config["steps"]:
            with tempfile.TemporaryDirectory() as folder:
                if rank == 0:  # every rank is at the same global step: rank 0's reader state resumes all of them
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "reader": loader.state_dict(), "step": step}, os.path.join(folder, "state.pt"))
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(folder) if rank == 0 else None)
        if step == config["steps"]:
            break


def fit(data: str, storage: str, name: str, *, workers: int, global_batch: int, steps: int, ckpt_every: int = 1,
        resume_from: str | None = None, log: str | None = None, kill_after_step: int | None = None,
        max_failures: int = 2) -> ray.train.Result:
    """Runs the trainer; ``kill_after_step`` SIGKILLs the last worker once before that step (the resume tests)."""
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"data": os.path.abspath(data), "global_batch": global_batch, "steps": steps, "ckpt_every": ckpt_every,
                           "log": log, "kill_after_step": kill_after_step, "killed": os.path.join(storage, f"{name}.killed"),
                           "resume_from": resume_from},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=name, storage_path=os.path.abspath(storage), failure_config=FailureConfig(max_failures=max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=None)),
    )
    return trainer.fit()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a materialized output (prep materialize-shuffle)")
    p.add_argument("--storage", required=True, help="Ray Train's storage_path (checkpoints)")
    p.add_argument("--name", default="prep-ray-train")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--global-batch-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--ckpt-every", type=int, default=1)
    p.add_argument("--kill-after-step", type=int, help="SIGKILL the last worker once, before this step (FailureConfig restarts it)")
    p.add_argument("--resume-from", help="a checkpoint folder to continue from (any --workers dividing the global batch)")
    p.add_argument("--log-batches", help="append each worker's batch (epoch, step, ids) here, as JSON lines")
    args = p.parse_args()
    ray.init()
    result = fit(args.data, args.storage, args.name, workers=args.workers, global_batch=args.global_batch_size, steps=args.steps,
                 ckpt_every=args.ckpt_every, resume_from=args.resume_from,
                 log=args.log_batches, kill_after_step=args.kill_after_step)
    print(json.dumps({"metrics": result.metrics, "checkpoint": result.checkpoint.path if result.checkpoint else None}))


if __name__ == "__main__":
    main()
