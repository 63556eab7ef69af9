"""prep.reader with DataLoader worker processes: step order and exact resume despite worker prefetch."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import reader_fixtures as rf
from prep.reader import Loader, ReaderDataset
from prep.reader.shipping import Receiver, WorkerShipments, in_step_order

pytestmark = pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")
G = 96
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def out48():
    path, _ = rf.cached_output("sft48")
    batches = list(ReaderDataset(path, global_batch_size=G))
    reference = [(b.epoch, b.step, b.ids.copy()) for b in batches]
    return path, reference, batches


def consume(loader, stop=None):
    got = []
    for batch in loader:
        got.append((batch.epoch, batch.step, batch.ids.copy()))
        if len(got) == stop:
            break
    return got


@pytest.mark.parametrize("num_workers,stops", [(1, [6]), (2, [3, 12])], ids=["1-worker", "2-workers"])
@pytest.mark.slow
def test_resume_with_worker_processes_matches_uninterrupted_run(out48, num_workers, stops):
    path, reference, _ = out48
    for stop in stops:  # 6: epoch boundary, 3: inside an epoch, 12: the last batch
        loader = Loader(ReaderDataset(path, global_batch_size=G), num_workers=num_workers)
        first = consume(loader, stop)
        state = loader.state_dict()  # workers have prefetched past `stop`; the state must not have
        again = Loader(ReaderDataset(path, global_batch_size=G), num_workers=num_workers)
        again.load_state_dict(state)
        rest = consume(again)
        assert [(e, t) for e, t, _ in first + rest] == [(e, t) for e, t, _ in reference], f"stop={stop}"
        for (_, _, a), (_, _, b) in zip(first + rest, reference):
            np.testing.assert_array_equal(a, b)
        if rest:
            assert again.status_line().startswith("epoch 1 of 2 step 6 | ")


def test_bare_dataloader_with_two_workers_yields_steps_in_order_and_state_after_a_batch(out48):
    path, reference, batches = out48
    ds = ReaderDataset(path, global_batch_size=G)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=multiprocessing.get_context("forkserver"))
    got, workers = [], []
    for batch, want in zip(loader, batches):
        got.append((batch.epoch, batch.step, batch.ids.copy(), ds.state_after(batch)))
        workers.append(batch.worker)
        assert batch.keys() == want.keys() and all(torch.equal(batch[k], want[k]) for k in want)
    assert [(e, t) for e, t, _, _ in got] == [(e, t) for e, t, _ in reference]
    assert workers == [0, 1] * 6  # worker k builds steps k, k+2, ...: the round robin restores step order
    for (_, _, a, _), (_, _, b) in zip(got, reference):
        np.testing.assert_array_equal(a, b)
    assert [(s["epoch"], s["step"]) for *_, s in got[4:7]] == [(0, 5), (1, 0), (1, 1)]


@pytest.mark.parametrize("slots", [1, 2])
@pytest.mark.slow
def test_batches_held_across_a_whole_read_never_change_while_workers_reuse_their_buffers(out48, slots):
    """Workers rewrite a few shared buffers; a batch the consumer still holds must not be one of them.

    One or two buffers per worker force every buffer to be rewritten while the consumer holds every
    batch read so far (the race that once handed a resumed 2-worker read another batch's bytes).
    """
    path, _, _ = out48
    ds = ReaderDataset(path, global_batch_size=48)
    want = list(ReaderDataset(path, global_batch_size=48))
    context = multiprocessing.get_context("forkserver")
    receiver = Receiver(context, 2, slots=slots)
    shipments = DataLoader(WorkerShipments(ds, receiver), batch_size=None, num_workers=2, multiprocessing_context=context)
    held = list(in_step_order(iter(shipments), receiver, ds.schedule, ds.position))
    assert [(b.epoch, b.step) for b in held] == [(b.epoch, b.step) for b in want] and len(held) == 24
    for got, ref in zip(held, want):
        np.testing.assert_array_equal(got.ids, ref.ids)
        assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref), (got.epoch, got.step)


@pytest.mark.slow
def test_batches_held_through_loader_with_two_workers_equal_an_in_process_read(out48):
    path, _, _ = out48
    want = list(ReaderDataset(path, global_batch_size=48))
    held = list(Loader(ReaderDataset(path, global_batch_size=48), num_workers=2))
    assert len(held) == len(want) == 24
    for got, ref in zip(held, want):
        np.testing.assert_array_equal(got.ids, ref.ids)
        assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref), (got.epoch, got.step)


TRAINER = r"""
import sys, time
from prep.reader import Loader, ReaderDataset

if __name__ == "__main__":
    path, how = sys.argv[1], sys.argv[2]
    ds = ReaderDataset(path, global_batch_size=48)
    if how == "loader":
        loader = Loader(ds, num_workers=2, prefetch_factor=1)
    else:
        from prep.integrations.torchdata import stateful_loader
        loader = stateful_loader(ds, num_workers=2, prefetch_factor=1)
    it = iter(loader)
    next(it)
    print("training", flush=True)  # the workers have built ahead and wait for the consumer
    time.sleep(600)
"""


def _run_processes(pgid: int) -> dict[int, str]:
    """``{pid: command line}`` of the live (not zombie) processes in process group ``pgid``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found[int(entry)] = cmdline
    return found


def _shm_in_use(pids) -> set[str]:
    """Files of /dev/shm that ``pids`` have mapped (named semaphores, shared memory), not yet unlinked."""
    paths = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    path = line.split(maxsplit=5)[-1].strip() if len(line.split()) >= 6 else ""
                    if path.startswith("/dev/shm/") and not path.endswith("(deleted)"):
                        paths.add(path)
        except OSError:
            continue
    return paths


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")
def test_trainers_killed_by_sigkill_leave_no_worker_forkserver_tracker_or_shared_memory(out48):
    """Issue 21 #17: the workers, the forkserver and the resource tracker were still alive 75 s after the kill.

    Two trainers at once, each in its own process group: one through Loader (workers ship batches in shared
    buffers), one through torchdata's StatefulDataLoader (workers run the dataset as it is).
    """
    path, _, _ = out48
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    trainers = {how: subprocess.Popen([sys.executable, "-c", TRAINER, path, how], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
                for how in ("loader", "stateful_loader")}
    try:
        shm = set()
        for how, trainer in trainers.items():
            line = trainer.stdout.readline()
            assert line.strip() == "training", f"{how}: {trainer.stderr.read()[-3000:]}"
            before = _run_processes(trainer.pid)
            assert len(before) >= 5, before  # the trainer, the forkserver, the resource tracker, two workers
            mapped = _shm_in_use(before)
            assert any(p.startswith("/dev/shm/sem.") for p in mapped), mapped
            shm |= mapped
        for trainer in trainers.values():
            trainer.kill()
            trainer.wait()
        deadline, left = time.monotonic() + 60, {0: "not looked yet"}
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = {pid: cmd for trainer in trainers.values() for pid, cmd in _run_processes(trainer.pid).items()}
        assert not left, f"still alive after the trainers were killed: {left}"
        assert not [p for p in shm if os.path.exists(p)], "left in /dev/shm"
        for how, trainer in trainers.items():
            err = trainer.stderr.read()
            assert "exits: the process that started it" in err, f"{how}: {err[-3000:]}"
            assert "lance is not fork-safe" not in err, f"{how}: the forkserver's forks are the safe kind: {err[-3000:]}"
    finally:
        for trainer in trainers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(trainer.pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_loader_with_workers_starts_preloaded_forkserver_when_built_before_any_batch(out48):
    """The forkserver's imports (torch, prep.reader: seconds) overlap what the trainer does before its first batch."""
    code = (
        "import sys, time, psutil\n"
        "from prep.reader import Loader, ReaderDataset\n"
        f"loader = Loader(ReaderDataset(sys.argv[1], global_batch_size={G}), num_workers=1)\n"
        "deadline = time.time() + 60\n"
        "while time.time() < deadline:\n"
        "    server = [p for p in psutil.Process().children() if 'forkserver' in ' '.join(p.cmdline())]\n"
        "    if server and 'prep.reader.preload' in ' '.join(server[0].cmdline()):\n"
        "        print('forkserver', server[0].pid); break\n"
        "    time.sleep(0.1)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, out48[0]], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("forkserver "), out.stdout + out.stderr[-2000:]
