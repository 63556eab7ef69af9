"""A warm ``prep`` for tests that run many commands as a user types them (docs pages): ``prep`` on PATH is
a tiny client that hands its argv, cwd, environment and stdin/stdout/stderr to a server which imported
prep's heavy modules once (torch, transformers, Lance, pyarrow, matplotlib) and forks one child per
command. The child is the real ``prep`` entry point (``sys.exit(prep.cli.main())``) in that cwd and
environment, on those file descriptors; only the 3-5 CPU-s of imports a fresh interpreter pays are gone.
The client exits with the child's status. Forking is safe: the server imports modules and never calls
into them (no Lance thread runs in it; see prep/runtime/zygote.py).

Run as ``python warm_cli.py SOCKET``: serves until killed (:func:`warm_prep` starts and stops it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

_PRELOAD = ("prep.cli", "prep.cli.pretokenize", "prep.cli.decode_images", "prep.cli.inspect",
            "prep.cli.materialize_shuffle", "prep.cli.verify", "prep.cli.prewarm", "prep.cli.read", "prep.cli.bench",
            "torch", "transformers", "transformers.models.auto.tokenization_auto", "tokenizers", "lance", "pyarrow",
            "pyarrow.dataset", "numpy", "matplotlib.pyplot", "PIL.Image")

_CLIENT = """\
#!{python} -S
# A warm `prep` (tests/common/warm_cli.py): the real prep.cli.main, forked from a server that imported it.
import json, os, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect({sock!r})
body = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
socket.send_fds(s, [struct.pack("!I", len(body)) + body], [0, 1, 2])
status = s.recv(4)
sys.exit(struct.unpack("!i", status)[0] if len(status) == 4 else 70)
"""


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise EOFError("the warm prep client left")
        data += part
    return data


def _serve(path: str) -> list[str]:
    """Accept commands forever; returns only in a forked child: its argv (cwd, env and fds already set)."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(16)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    while True:
        conn, _ = listener.accept()
        if os.fork():
            conn.close()
            continue
        # supervisor: forks the command, reports its exit status to the client
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        msg, fds, _, _ = socket.recv_fds(conn, 4, 3)
        request = json.loads(_recv_exact(conn, struct.unpack("!I", msg)[0]))
        pid = os.fork()
        if pid == 0:
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
                os.close(fd)
            conn.close()
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = ["prep", *request["argv"]]
            return request["argv"]
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        conn.sendall(struct.pack("!i", code if code >= 0 else 128 - code))
        os._exit(0)


@contextlib.contextmanager
def warm_prep(bin_dir: Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Start a server (in ``env``) and put a ``prep`` client in ``bin_dir``; yields ``env`` with ``bin_dir``
    first on PATH. The server and every command still running are killed on exit."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    sock = str(bin_dir / "prep.sock")
    proc = subprocess.Popen([sys.executable, __file__, sock], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the warm prep server did not start (exit {proc.poll()})")
            time.sleep(0.05)
        client = bin_dir / "prep"
        client.write_text(_CLIENT.format(python=sys.executable, sock=sock))
        client.chmod(0o755)
        yield {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


if __name__ == "__main__":
    import atexit
    import gc
    import importlib
    import threading
    import warnings

    sys.path.pop(0)  # this folder: a real `prep` does not see tests/common's modules
    for name in _PRELOAD:
        importlib.import_module(name)
    filters = list(warnings.filters)
    # Lance warns in every forked child; forking is safe here (no Lance thread ever ran in the server).
    warnings.filterwarnings("ignore", message="lance is not fork-safe")
    gc.freeze()  # the children's collections leave the imported heap alone (no copy-on-write of it)
    argv = _serve(sys.argv[1])
    warnings.filters[:] = filters
    from prep.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
    # An interpreter's exit, in its order, less the teardown of the imported heap (seconds, observable by nobody).
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
