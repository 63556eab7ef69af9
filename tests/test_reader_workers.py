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
import psutil
import pytest
import torch
from torch.utils.data import DataLoader

import reader_fixtures as rf
from prep.reader import Loader, ReaderDataset
from prep.reader.workers.shipping import Receiver, WorkerShipments, in_step_order

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
        loader = Loader(ReaderDataset(path, global_batch_size=G), num_workers=num_workers, start_in_process=False)
        first = consume(loader, stop)
        state = loader.state_dict()  # workers have prefetched past `stop`; the state must not have
        again = Loader(ReaderDataset(path, global_batch_size=G), num_workers=num_workers, start_in_process=False)
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
    held = list(Loader(ReaderDataset(path, global_batch_size=48), num_workers=2, start_in_process=False))
    assert len(held) == len(want) == 24
    for got, ref in zip(held, want):
        np.testing.assert_array_equal(got.ids, ref.ids)
        assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref), (got.epoch, got.step)


TRAINER = r"""
import sys, time
import psutil
from prep.reader import Loader, ReaderDataset

if __name__ == "__main__":
    path, how = sys.argv[1], sys.argv[2]
    ds = ReaderDataset(path, global_batch_size=48)
    if how == "loader":
        loader = Loader(ds, num_workers=2, prefetch_factor=1, start_in_process=False)
    elif how == "handoff":
        loader = Loader(ds, num_workers=2, prefetch_factor=1)
    else:
        from prep.integrations.torchdata import stateful_loader
        loader = stateful_loader(ds, num_workers=2, prefetch_factor=1)
    it = iter(loader)
    next(it)
    while how == "handoff" and sum(len(p.children()) for p in psutil.Process().children()) < 2:
        time.sleep(0.1)  # the workers are forked; asked for nothing more, they wait for the handoff step
    print("training", flush=True)  # the workers have built ahead (or wait to take over) and wait for the consumer
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

    Three trainers at once, each in its own process group: two through Loader (workers ship batches in shared
    buffers; or, the default, they wait to take over from the trainer's own reads), one through torchdata's
    StatefulDataLoader (workers run the dataset as it is).
    """
    path, _, _ = out48
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    trainers = {how: subprocess.Popen([sys.executable, "-c", TRAINER, path, how], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
                for how in ("loader", "handoff", "stateful_loader")}
    try:
        shm = set()
        for how, trainer in trainers.items():
            line = trainer.stdout.readline()
            assert line.strip() == "training", f"{how}: {trainer.stderr.read()[-3000:]}"
            # a worker forked is not yet a worker that mapped the queues' semaphores: on a loaded machine (three test
            # files at a time) one trainer's were not mapped yet when it printed; wait for them, 30 s at most
            deadline = time.monotonic() + 30
            while True:
                before = _run_processes(trainer.pid)
                mapped = _shm_in_use(before)
                ready = len(before) >= 5 and any(p.startswith("/dev/shm/sem.") for p in mapped)
                if ready or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert len(before) >= 5, (how, before)  # the trainer, the forkserver, the resource tracker, two workers
            assert any(p.startswith("/dev/shm/sem.") for p in mapped), (how, mapped)
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


STARTING_TRAINER = r"""
import sys, time
from prep.reader import Loader, ReaderDataset

if __name__ == "__main__":
    loader = Loader(ReaderDataset(sys.argv[1], global_batch_size=4), num_workers=2, prefetch_factor=1)
    print("built", flush=True)  # the forkserver starts now; the workers once the first batch is asked for
    for batch in loader:
        time.sleep(0.05)
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")
def test_trainers_killed_while_their_workers_start_leave_no_process_or_semaphore():
    """Issue 31 #7: a trainer killed 2.5-3.5 s after ``Loader(num_workers=2)`` started left its resource tracker,
    forkserver and a worker running (3 of 3 tries), and 23 ``sem.mp-*`` in /dev/shm. Killed at several moments of
    the start-up (the forkserver importing, the workers forked, waiting for the handoff step, taking over), every
    process of the trainer's group ends and no semaphore it had mapped remains."""
    path, _ = rf.cached_output("sft4-long")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    delays = (0.0, 2.5, 3.5, 6.0)
    trainers = {delay: subprocess.Popen([sys.executable, "-c", STARTING_TRAINER, path], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
                for delay in delays}
    try:
        built = {}
        for delay, trainer in trainers.items():
            line = trainer.stdout.readline()
            assert line.strip() == "built", f"{delay}: {trainer.stderr.read()[-3000:]}"
            built[delay] = time.monotonic()
        shm = {}
        for delay, trainer in sorted(trainers.items()):
            time.sleep(max(0.0, built[delay] + delay - time.monotonic()))
            shm[delay] = {p for p in _shm_in_use(_run_processes(trainer.pid)) if p.startswith("/dev/shm/sem.mp-")}
            trainer.kill()
            trainer.wait()
        deadline, left = time.monotonic() + 60, {0: "not looked yet"}
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = {(delay, pid): cmd for delay, trainer in trainers.items() for pid, cmd in _run_processes(trainer.pid).items()}
        assert not left, f"still alive 60 s after the trainers were killed (delay, pid): {left}"
        remaining = {delay: [p for p in paths if os.path.exists(p)] for delay, paths in shm.items()}
        assert not any(remaining.values()), f"left in /dev/shm, by delay: {remaining}"
    finally:
        for trainer in trainers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(trainer.pid, signal.SIGKILL)


LEFT_OPEN = r"""
import os, sys, time
from prep.reader import Loader, ReaderDataset

if __name__ == "__main__":
    workers = int(sys.argv[2])
    loader = Loader(ReaderDataset(sys.argv[1], global_batch_size=4), num_workers=workers)
    it = iter(loader)
    next(it)
    deadline = time.monotonic() + 60
    while workers and loader.handoff is None and time.monotonic() < deadline:  # the workers took over
        next(it)
        time.sleep(0.01)
    # Held by a module imported before prep's: the interpreter wipes its globals at exit after those of the
    # modules the iterator's shutdown runs (as Python 3.12 does with __main__'s), so it is closed only then.
    os.left_open = it
    print("left open", flush=True)
"""


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_an_iterator_left_open_at_interpreter_exit_shuts_down_quietly(num_workers):
    """Issue 31 #10: on Python 3.12 an open iterator printed ``AttributeError: 'NoneType' object has no attribute
    'Empty'`` from the batcher's shutdown, run after the module globals it reads were set to None."""
    path, _ = rf.cached_output("sft4-long")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", LEFT_OPEN, path, str(num_workers)], capture_output=True, text=True,
                          env=env, timeout=180)
    assert done.returncode == 0 and done.stdout.strip() == "left open", done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-3000:]


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
        "    if server and 'prep.reader.workers.preload' in ' '.join(server[0].cmdline()):\n"
        "        print('forkserver', server[0].pid, flush=True)\n"
        "        server[0].kill(); break  # seen: its imports, seconds of CPU, are not what is tested\n"
        "    time.sleep(0.1)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, out48[0]], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("forkserver "), out.stdout + out.stderr[-2000:]


