"""What every prep command shows besides its result: help with an example, --version, -v/--quiet anywhere,
timestamped log lines without Ray's and Lance's noise, progress bars only on a terminal, and docs/cli.md
generated from the CLI itself."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

import prep
from prep.cli import build_parser, commands, main
from prep.cli.reference import markdown

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ["pretokenize", "decode-images", "inspect", "materialize-shuffle", "verify", "prewarm", "read", "bench"]
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def _in_terminal(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Runs ``python args`` with stderr on a pseudo-terminal (120 columns); returns (code, stdout, terminal text)."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    environ = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.run([sys.executable, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=secondary,
                          env=environ, timeout=300, text=True)
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 1 << 16)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        chunks.append(data)
    os.close(primary)
    return proc.returncode, proc.stdout, b"".join(chunks).decode(errors="replace")


def test_every_command_says_what_it_does_with_one_example():
    parser = build_parser()
    top = parser.format_help()
    assert "three stages" in top and "module" not in top  # the tool, not the code's layout
    sub = commands(parser)
    assert sorted(sub) == sorted(COMMANDS)
    for name in COMMANDS:
        text = sub[name].format_help()
        assert re.search(rf"\nexample:\n  prep {name} \S", text), name
        assert len(sub[name].description.split("\n\nexample:")[0]) > 60, name  # a real description before it
        assert "exit status: 0 OK" in " ".join(text.split()), name


def test_version_names_prep_and_its_stack(capsys):
    assert main(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"prep {prep.__version__} (") and "pylance" in line and "ray" in line and "torch" in line


@pytest.mark.parametrize(
    "argv,verbose,quiet",
    [
        (["verify", "OUT"], False, False),
        (["-v", "verify", "OUT"], True, False),
        (["verify", "OUT", "-v"], True, False),
        (["verify", "-v", "OUT", "--quiet"], True, True),
        (["--quiet", "read", "OUT", "--global-batch-size", "8", "--verbose"], True, True),
    ],
)
def test_verbose_and_quiet_work_before_and_after_the_command(argv, verbose, quiet):
    args = build_parser().parse_args(argv)
    assert (args.verbose, args.quiet) == (verbose, quiet)


def test_docs_cli_md_is_generated_from_the_cli():
    """If this fails, regenerate: python -m prep.cli.reference > docs/cli.md"""
    assert (REPO / "docs" / "cli.md").read_text() == markdown()


NOISE = """
import logging, sys, warnings
from prep.runtime import logs
logs.configure(verbose=sys.argv[1] == "-v")
warnings.warn("lance is not fork-safe. If you are using multiprocessing, use spawn or forkserver instead.")
logging.getLogger("ray.data").warning("Progress bars disabled")
logging.getLogger("ray").info("Started a local Ray instance.")
logging.getLogger("prep.job").info("an info line of ours")
logging.getLogger("prep.job").warning("a warning of ours")
"""


@pytest.mark.parametrize("flag", ["", "-v"])
def test_a_default_run_shows_prep_lines_only_and_v_shows_everything(flag):
    proc = subprocess.run([sys.executable, "-c", NOISE, flag], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": ""})
    lines = proc.stderr.splitlines()
    ours = [x for x in lines if "prep.job" in x]
    assert all(re.match(rf"{STAMP} (INFO|WARNING) prep\.job: ", x) for x in ours), lines
    if flag:
        assert len(ours) == 2 and any("fork-safe" in x for x in lines)
        assert any("Progress bars disabled" in x for x in lines) and any("Started a local Ray" in x for x in lines)
    else:
        assert lines == ours and len(ours) == 1 and "a warning of ours" in ours[0]


BAR = """
import sys
from prep.runtime import logs
from prep.runtime.progress import Bar
logs.configure(quiet="--quiet" in sys.argv)
with Bar(3, "demo chunks", unit="chunk") as bar:
    for _ in range(3):
        bar.update(1, rows=1000)
print(bar.done)
"""


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_bars_draw_on_a_terminal_unless_quiet(quiet):
    code, out, terminal = _in_terminal(["-c", BAR, *(["--quiet"] if quiet else [])])
    assert code == 0 and out.strip() == "3"
    assert ("demo chunks: 100%" in terminal and "3/3" in terminal and "rows=1.00k" in terminal) != quiet, terminal


def test_progress_bars_stay_out_of_pipes_and_logs():
    proc = subprocess.run([sys.executable, "-c", BAR], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and proc.stdout.strip() == "3" and proc.stderr == ""


@pytest.mark.skipif(not (REPO.parent / "shared" / "data" / "gsm8k" / "train.jsonl").is_file(), reason="needs ../shared/data")
def test_a_prepare_job_shows_one_bar_and_nothing_else_on_a_terminal(tmp_path):
    lines = (REPO.parent / "shared" / "data" / "gsm8k" / "train.jsonl").read_text().splitlines()[:40]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    code, out, terminal = _in_terminal(["-m", "prep", "pretokenize", "--config", str(REPO / "configs" / "gsm8k-sft.yaml"),
                                        "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "t.lance")])
    assert code == 0 and "rows: read 40 = written 40 + rejected 0" in out
    shown = [x for x in re.split(r"[\r\n]+", terminal) if x.strip()]
    assert shown and all(re.match(r"pretokenize t\.lance: +\d+%\|", x) for x in shown), shown
    assert "1/1" in shown[-1] and "rows=40" in shown[-1] and "tok/s=" in shown[-1]
