"""Every ``prep`` command fails in one line with a documented exit code, and never destroys files it did not write.

The real CLI runs in a process of its own: ``python -m prep`` importing this checkout, or (most tests) the
same entry point forked from a process that imported it once (tests/common/warm_cli.py):
exit status 0 OK, 1 verification mismatch, 2 unusable input or usage error;
stderr is then exactly one line that names the file or the flag.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import pytest

import tables
from common.warm_cli import warm_prep
from prep.materialize import materialize_shuffle

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ["verify", "prewarm", "read", "materialize-shuffle", "pretokenize", "decode-images"]


_WARM: list[str] = []  # the warm `prep` client while this module runs (see _warm_prep)


def _environ(env: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore", **(env or {})}


@pytest.fixture(scope="module", autouse=True)
def _warm_prep(tmp_path_factory):
    """The real entry point forked per command from a process that imported prep once (tests/common/warm_cli.py):
    each of this module's ~60 commands in a fresh interpreter paid 2-4 CPU-s of imports."""
    with warm_prep(tmp_path_factory.mktemp("warm") / "bin", _environ()) as env:
        _WARM.append(env["PATH"].split(os.pathsep)[0] + "/prep")
        yield
        _WARM.clear()


def prep(*args: str, env: dict[str, str] | None = None, cold: bool = False) -> subprocess.CompletedProcess:
    """``prep ARGS`` in a process of its own: forked warm, or (``cold``) ``python -m prep`` from scratch."""
    command = [sys.executable, "-m", "prep"] if cold or not _WARM else [_WARM[0]]
    return subprocess.run([*command, *args], capture_output=True, text=True, env=_environ(env), timeout=300)


def one_line_error(proc: subprocess.CompletedProcess, code: int, *names: str) -> str:
    """Asserts the exit code and a one-line stderr naming each of ``names``; returns that line."""
    lines = proc.stderr.splitlines()
    assert proc.returncode == code, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and ".rs:" not in proc.stderr
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def source(tmp_path_factory, ray_local) -> str:
    return tables.synthetic_table(str(tmp_path_factory.mktemp("cli") / "t.lance"), num_rows=400, max_len=30)


@pytest.fixture(scope="module")
def good(source, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("cli") / "out")
    materialize_shuffle(table=source, output=out, epochs=1, splits=4)
    return out


@pytest.fixture
def out(good, tmp_path) -> str:
    """A fresh copy of a good materialized output, to damage."""
    return shutil.copytree(good, str(tmp_path / "out"))


def _commands_on(out: str, cache: str) -> dict[str, list[str]]:
    return {
        "verify": ["verify", out],
        "prewarm": ["prewarm", out, "--cache", cache],
        "read": ["read", out, "--global-batch-size", "4"],
    }


def _write_manifest(out: str, text: str) -> None:
    with open(os.path.join(out, "manifest.json"), "w") as f:
        f.write(text)


def _manifest(out: str) -> dict:
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def test_help_documents_the_exit_codes():
    for command in COMMANDS:
        proc = prep(command, "--help", cold=True)
        assert proc.returncode == 0
        text = " ".join(proc.stdout.split())
        assert "exit status: 0 OK" in text and "2 unusable input or usage error" in text, command
        assert ("1 verification mismatch" in text) == (command == "verify")


@pytest.mark.parametrize(
    "damage,says",
    [
        (lambda m: '{"format": "prep.materialized/1",\n  "epochs": [\n', "is not valid JSON (line 3"),
        (lambda m: json.dumps([m]), "top level is not a JSON object"),
        (lambda m: json.dumps({k: v for k, v in m.items() if k != "plan"}), "missing keys ['plan']"),
        (lambda m: json.dumps({**m, "format": "prep.materialized/9"}), "format='prep.materialized/9'"),
        (lambda m: json.dumps({**m, "epochs": "all"}), "epochs must be a non-empty list"),
        (lambda m: json.dumps({**m, "epochs": [{"epoch": 0, "splits": m["epochs"][0]["splits"][1:]}]}), "epoch 0 lists splits [1, 2, 3]"),
        (lambda m: json.dumps({**m, "source": {"uri": m["source"]["uri"]}}), "its version"),
    ],
    ids=["not-json", "not-object", "missing-key", "format-version", "epochs-type", "split-missing-in-manifest", "no-version"],
)
def test_a_corrupt_manifest_is_one_line_naming_it(out, tmp_path, damage, says):
    _write_manifest(out, damage(_manifest(out)))
    for command, args in _commands_on(out, str(tmp_path / "cache")).items():
        line = one_line_error(prep(*args), 2, "manifest.json", says)
        assert line.startswith(f"prep {command}: error: "), line


