"""No input can hang or kill a prepare job: crashed and stuck items become rejects.

A worker process that dies (a native decoder's SIGSEGV, an OOM kill, an exit) or an
item that never finishes must cost only that item: it is rejected with the reason and
every other row is written exactly as in a clean run. A death that the item alone does
not cause again costs nothing: the chunk runs again. Any exception raised for one item,
whatever its type, is a reject too.
"""

from __future__ import annotations

import builtins
import io
import itertools
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lance
import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from PIL import Image

from prep.io import lance_tables
from prep.runtime.config import load_config
from prep.errors import PrepError
from prep.prepare.images.config import ImagesConfig
from prep.prepare.chunk_runner import run_chunks
from prep.prepare.faults import ENV as RAISE_ENV
from prep.prepare.images.job import run_decode_images
from prep.prepare.isolation import FAULTS_ENV, Limits, hooks_from_env, run_isolated, stop_sandboxes
from prep.prepare.text.pretokenize import PretokenizeConfig, run_pretokenize
from dying_worker import DiesOnce, env_of, parent_pid, segfault, sleep_then
from test_images import encode, noise

REPO = Path(__file__).resolve().parent.parent

# A job run in its own process (its own local Ray), so that a job that never ends can be
# killed, whole, when the test gives up on it. Chunk items: "segv" crashes the process.
_CRASHING_JOB = textwrap.dedent(
    """
    import json, os, signal, sys
    from collections import Counter
    import pyarrow as pa
    from prep.prepare.chunk_runner import ChunkOutput, run_chunks
    from prep.prepare.rejects import Reject
    from prep.runtime.ray_cluster import init_ray

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
            return ChunkOutput(pa.table({"item": pa.array(rows, pa.string())}), rejects, Counter(counts))

    out = sys.argv[1]
    init_ray(num_cpus=2)
    results = run_chunks([["a", "b"], ["c", "segv", "d"], ["e"]], Worker(), output_uri=out + "/t.lance", rejects_uri=out + "/r.lance")
    print(json.dumps([r.counts.to_json() for r in results]))
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


@pytest.mark.slow
def test_a_worker_that_segfaults_on_one_item_does_not_hang_the_job(tmp_path):
    done = _run_alone(_CRASHING_JOB, tmp_path, seconds=120)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert [c["rows_written"] for c in counts] == [2, 2, 1]
    assert [c["rows_rejected"] for c in counts] == [0, 1, 0]


@pytest.mark.parametrize("at", ["c", None], ids=["while-an-item-is-in-hand", "outside-any-item"])
def test_a_death_the_item_alone_does_not_cause_again_rejects_nothing_and_is_counted(at, tmp_path):
    """The mark names the item in hand, not the cause: the item is poisoned only if it kills a fresh process alone."""
    results = run_chunks([["a", "b", "c", "d"]], DiesOnce(at, str(tmp_path / "died")), executor="local", local_workers=1,
                         output_uri=str(tmp_path / "t.lance"), rejects_uri=str(tmp_path / "r.lance"))
    assert (tmp_path / "died").exists()
    (result,) = results
    assert (result.counts.rows_written, result.counts.rows_rejected, result.counts.chunk_restarts) == (4, 0, 1)
    assert result.reject_fragments == []
    ds = lance_tables.commit_table(str(tmp_path / "t.lance"), pa.schema([("item", pa.string())]), result.fragments)
    assert ds.to_table().column("item").to_pylist() == ["a", "b", "c", "d"]


def test_the_sandbox_imports_the_code_its_parent_runs_not_a_prep_folder_in_the_cwd(tmp_path, monkeypatch):
    """``python -m`` puts the current folder first on sys.path: run from another checkout, the sandbox ran its code."""
    decoy = tmp_path / "elsewhere"
    (decoy / "prep" / "prepare").mkdir(parents=True)
    (decoy / "prep" / "__init__.py").write_text("")
    (decoy / "prep" / "prepare" / "__init__.py").write_text("")
    (decoy / "prep" / "prepare" / "isolation.py").write_text("raise SystemExit('the decoy ran')\n")
    monkeypatch.chdir(decoy)
    stop_sandboxes()  # the next chunk starts a fresh one, from here
    (result,) = run_chunks([["a", "b"]], DiesOnce("not an item", str(tmp_path / "died")), executor="local", local_workers=1,
                           output_uri=str(tmp_path / "t.lance"), rejects_uri=str(tmp_path / "r.lance"))
    assert (result.counts.rows_written, result.counts.chunk_restarts) == (2, 0)


def test_a_call_interrupted_once_its_request_is_sent_leaves_no_answer_for_the_next_call(monkeypatch):
    """Ray cancels a task (a job that failed on another chunk) with a KeyboardInterrupt that lands when a blocking
    write returns: after the sandbox got the whole request. Its answer was left in the pipe, and the next call on
    that thread read it as its own: a later job committed fragments written to an earlier job's output ("data/....lance
    is missing just after it was written"), seen twice in whole-suite runs."""
    from multiprocessing.connection import Connection

    send = Connection.send_bytes

    def sent_then_interrupted(self, buf, *args):
        monkeypatch.setattr(Connection, "send_bytes", send)  # once
        send(self, buf, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(Connection, "send_bytes", sent_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_isolated(sleep_then, {"seconds": 0.2, "value": "the cancelled call's"}, Limits())
    assert run_isolated(sleep_then, {"seconds": 0, "value": "its own"}, Limits()) == ("its own", 0)


def test_a_fork_interrupted_once_its_request_is_sent_gives_its_child_to_nobody(monkeypatch):
    """The zygote's answer to an interrupted fork (its child's pid) was the next fork's answer: that call got the
    pid of a child that does not hold its pipes, and the child it asked for ran unwatched."""
    import prep.runtime.zygote as zygote_module
    from prep.runtime.zygote import Zygote

    send = zygote_module.socket.send_fds

    def sent_then_interrupted(*args):
        monkeypatch.setattr(zygote_module.socket, "send_fds", send)  # once
        send(*args)
        raise KeyboardInterrupt

    zygote = Zygote(dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    (first, first_w), (second, second_w) = os.pipe(), os.pipe()
    try:
        monkeypatch.setattr(zygote_module.socket, "send_fds", sent_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            zygote.fork("dying_worker:report_pid_then_sleep", [first_w])
        pid = zygote.fork("dying_worker:report_pid_then_sleep", [second_w])
        os.close(first_w)  # the children hold their copies: a read sees EOF once the child holding it is gone
        os.close(second_w)
        assert int(os.read(second, 32)) == pid  # the child this call asked for
        zygote.kill(pid)
        assert zygote.wait(pid) == -signal.SIGKILL
        deadline = time.monotonic() + 10  # a wait bound, not a speed check: the orphan sleeps 60 s unless killed
        while zygote.busy() and time.monotonic() < deadline:  # the orphan's exit may still be on its way
            zygote.poll(-1)  # takes the messages that arrived
            time.sleep(0.05)
        assert not zygote.busy()  # the orphan was killed and reaped: a retired zygote is not kept for it
        orphan = b"".join(iter(lambda: os.read(first, 32), b""))  # its pid, if it lived to write it; EOF: it is gone
        assert not orphan or int(orphan) != pid
    finally:
        zygote.close()
        os.close(first)
        os.close(second)


def test_a_crash_restarts_the_sandbox_from_its_zygote_not_from_a_fresh_interpreter():
    """Issue 31 #6: each crash started a ``python -m`` sandbox that imported torch again (~6.5 CPU-s a crash). The
    crashed child and its probe are forked from the zygote that started the first one, which imports once."""
    zygote, restarts = run_isolated(parent_pid, {}, Limits())
    assert restarts == 0 and zygote != os.getpid()
    with pytest.raises(PrepError, match=r"signal 11 \(SIGSEGV\)"):  # crashed, confirmed by a probe: one bad item too many
        run_isolated(segfault, {}, Limits(max_bad_items_per_chunk=0))
    assert run_isolated(parent_pid, {}, Limits()) == (zygote, 0)


def test_worker_threads_fork_from_one_zygote_and_a_thread_that_ends_takes_its_sandbox_with_it():
    """A local job's worker threads share the process's zygote (a job on N threads imported torch N times, one
    zygote each); a thread that ends (the local pool replaced by one of another size) stops its sandbox."""
    zygote, _ = run_isolated(parent_pid, {}, Limits())
    before = {p.pid for p in psutil.Process(zygote).children()}
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(run_isolated(parent_pid, {}, Limits()))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [(zygote, 0), (zygote, 0)]
    deadline = time.monotonic() + 30
    while {p.pid for p in psutil.Process(zygote).children()} != before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {p.pid for p in psutil.Process(zygote).children()} == before


def test_a_forked_child_leaves_the_parents_sandboxes_alone():
    """A DataLoader worker forked from a trainer that ran a local prepare job hung for ever: after the fork the
    child dropped the sandbox of a worker thread it does not have, and stopping it waited on the parent's zygote.
    A sandbox belongs to the process that started it; the child's exit touches neither it nor the zygote."""
    with ThreadPoolExecutor(1) as pool:  # a local worker thread that outlives its job, as the executor's do
        first = pool.submit(run_isolated, parent_pid, {}, Limits()).result()
        child = multiprocessing.get_context("fork").Process(target=os.getpid)
        child.start()
        child.join(30)
        alive = child.is_alive()
        if alive:
            child.kill()
        assert not alive and child.exitcode == 0
        assert pool.submit(run_isolated, parent_pid, {}, Limits()).result() == first  # the same zygote, no restart


def test_a_test_hook_set_between_two_jobs_reaches_the_sandbox_without_a_new_zygote(monkeypatch):
    """The hooks travel with each request: a zygote restarted for them cost a torch import each time a test set one."""
    zygote, _ = run_isolated(parent_pid, {}, Limits())
    monkeypatch.setenv(FAULTS_ENV, "hang:no item has this name")
    assert run_isolated(parent_pid, {}, Limits(), hooks_from_env()) == (zygote, 0)
    assert run_isolated(env_of, {"name": FAULTS_ENV}, Limits(), hooks_from_env())[0] == "hang:no item has this name"


def test_a_zygote_whose_imports_ran_lance_refuses_to_fork(tmp_path, monkeypatch):
    """Forking a process whose Lance runtime runs can crash the child: the zygote imports a job's modules but
    checks, before each fork, that none of them ran Lance."""
    (tmp_path / "runs_lance.py").write_text(textwrap.dedent(f"""
        import lance, pyarrow as pa
        lance.write_dataset(pa.table({{"x": [1]}}), {str(tmp_path / "t.lance")!r})
        lance.dataset({str(tmp_path / "t.lance")!r}).to_table()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))  # the next sandbox gets a zygote of its own, with this path
    with pytest.raises(PrepError, match="Lance threads run in the zygote"):
        run_isolated(parent_pid, {}, Limits(), preload=("runs_lance",))
    stop_sandboxes()


# ---------------------------------------------------------------- the real jobs, with injected faults

HYMENOPTERA = REPO.parent / "shared" / "data" / "hymenoptera" / "train"
needs_photos = pytest.mark.skipif(not HYMENOPTERA.is_dir(), reason=f"real photos not found at {HYMENOPTERA}")
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities of TorchVision:DeprecationWarning")


@pytest.fixture
def photo_tree(tmp_path) -> Path:
    """12 real ants and 12 real bees in an ImageFolder tree."""
    root = tmp_path / "tree"
    for cls in ("ants", "bees"):
        (root / cls).mkdir(parents=True)
        for p in sorted((HYMENOPTERA / cls).glob("*.jpg"))[:12]:
            (root / cls / p.name).write_bytes(p.read_bytes())
    return root


def images_config(root: Path, output: Path, **kw) -> ImagesConfig:
    return load_config(ImagesConfig, None, **{"input": str(root), "output": str(output), "size": 64, "images_per_chunk": 8, **kw})


def without(table, column: str, values: list):
    return table.filter(pc.invert(pc.is_in(table.column(column), value_set=pa.array(values))))


@needs_photos
@pytest.mark.slow
def test_an_image_that_segfaults_and_one_that_hangs_are_rejected_and_the_rest_is_a_clean_run(ray_local, photo_tree, tmp_path, monkeypatch):
    ants = sorted(str(p) for p in (photo_tree / "ants").iterdir())
    crash, hang = ants[2], ants[5]  # the same chunk: the sandbox restarts twice for it
    clean = run_decode_images(images_config(photo_tree, tmp_path / "clean.lance"))
    monkeypatch.setenv(FAULTS_ENV, f"segv:{crash};hang:{hang}")
    s = run_decode_images(images_config(photo_tree, tmp_path / "faulty.lance", item_timeout_s=5))
    rejects = {r["source"]: r for r in lance.dataset(s["rejects"]).to_table().to_pylist()}
    assert set(rejects) == {crash, hang}, {k: r["reason"] for k, r in rejects.items()}
    assert (clean["rows_read"], clean["rows_written"], clean["rows_rejected"]) == (24, 24, 0)
    assert (s["rows_read"], s["rows_written"], s["rows_rejected"]) == (24, 22, 2)
    assert "crashed with signal 11 (SIGSEGV)" in rejects[crash]["reason"]
    assert "timed out after 5 s" in rejects[hang]["reason"]
    want = without(lance.dataset(clean["table"]).to_table(), "source", [crash, hang])
    assert lance.dataset(s["table"]).to_table().equals(want)


@needs_photos
@pytest.mark.slow
def test_a_job_with_more_bad_items_than_allowed_fails_with_one_line(ray_local, photo_tree, tmp_path, monkeypatch):
    monkeypatch.setenv(FAULTS_ENV, "exit:ants/")
    with pytest.raises(PrepError) as err:
        run_decode_images(images_config(photo_tree, tmp_path / "out.lance", max_bad_items_per_chunk=1))
    assert "max_bad_items_per_chunk=1" in str(err.value) and "exited with status 3" in str(err.value)
    assert "\n" not in str(err.value)
    assert not lance_tables.table_exists(str(tmp_path / "out.lance"))  # a claimed folder, no committed table


@pytest.mark.slow
def test_a_text_row_that_kills_the_worker_and_one_that_hangs_are_rejected(ray_local, tokenizer_dir, shared_data, tmp_path, monkeypatch):
    rows = (shared_data / "gsm8k" / "train.jsonl").read_text().splitlines()[:60]
    src = tmp_path / "gsm.jsonl"
    src.write_text("\n".join(rows) + "\n")
    exit_needle, hang_needle = json.loads(rows[7])["question"][:40], json.loads(rows[33])["question"][:40]
    assert sum(exit_needle in r for r in rows) == sum(hang_needle in r for r in rows) == 1

    def config(out: str, **kw) -> PretokenizeConfig:
        return PretokenizeConfig.model_validate(dict(input=str(src), output=str(tmp_path / out), tokenizer=tokenizer_dir,
                                                     format="sft", sft={"layout": "qa"}, chunk_bytes=8192, **kw))

    clean = run_pretokenize(config("clean.lance"))
    monkeypatch.setenv(FAULTS_ENV, f"exit:{exit_needle};hang:{hang_needle}")
    s = run_pretokenize(config("faulty.lance", item_timeout_s=5))
    assert clean["chunks"] > 1 and (clean["rows_read"], clean["rows_written"]) == (60, 60)
    assert (s["rows_read"], s["rows_written"], s["rows_rejected"]) == (60, 58, 2)
    rejects = lance.dataset(s["rejects"]).to_table().to_pylist()
    assert {r["source"] for r in rejects} == {str(src)}
    by_raw = {exit_needle if exit_needle in r["raw"] else hang_needle: r for r in rejects}
    assert "exited with status 3" in by_raw[exit_needle]["reason"]
    assert "timed out after 5 s" in by_raw[hang_needle]["reason"]
    assert by_raw[exit_needle]["position"] != by_raw[hang_needle]["position"]
    got = lance.dataset(s["table"]).to_table()
    want = lance.dataset(clean["table"]).to_table()
    assert got.equals(want.filter(pc.is_in(want.column("id"), value_set=got.column("id"))))


def test_a_kept_sandbox_sees_the_environment_of_the_job_it_runs(monkeypatch):
    """A sandbox outlives its job (the next job in the process reuses it): credentials set between two
    jobs (a notebook setting AZURE_STORAGE_CONNECTION_STRING after a local run) reach the second job's
    child; a child that kept the environment it started with failed on az:// (found under pytest-xdist)."""
    monkeypatch.delenv("PREP_TEST_SANDBOX_ENV", raising=False)
    assert run_isolated(env_of, {"name": "PREP_TEST_SANDBOX_ENV"}, Limits()) == (None, 0)
    monkeypatch.setenv("PREP_TEST_SANDBOX_ENV", "set after the first job")
    assert run_isolated(env_of, {"name": "PREP_TEST_SANDBOX_ENV"}, Limits()) == ("set after the first job", 0)


@pytest.mark.slow  # Ray workers and sandboxes started afresh
@pytest.mark.parametrize("retries", [1, 0])
def test_a_ray_worker_that_dies_is_retried_at_most_max_task_retries_times(retries, ray_local, tmp_path):
    """A Ray worker killed under its task (an OOM kill of the process feeding the sandbox) is Ray's to
    retry, ``max_task_retries`` times: the retry gives the clean run's rows, and with no retry left the
    job fails with one line saying so."""
    import dying_worker
    from ray import cloudpickle

    worker = DiesOnce("b", str(tmp_path / "died"), feeder=True)

    def run() -> list:
        return run_chunks([["a", "b"], ["c"]], worker, output_uri=str(tmp_path / "t.lance"),
                          rejects_uri=str(tmp_path / "r.lance"), limits=Limits(max_task_retries=retries), executor="ray")

    cloudpickle.register_pickle_by_value(dying_worker)  # Ray's workers do not have tests/ on their path
    try:
        if retries:
            assert [r.counts.rows_written for r in run()] == [2, 1]
        else:
            with pytest.raises(PrepError, match=r"a Ray task failed after 0 retries \(max_task_retries\)"):
                run()
    finally:
        cloudpickle.unregister_pickle_by_value(dying_worker)
    assert (tmp_path / "died").exists()


@pytest.mark.slow  # a sandbox start: a torch import
def test_a_sandbox_whose_wait_was_interrupted_never_answers_the_next_chunk():
    """``ray.cancel`` interrupts a Ray task's thread while its sandbox works on a chunk (a job stopping after
    another chunk failed). The next chunk on that thread must get its own answer, not the interrupted
    one's: a rerun once committed a fragment that the cancelled chunk had written, and its claim deleted."""

    class Interrupted(Exception):
        pass

    def interrupt(*_: object) -> None:
        raise Interrupted

    assert run_isolated(sleep_then, {"seconds": 0.0, "value": "warm"}, Limits()) == ("warm", 0)  # started: no start-up to race
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            run_isolated(sleep_then, {"seconds": 30.0, "value": "interrupted"}, Limits())  # answered long after
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert run_isolated(sleep_then, {"seconds": 0.0, "value": "next"}, Limits()) == ("next", 0)


# ---------------------------------------------------------------- the real decoder on broken files


def _fuzzed_files(root: Path, seed: int = 8) -> list[Path]:
    """Truncated and bit-flipped copies of real photos, and of PNG/GIF/TIFF re-encodings of them."""
    rng = np.random.default_rng(seed)
    out = root / "fuzz"
    out.mkdir(parents=True)
    originals = {}
    for p in sorted((HYMENOPTERA / "bees").glob("*.jpg"))[:1]:  # each (format, damage) pair once: a crash costs a sandbox
        data = p.read_bytes()
        originals[f"{p.stem}.jpg"] = data
        small = Image.open(io.BytesIO(data)).convert("RGB").resize((48, 40))
        for fmt, ext, kw in (("PNG", "png", {}), ("GIF", "gif", {}), ("TIFF", "tif", {"compression": "tiff_lzw"})):
            buf = io.BytesIO()
            (small.convert("P") if fmt == "GIF" else small).save(buf, fmt, **kw)
            originals[f"{p.stem}.{ext}"] = buf.getvalue()
    files = []
    for name, data in originals.items():
        variants = {f"cut{k}": data[: max(1, int(len(data) * k / 10))] for k in (1, 5, 9)}
        for n in (1, 8, 64):
            flipped = bytearray(data)
            for i in rng.integers(0, len(data), n):
                flipped[i] ^= 1 << int(rng.integers(0, 8))
            variants[f"flip{n}"] = bytes(flipped)
        for tag, blob in variants.items():
            path = out / f"{tag}-{name}"
            path.write_bytes(blob)
            files.append(path)
    return sorted(files)


@needs_photos
@pytest.mark.slow
def test_the_real_decoder_on_truncated_and_bit_flipped_files_writes_or_rejects_each_one(ray_local, tmp_path):
    files = _fuzzed_files(tmp_path / "tree")
    s = run_decode_images(images_config(tmp_path / "tree", tmp_path / "out.lance", item_timeout_s=30, images_per_chunk=24,
                                        max_reject_fraction=1.0))  # most damaged files are rejected, on purpose
    assert s["rows_read"] == len(files) == s["rows_written"] + s["rows_rejected"]
    written = lance.dataset(s["table"]).to_table(columns=["source"]).column("source").to_pylist()
    rejected = lance.dataset(s["rejects"]).to_table(columns=["source"]).column("source").to_pylist()
    assert sorted(written + rejected) == [str(p) for p in files]
    assert s["rows_written"] > 0 and s["rows_rejected"] > 0


# ---------------------------------------------------------------- any exception, at any image stage

BUILTIN_ERRORS = sorted({c for c in vars(builtins).values() if isinstance(c, type) and issubclass(c, Exception)},
                        key=lambda c: c.__name__)
STAGES = ("decode", "resize", "encode")


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["local", "ray"])
def test_any_builtin_exception_at_any_image_stage_rejects_that_image_alone(executor, request, tmp_path, monkeypatch):
    """Each built-in exception type, raised at each stage for one named image: the job completes, that image
    is rejected with the stage, the type and the message, and every other image is written."""
    if executor == "ray":
        request.getfixturevalue("ray_local")
    root = tmp_path / "tree"
    (root / "x").mkdir(parents=True)
    faulty = {f"{stage}-{exc.__name__}.png": (stage, exc.__name__) for stage, exc in itertools.product(STAGES, BUILTIN_ERRORS)}
    clean = [f"clean-{i}.png" for i in range(5)]
    for i, name in enumerate(sorted([*faulty, *clean])):
        (root / "x" / name).write_bytes(encode(noise(12, 10, i), "PNG"))
    monkeypatch.setenv(RAISE_ENV, ";".join(f"{stage}:{exc}:/{name}" for name, (stage, exc) in faulty.items()))
    cfg = images_config(root, tmp_path / "out.lance", size=8, encode="jpeg", images_per_chunk=64, executor=executor,
                        max_reject_fraction=1.0)  # all but the 5 clean files are rejected on purpose
    s = run_decode_images(cfg)
    rejected = {Path(r["source"]).name: r["reason"] for r in lance.dataset(s["rejects"]).to_table().to_pylist()}
    assert set(rejected) == set(faulty), set(rejected) ^ set(faulty)
    for name, (stage, exc) in faulty.items():
        reason = rejected[name]
        assert reason.startswith(f"{stage} failed: {exc}: ") and f"injected at {stage} for " in reason, reason
    written = lance.dataset(s["table"]).to_table(columns=["source", "encoded"])
    assert sorted(Path(p).name for p in written.column("source").to_pylist()) == clean
    assert all(blob[:2] == b"\xff\xd8" for blob in written.column("encoded").to_pylist())  # each row its own JPEG
    assert (s["rows_read"], s["rows_written"], s["rows_rejected"]) == (len(faulty) + len(clean), len(clean), len(faulty))
