"""The release thread (prep/reader/workers/release.py) frees what it is handed, in a forked child too."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

# A fresh interpreter (no Lance, no Ray: a fork of the test process would copy their threads' state).
CHILD_FREES = """
import os, threading, weakref
from prep.reader.workers.release import Retiring

class Item:
    pass

def freed_on_release_thread() -> bool:
    done, where = threading.Event(), []
    item = Item()
    weakref.finalize(item, lambda: (where.append(threading.current_thread().name), done.set()))
    retiring = Retiring(keep=0)
    retiring.yielded(item)
    del item
    return done.wait(10) and where == ["reader release"]

assert freed_on_release_thread()  # the parent's thread is started
pid = os.fork()
if pid == 0:
    os._exit(0 if freed_on_release_thread() else 1)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_the_release_thread_frees_in_a_child_forked_after_it_started():
    """Without a thread of its own, a forked child would queue every batch and free none."""
    proc = subprocess.run([sys.executable, "-c", CHILD_FREES], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["child", "0"]