def test_a_missing_split_is_a_verify_mismatch_and_an_error_elsewhere(out, tmp_path):
    shutil.rmtree(os.path.join(out, "epoch-00000", "split-00001.lance"))
    one_line_error(prep("verify", out), 1, "FAILED", "split-00001.lance")
    one_line_error(prep("prewarm", out, "--cache", str(tmp_path / "cache")), 2, "split-00001.lance")
    one_line_error(prep("read", out, "--global-batch-size", "4"), 2, "split-00001.lance")


@pytest.mark.parametrize("how", ["truncated", "deleted"])
def test_a_damaged_split_data_file_is_one_line_naming_the_split(out, tmp_path, how):
    (data,) = glob.glob(os.path.join(out, "epoch-00000", "split-00002.lance", "data", "*.lance"))
    if how == "truncated":
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) // 2)
    else:
        os.remove(data)
    one_line_error(prep("verify", out), 1, "FAILED", "split-00002.lance")
    one_line_error(prep("prewarm", out, "--cache", str(tmp_path / "cache")), 2, "split-00002.lance",
                   f"rewrite it with the plain rerun `prep materialize-shuffle --table {tables_source(out)} --output {out} ")
    one_line_error(prep("read", out, "--global-batch-size", "4"), 2, "split-00002.lance")


def tables_source(out: str) -> str:
    return json.load(open(os.path.join(out, "manifest.json")))["source"]["uri"]


def test_prewarm_of_a_split_with_flipped_bytes_names_the_rerun_that_repairs_it_not_verify(out, tmp_path):
    """Issue 31 #1: prewarm said "run prep verify", which says the split is damaged: a loop."""
    (data,) = glob.glob(os.path.join(out, "epoch-00000", "split-00002.lance", "data", "*.lance"))
    tables.flip_bytes(data)
    line = one_line_error(prep("prewarm", out, "--cache", str(tmp_path / "cache")), 2, "split-00002.lance",
                          "the split is damaged at the source; rewrite it with the plain rerun `prep materialize-shuffle")
    assert "prep verify" not in line


def test_a_source_table_at_another_version_needs_extend(source, tmp_path):
    src = shutil.copytree(source, str(tmp_path / "t.lance"))
    out = str(tmp_path / "out")
    materialize_shuffle(table=src, output=out, epochs=1, splits=4)
    lance.write_dataset(lance.dataset(src).to_table().slice(0, 5), src, mode="append")
    one_line_error(prep("materialize-shuffle", "--table", src, "--output", out, "--epochs", "2", "--splits", "4"), 2,
                   src, "version 2", "version 1", "--extend")


def test_a_source_table_that_is_gone_is_one_line_naming_it(source, tmp_path):
    src = shutil.copytree(source, str(tmp_path / "t.lance"))
    out = str(tmp_path / "out")
    materialize_shuffle(table=src, output=out, epochs=1, splits=4)
    shutil.rmtree(src)
    one_line_error(prep("verify", out), 2, f"no Lance table at {src}")


def test_a_manifest_naming_a_version_the_table_never_had_is_a_mismatch(out):
    m = _manifest(out)
    _write_manifest(out, json.dumps({**m, "source": {**m["source"], "version": 99},
                                     "epochs": [{**e, "version": 99} for e in m["epochs"]]}))
    one_line_error(prep("verify", out), 1, "FAILED", "version 99")


def test_an_unparsable_rank_is_one_line(good):
    proc = prep("read", good, "--global-batch-size", "4", env={"RANK": "abc", "WORLD_SIZE": "2"})
    one_line_error(proc, 2, "prep read: error: ")


@pytest.mark.parametrize(
    "args,names",
    [
        (["materialize-shuffle", "--table", "T", "--output", "O", "--epochs", "0"], ["--epochs", "0 must be >= 1"]),
        (["materialize-shuffle", "--table", "T", "--output", "O", "--epochs", "1", "--splits", "x"], ["--splits", "'x'"]),
        (["materialize-shuffle", "--table", "T", "--output", "O", "--epochs", "1", "--clump", "0"], ["--clump"]),
        (["materialize-shuffle", "--table", "T", "--output", "O", "--epochs", "1", "--start-epoch", "-1"], ["--start-epoch"]),
        (["materialize-shuffle", "--table", "T", "--epochs", "1"], ["--output"]),
        (["materialize-shuffle", "--table", "T", "--output", "O", "--epochs", "1", "--strategy", "shuffle"], ["--strategy"]),
        (["prewarm", "OUT", "--cache", "C", "--world-size", "0"], ["--world-size"]),
        (["prewarm", "OUT", "--cache", "C", "--epochs", "0,x"], ["--epochs"]),
        (["read", "OUT", "--global-batch-size", "0"], ["--global-batch-size"]),
        (["read", "OUT", "--global-batch-size", "4", "--epoch", "-1"], ["--epoch"]),
        (["verify"], ["path"]),
        (["pretokenize", "--input", "x"], ["--config"]),
        (["frobnicate"], ["frobnicate"]),
    ],
)
def test_bad_flag_values_are_one_line_naming_the_flag(args, names):
    one_line_error(prep(*args), 2, *names)


