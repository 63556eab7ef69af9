"""``import prep.reader`` stays light: neither Ray nor the materializer (a trainer imports only the reader)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_import_prep_reader_loads_neither_ray_nor_materialize():
    probe = ("import sys, prep.reader, prep.reader.loader, prep.reader.workers.preload\n"
             "print(' '.join(m for m in sys.modules if m.split('.')[0] == 'ray' or m.startswith('prep.materialize')))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert run.stdout.split() == []