def test_a_loader_s_first_batches_come_from_this_process_while_its_workers_start():
    """Workers start from a forkserver that imports torch (seconds); the first batch must not wait for it.

    The trainer takes a step every 30 ms until workers deliver: the first steps are read in this
    process, the workers take over at the step the loader names, and the whole read, every state
    included, is the one an in-process read gives.
    """
    path, _ = rf.cached_output("sft4-long")
    want = list(ReaderDataset(path, global_batch_size=4))
    loader = Loader(ReaderDataset(path, global_batch_size=4), num_workers=2)
    got, states = [], []
    for batch in loader:
        got.append(batch)
        states.append(loader.state_dict())
        if loader.handoff is None:
            time.sleep(0.03)
    built_here = [b.stats is None for b in got]
    handoff = built_here.index(False)
    assert handoff > 0 and not any(built_here[handoff:]), "in process first, then workers only"
    assert (got[handoff].epoch, got[handoff].step) == loader.handoff
    assert {b.worker for b in got[handoff:]} == {0, 1}
    assert [(b.epoch, b.step) for b in got] == [(b.epoch, b.step) for b in want]
    for b, ref in zip(got, want):
        np.testing.assert_array_equal(b.ids, ref.ids)
        assert b.keys() == ref.keys() and all(torch.equal(b[k], ref[k]) for k in ref), (b.epoch, b.step)
    stats = loader.stats()
    assert stats.consumed_batches == len(want) and stats.consumed_rows == 4 * len(want)
    assert stats.rows_read >= stats.consumed_rows  # this process's reads and the workers' both counted
    resumed = Loader(ReaderDataset(path, global_batch_size=4))  # a state taken after a worker's batch
    resumed.load_state_dict(states[handoff + 2])
    assert [(b.epoch, b.step) for b in resumed][:3] == [(b.epoch, b.step) for b in want[handoff + 3:handoff + 6]]


