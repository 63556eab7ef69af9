"""No input can hang or kill a prepare job: crashed and stuck items become rejects.

A worker process that dies (a native decoder's SIGSEGV, an OOM kill, an exit) or an
item that never finishes must cost only that item: it is rejected with the reason and
every other row is written exactly as in a clean run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# A job run in its own process (its own local Ray), so that a job that never ends can be
# killed, whole, when the test gives up on it. Chunk items: "segv" crashes the process.
_CRASHING_JOB = textwrap.dedent(
    """
    import json, os, signal, sys
    import pyarrow as pa
    from prep.prepare.job import ChunkOutput, run_chunks
    from prep.prepare.rejects import Reject
    from prep.ray_runtime import init_ray

    class Worker:
        def __call__(self, chunk, progress=None):
            items = progress.items(chunk) if progress is not None else ((x, None) for x in chunk)
            rows, rejects = [], []
            for item, poison in items:
                if poison is not None:
                    rejects.append(Reject("mem://items", f"item {item}", poison))
                    continue
                if item == "segv":
                    os.kill(os.getpid(), signal.SIGSEGV)
                rows.append(item)
            counts = {"rows_read": len(chunk), "rows_written": len(rows), "rows_rejected": len(rejects)}
            return ChunkOutput(pa.table({"item": pa.array(rows, pa.string())}), rejects, __import__("collections").Counter(counts))

    out = sys.argv[1]
    init_ray(num_cpus=2)
    results = run_chunks([["a", "b"], ["c", "segv", "d"], ["e"]], Worker(), output_uri=out + "/t.lance", rejects_uri=out + "/r.lance")
    print(json.dumps([dict(r.counts) for r in results]))
    """
)


def _run_alone(script: str, tmp_path: Path, seconds: float) -> subprocess.CompletedProcess:
    """Runs ``script`` in a new process group; kills the group (the job and its Ray) after ``seconds``."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the job did not finish within {seconds} s (a crashed worker was retried forever)")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_worker_that_segfaults_on_one_item_does_not_hang_the_job(tmp_path):
    done = _run_alone(_CRASHING_JOB, tmp_path, seconds=120)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert [c["rows_written"] for c in counts] == [2, 2, 1]
    assert [c["rows_rejected"] for c in counts] == [0, 1, 0]