def test_library_errors_name_the_flag_the_user_typed(good, tmp_path):
    line = one_line_error(prep("prewarm", good, "--cache", str(tmp_path / "c"), "--world-size", "3"), 2, "--world-size 3")
    assert "world_size=" not in line
    one_line_error(prep("read", good, "--global-batch-size", "6", "--world-size", "4"), 2, "--world-size 4")
    one_line_error(prep("materialize-shuffle", "--table", str(tmp_path / "nope"), "--output", str(tmp_path / "o"),
                        "--epochs", "1"), 2, "--table", "nope")


# ---------------------------------------------------------------- output safety


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.fixture
def user_folder(tmp_path) -> Path:
    """A folder of someone's files, some with names prep's own layout uses."""
    root = tmp_path / "mine"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "todo.txt").write_text("keep me")
    (root / "epoch-00000").mkdir()
    (root / "epoch-00000" / "split-00000.done.json").write_text('{"mine": true}')
    (root / "plan.json").write_text('{"not": "prep"}')
    (root / "data.bin").write_bytes(os.urandom(1000))
    return root


@pytest.mark.parametrize(
    "extra",
    [[], ["--overwrite"], ["--start-epoch", "1"], ["--epochs", "2", "--overwrite", "--seed", "3"], ["--filter", "id >= 0"]],
    ids=["plain", "overwrite", "start-epoch", "more-epochs-overwrite", "filter"],
)
def test_materialize_refuses_a_folder_of_user_files_and_leaves_it_as_it_was(source, user_folder, extra):
    before = _snapshot(user_folder)
    args = ["materialize-shuffle", "--table", source, "--output", str(user_folder), "--splits", "4", *extra]
    if "--epochs" not in extra:
        args += ["--epochs", "1"]
    one_line_error(prep(*args), 2, "--output", str(user_folder), "not empty")
    assert _snapshot(user_folder) == before


@pytest.mark.parametrize("extra", [[], ["--overwrite"], ["--world-size", "2", "--rank", "1", "--overwrite"]])
def test_prewarm_refuses_a_folder_of_user_files_as_cache_and_leaves_it_as_it_was(good, user_folder, extra):
    before = _snapshot(user_folder)
    one_line_error(prep("prewarm", good, "--cache", str(user_folder), *extra), 2, "--cache", str(user_folder), "not empty")
    assert _snapshot(user_folder) == before


def test_prewarm_refuses_the_materialized_output_itself_as_cache(good):
    before = _snapshot(Path(good))
    one_line_error(prep("prewarm", good, "--cache", good, "--overwrite"), 2, "--cache", "not empty")
    assert _snapshot(Path(good)) == before


def _png_libpng_warns_on(seed: int) -> bytes:
    """A small PNG with a tEXt chunk whose CRC is wrong: libpng decodes it and prints 'libpng warning: tEXt: CRC error'."""
    import io
    import struct
    import zlib

    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (16, 16, 3), np.uint8)).save(buf, "PNG")
    png, ihdr_end = buf.getvalue(), 8 + 25
    data = b"Comment\x00hello"
    bad = struct.pack(">I", len(data)) + b"tEXt" + data + struct.pack(">I", (zlib.crc32(b"tEXt" + data) + 1) & 0xFFFFFFFF)
    return png[:ihdr_end] + bad + png[ihdr_end:]


@pytest.mark.slow
def test_quiet_shows_no_decoder_chatter_and_verbose_does(tmp_path):
    """Issue 31 #10: with -q, libpng's warnings from the sandboxes still reached the terminal (~80 lines on odd images)."""
    (tmp_path / "in" / "odd").mkdir(parents=True)
    for i in range(4):
        (tmp_path / "in" / "odd" / f"{i}.png").write_bytes(_png_libpng_warns_on(i))
    runs = {}
    for flag in ("-q", "-v"):
        runs[flag] = prep("decode-images", "--input", str(tmp_path / "in"), "--output", str(tmp_path / f"o{flag}.lance"),
                          "--executor", "local", flag, cold=True)
        assert runs[flag].returncode == 0, runs[flag].stderr[-3000:]
        assert "images: read 4 = written 4 + rejected 0" in runs[flag].stdout
    assert runs["-q"].stderr == ""
    assert runs["-v"].stderr.count("libpng warning: tEXt: CRC error") == 4