class _FailsInAWorker:
    """A transform that cannot be unpickled in another process: a worker given it fails to start."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def __call__(self, batch):
        return dict(batch)

    def __setstate__(self, state: dict) -> None:
        if state["pid"] != os.getpid():
            raise RuntimeError("this transform cannot be unpickled in a worker")
        self.__dict__.update(state)


def test_a_worker_that_fails_to_start_fails_the_read_its_loader_began_in_process():
    """The workers start in a thread while this process reads: their failure must still reach the trainer."""
    path, _ = rf.cached_output("sft4-long")
    loader = Loader(ReaderDataset(path, global_batch_size=4, transform=_FailsInAWorker()), num_workers=1)
    read = 0
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        for _ in loader:
            read += 1
            time.sleep(0.03)
    assert 0 < read < len(loader), "read in process first, failed before the end"
    assert loader.handoff is None


class _SlowToStartInAWorker:
    """A transform that takes 3 s on its first batch in a worker process (a slow first read there)."""

    def __init__(self) -> None:
        self.pid, self.started = os.getpid(), False

    def __call__(self, batch):
        if os.getpid() != self.pid and not self.started:
            self.started = True
            time.sleep(3.0)
        return dict(batch)


def test_the_trainer_reads_on_in_process_until_the_workers_have_the_next_step():
    """The workers' first batch came 3 s after the handoff step was named (its lead: 1 s of steps).
    The trainer does not wait for it: this process reads on, and the workers' batches before the
    switch are dropped, so the first worker batch it gets is not the first its worker built."""
    path, _ = rf.cached_output("sft4-long")
    want = list(ReaderDataset(path, global_batch_size=4))
    loader = Loader(ReaderDataset(path, global_batch_size=4, transform=_SlowToStartInAWorker()), num_workers=1)
    got = []
    for batch in loader:
        got.append(batch)
        if loader.handoff is None:
            time.sleep(0.03)
    switch = [b.stats is None for b in got].index(False)
    assert got[switch].stats.consumed_batches > 1, "the trainer waited for the workers' first batch"
    assert [(b.epoch, b.step) for b in got] == [(b.epoch, b.step) for b in want]
    for b, ref in zip(got, want):
        np.testing.assert_array_equal(b.ids, ref.ids)


def test_a_loader_closed_before_its_workers_are_up_leaves_no_worker_running():
    path, _ = rf.cached_output("sft4-long")
    loader = Loader(ReaderDataset(path, global_batch_size=4), num_workers=2)
    it = iter(loader)
    first = next(it)
    assert first.stats is None and loader.handoff is None
    it.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = _forkserver_children()
        if not workers:
            break
        time.sleep(0.2)
    assert not workers, workers


def _forkserver_children() -> list[int]:
    """Pids of the running children of this process's forkserver: under forkserver, its workers.
    Zombies (exited, not yet reaped) do not count; a process that exits while looked at is skipped."""
    running = []
    for server in psutil.Process().children():
        with contextlib.suppress(psutil.NoSuchProcess):  # ZombieProcess is one
            if server.status() == psutil.STATUS_ZOMBIE or "forkserver" not in " ".join(server.cmdline()):
                continue
            for child in server.children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    if child.status() != psutil.STATUS_ZOMBIE:
                        running.append(child.pid)
    return running


@pytest.mark.parametrize("start_in_process", [False, True])
def test_shipments_are_copied_out_on_a_thread_not_the_trainer_s(monkeypatch, start_in_process):
    """Copying a shipment out takes milliseconds (G = 256: ~3 MB a step): on the trainer's thread it was a wait."""
    import threading

    from prep.reader.workers import shipping

    copied_on = []
    unpack = shipping.Receiver.batches

    def recorded(self, shipment):
        copied_on.append(threading.current_thread().name)
        return unpack(self, shipment)

    monkeypatch.setattr(shipping.Receiver, "batches", recorded)
    path, _ = rf.cached_output("sft4-long")
    loader = Loader(ReaderDataset(path, global_batch_size=4), num_workers=1, start_in_process=start_in_process)
    for batch in loader:
        if loader.handoff is None and start_in_process:
            time.sleep(0.03)
    assert copied_on and set(copied_on) == {"reader receive"}, copied_on
