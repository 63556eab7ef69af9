"""One writer per output (issue 21, finding 3): the lease, raced by real processes, locally and on S3.

moto_server checks ``If-None-Match`` and then stores, not atomically (AWS S3 does both at
once): two creates racing there can both succeed. The later record stays, and the other run
finds out at ``lease.check()`` (a conditional refresh), before it commits, as every command
does; the racers here do the same, so "won" means "would have committed".
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import signal
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from prep.contracts.ownership import LEASE, Holder
from prep.io.lease import LeaseHeld, hold, take_lease
from prep.errors import PrepError
from prep.io import storage

TRIALS = 50


def _racer(commands, results, barrier) -> None:
    """A process that, per command, takes the lease at the same moment as its twin and holds it until both tried."""
    while (uri := commands.get()) is not None:
        barrier.wait()
        lease, outcome = None, ("won", f"pid {os.getpid()}")
        try:
            lease = take_lease(uri, "race")
            barrier.wait()  # both tried while the winner holds it
            lease.check()  # what a command does before it commits
        except PrepError as exc:
            outcome = ("held", str(exc))
        except Exception as exc:  # reported, so the test names it
            outcome = ("error", f"{type(exc).__name__}: {exc}")
        if lease is None:
            barrier.wait()
        results.put(outcome)
        barrier.wait()
        if lease is not None:
            lease.release()
        barrier.wait()


def _race(uris: list[str]) -> list[list[tuple[str, str]]]:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    queues = [ctx.Queue(), ctx.Queue()]
    procs = [ctx.Process(target=_racer, args=(q, results, barrier), daemon=True) for q in queues]
    for p in procs:
        p.start()
    outcomes = []
    try:
        for uri in uris:
            for q in queues:
                q.put(uri)
            outcomes.append(sorted([results.get(timeout=60), results.get(timeout=60)]))
    finally:
        for q in queues:
            q.put(None)
        for p in procs:
            p.join(timeout=30)
    return outcomes


def _check(outcomes: list[list[tuple[str, str]]]) -> None:
    for trial, (first, second) in enumerate(outcomes):
        assert (first[0], second[0]) == ("held", "won"), (trial, first, second)
        assert "is being written by race (host " in first[1] and f"{second[1]}, started " in first[1], (trial, first, second)


def test_two_processes_racing_for_a_local_output_one_wins_every_time(tmp_path):
    outcomes = _race([str(tmp_path / f"out-{i}") for i in range(TRIALS)])
    _check(outcomes)
    assert not any((tmp_path / f"out-{i}" / LEASE).exists() for i in range(TRIALS))  # released


@pytest.mark.s3
@pytest.mark.parametrize("trials", [10, pytest.param(TRIALS, marks=pytest.mark.slow)])
def test_two_processes_racing_for_an_s3_output_one_wins_every_time(trials, s3_env, s3_bucket):
    outcomes = _race([f"s3://{s3_bucket}/out-{i}" for i in range(trials)])
    _check(outcomes)
    assert not storage.exists(f"s3://{s3_bucket}/out-0/{LEASE}")


def test_the_second_run_fails_at_once_naming_the_holder_and_the_lease_frees_at_release(tmp_path):
    out = str(tmp_path / "o")
    with hold([out], "pretokenize"):
        with pytest.raises(LeaseHeld, match=rf"is being written by pretokenize \(host {socket.gethostname()}, pid {os.getpid()}, started "):
            take_lease(out, "decode-images")
    take_lease(out, "decode-images").release()


def _hold_forever(uri: str, ready) -> None:
    take_lease(uri, "victim")
    ready.set()
    time.sleep(600)


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_killed_holders_lease_is_taken_over_and_the_log_says_so(where, tmp_path, request):
    uri = str(tmp_path / "o") if where == "local" else f"s3://{request.getfixturevalue('s3_bucket')}/o"
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    victim = ctx.Process(target=_hold_forever, args=(uri, ready), daemon=True)
    victim.start()
    assert ready.wait(60)
    with pytest.raises(LeaseHeld, match=f"pid {victim.pid}"):
        take_lease(uri, "next")
    os.kill(victim.pid, signal.SIGKILL)
    victim.join()
    with _warnings() as got:
        take_lease(uri, "next").release()
    assert any(f"taking over the lease of victim (host {socket.gethostname()}, pid {victim.pid}" in w for w in got), got


@contextmanager
def _warnings() -> Iterator[list[str]]:
    """The warnings prep.io.lease logs in the block (pytest's logging plugin is off here)."""
    got: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: got.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("prep.io.lease")
    logger.addHandler(handler)
    try:
        yield got
    finally:
        logger.removeHandler(handler)


def _forge(uri: str, heartbeat: float, s3_bucket: str | None) -> None:
    rec = Holder(job="elsewhere-job", host="another-host", pid=1, started="2026-01-01T00:00:00+00:00",
                 heartbeat=heartbeat, token="t").encode()
    if s3_bucket:
        storage.filesystem(uri)[0].pipe_file(storage.fs_path(f"{uri}/{LEASE}"), rec)
    else:
        os.makedirs(uri, exist_ok=True)
        with open(os.path.join(uri, LEASE), "wb") as f:
            f.write(rec)


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_lease_from_another_host_counts_while_its_heartbeat_is_fresh(where, tmp_path, request):
    bucket = request.getfixturevalue("s3_bucket") if where == "s3" else None
    uri = f"s3://{bucket}/o" if bucket else str(tmp_path / "o")
    _forge(uri, time.time(), bucket)  # a holder this host's flock cannot see (e.g. another node on a shared filesystem)
    with pytest.raises(LeaseHeld, match=r"elsewhere-job \(host another-host, pid 1"):
        take_lease(uri, "me")
    _forge(uri, time.time() - 3600, bucket)
    with _warnings() as got:
        lease = take_lease(uri, "me")
    assert any("taking over the lease of elsewhere-job (host another-host" in w for w in got), got
    lease.release()


@pytest.mark.s3
def test_a_run_whose_s3_lease_was_taken_over_may_not_commit(s3_bucket):
    uri = f"s3://{s3_bucket}/o"
    lease = take_lease(uri, "slow", heartbeat_s=0.05)
    _forge(uri, time.time(), s3_bucket)  # another run took it over (this one looked dead)
    deadline = time.time() + 10
    while lease.lost is None and time.time() < deadline:
        time.sleep(0.05)
    with pytest.raises(Exception, match="lost its lease"):
        lease.check()
    lease.release()
    assert json.loads(storage.filesystem(uri)[0].cat_file(f"{s3_bucket}/o/{LEASE}"))["job"] == "elsewhere-job"  # not removed


def _spellings(tmp_path: Path) -> list[tuple[str, str]]:
    """Pairs of spellings of one local output: ``..``, ``.``, ``//``, a trailing slash, ``file://``, a symlinked folder."""
    (tmp_path / "real").mkdir()
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    x = str(tmp_path / "real" / "x.lance")
    return [(x, str(tmp_path / "sub" / ".." / "real" / "x.lance")), (x, str(tmp_path / "real" / "." / "x.lance")),
            (x, str(tmp_path / "real") + "//x.lance"), (x, x + "/"), (x, "file://" + x), (x, str(tmp_path / "link" / "x.lance"))]


def test_two_spellings_of_one_local_output_are_one_lease(tmp_path):
    """Issue 31, finding 4: the lease was keyed by the path as spelled."""
    for first, second in _spellings(tmp_path):
        held = take_lease(first, "first")
        try:
            with pytest.raises(LeaseHeld, match="is being written by first"):
                take_lease(second, "second")
        finally:
            held.release()


@pytest.mark.s3
def test_two_spellings_of_one_s3_output_are_one_lease(s3_bucket):
    """Issue 31, finding 4: two writers on s3://b/x.lance and s3://b/sub/../x.lance both committed."""
    for second in (f"s3://{s3_bucket}/sub/../x.lance", f"s3://{s3_bucket}//x.lance/", f"s3://{s3_bucket}/./x.lance"):
        held = take_lease(f"s3://{s3_bucket}/x.lance", "first")
        try:
            with pytest.raises(LeaseHeld, match="is being written by first"):
                take_lease(second, "second")
        finally:
            held.release()


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_heartbeat_far_in_the_future_is_not_trusted_and_the_log_says_why(where, tmp_path, request):
    """Issue 31, finding 10: a forged lease with a heartbeat 28 h ahead blocked every run for 28 h without a word."""
    bucket = request.getfixturevalue("s3_bucket") if where == "s3" else None
    uri = f"s3://{bucket}/o" if bucket else str(tmp_path / "o")
    _forge(uri, time.time() + 60, bucket)  # a clock a minute ahead: trusted, the holder counts
    with pytest.raises(LeaseHeld, match="elsewhere-job"):
        take_lease(uri, "me")
    _forge(uri, time.time() + 28 * 3600, bucket)
    with _warnings() as got:
        lease = take_lease(uri, "me")
    assert any("taking over the lease of elsewhere-job" in w and "28.0 h ahead of this host's clock" in w and "forged" in w
               for w in got), got
    lease.release()


@pytest.mark.s3
def test_a_prepare_commit_by_a_run_that_lost_its_lease_commits_nothing(s3_bucket):
    """Issue 31, finding 4: the lease is checked at each commit point, not only before the commit step."""
    import pyarrow as pa

    from prep.io import lance_tables
    from prep.prepare.chunk_runner import ChunkResult
    from prep.prepare.driver import commit_and_reconcile
    from prep.prepare.rejects import Reject, rejects_table

    out, rej = f"s3://{s3_bucket}/t.lance", f"s3://{s3_bucket}/t.rejects.lance"
    opts = storage.lance_storage_options(out)
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    frags = lance_tables.write_fragments(table, out, storage_options=opts)
    rej_frags = lance_tables.write_fragments(rejects_table([Reject("f", "line 4", "bad")]), rej, storage_options=opts)
    counts = {"rows_read": 4, "rows_accepted": 3, "rows_rejected": 1, "rows_written": 3, "files_rejected": 0}
    lease = take_lease(out, "slow", heartbeat_s=3600)
    _forge(out, time.time(), s3_bucket)  # another run took it over (this one looked dead); no heartbeat noticed it yet
    try:
        with pytest.raises(PrepError, match="lost its lease"):
            commit_and_reconcile([ChunkResult(0, frags, rej_frags, counts, 0.0)], counts, schema=table.schema, metadata={},
                                 output=out, rejects=rej, s3=None, max_reject_fraction=1.0, leases=[lease])
    finally:
        lease.release()
    assert not lance_tables.table_exists(out, opts) and not lance_tables.table_exists(rej, opts)
