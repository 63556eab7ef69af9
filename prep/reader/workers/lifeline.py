"""DataLoader workers that end with their trainer: a trainer killed by SIGKILL leaves nothing running.

Under ``forkserver`` a worker is the forkserver's child, not the trainer's, so torch's own
check (``os.getppid()`` changed) watches the forkserver; and the forkserver runs as long as
any worker holds its "alive" pipe, as multiprocessing's resource tracker does for its own
pipe. Kill the trainer and all of them stay, adopted by init, the workers blocked waiting for
a consumer that is gone (and the tracker, which unlinks the run's named semaphores in /dev/shm
once every holder of its pipe is gone, never gets to).

So each worker watches the process that started it (:func:`watch`), from the moment it is forked
(:mod:`prep.reader.workers.preload`: the trainer can die before torch's worker loop starts, and a worker
forked then waits for indices forever): a thread waits on a pidfd
of that process (Linux >= 5.3; elsewhere it polls the pid every :data:`POLL_S` seconds). When
it is gone, the thread interrupts the worker's main thread, so the reader's ``finally`` blocks
stop its threads and close its splits, and ends the process itself if it still runs
:data:`GRACE_S` seconds later. Whatever else a worker holds dies with it: cache leases are
``flock`` s, its shared buffers are already-unlinked file descriptors, a Lance helper process
(:mod:`prep.reader.workers.forksafe`) exits when its pipe closes. With the workers gone, the forkserver
and the resource tracker see their pipes close and exit, and the tracker unlinks the
semaphores the trainer could not.

``PR_SET_PDEATHSIG`` is not used: it follows the *thread* that forked the worker, which under
``forkserver`` is the forkserver (it outlives the trainer: nothing would happen), and under
``fork``/``spawn`` whichever trainer thread first iterated the DataLoader (a thread that ends
would take healthy workers with it).
"""

from __future__ import annotations

import _thread
import multiprocessing
import os
import select
import signal
import sys
import threading
import time

__all__ = ["watch", "GRACE_S", "POLL_S"]

GRACE_S = 5.0  # how long the interrupted main thread has to unwind before the process exits anyway
POLL_S = 1.0  # where pidfds do not exist: how often the parent's pid is checked
_watching: int | None = None  # the pid whose watch thread runs (a forked child starts its own)


def watch(*, forked: bool = False) -> None:
    """In a worker process: end this process soon after the process that started it dies.

    Idempotent; does nothing outside a ``multiprocessing`` child (the trainer itself). ``forked``:
    called in a fork hook (:mod:`prep.reader.workers.preload`), before multiprocessing has read which process
    started this one; the thread waits until it has.
    """
    global _watching
    if _watching == os.getpid() or (not forked and multiprocessing.parent_process() is None):
        return
    _watching = os.getpid()
    threading.Thread(target=_end_after, name="prep-lifeline", daemon=True).start()


def _end_after() -> None:
    while (parent := multiprocessing.parent_process()) is None or parent.pid is None:
        time.sleep(POLL_S / 20)
    _wait_for_exit(parent.pid)
    print(f"prep.reader: worker {os.getpid()} exits: the process that started it ({parent.pid}) is gone", file=sys.stderr,
          flush=True)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # else interrupt_main would do nothing
        _thread.interrupt_main()  # KeyboardInterrupt: torch's worker loop ends quietly, finally blocks run
        time.sleep(GRACE_S)
    os._exit(1)


def _wait_for_exit(pid: int) -> None:
    """Returns once process ``pid`` has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd_open (not Linux, or a kernel before 5.3)
        while _alive(pid):
            time.sleep(POLL_S)
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():  # readable once the process has exited
            pass
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else: the pid was reused, our parent is gone
        return False
    return True
