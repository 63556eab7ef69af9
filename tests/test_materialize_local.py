"""The local executor (threads in the driver, no Ray) writes what the Ray executor writes."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import lance
import pytest

import tables
from prep.cli import main as cli_main
from prep.errors import PrepError
from prep.materialize import materialize_shuffle
from prep.materialize.verify import verify

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("src") / "syn.lance")
    return tables.synthetic_table(uri, num_rows=6000, max_len=60, fragment_rows=2000)


def _no_cluster_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


@pytest.mark.parametrize("strategy,clump,filter", [
    ("random", 1, None), ("random", 64, None), ("hash", 1, None), ("sequential", 4, None), ("round-robin", 3, "length > 20"),
])
def test_local_and_ray_executors_write_identical_outputs(synthetic, tmp_path, ray_local, strategy, clump, filter):
    kw = dict(table=synthetic, epochs=2, splits=6, strategy=strategy, clump=clump, filter=filter, read_rows=500)
    on_ray = materialize_shuffle(output=str(tmp_path / "ray"), executor="ray", **kw)
    here = materialize_shuffle(output=str(tmp_path / "local"), executor="local", **kw)
    tables.same_output(str(tmp_path / "ray"), str(tmp_path / "local"), on_ray, here)
    assert verify(str(tmp_path / "local")).ok


def _two_splits(marker: str, executor) -> Iterator[str]:
    """A holder that writes its second split only once the driver has counted its first."""
    yield "first"
    deadline = time.monotonic() + 60  # a deadlock guard, not a timing: without streaming the driver never counts
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            raise RuntimeError("the driver had not counted the first split")
        time.sleep(0.05)
    yield "second"


@pytest.mark.parametrize("where", ["driver", "worker"])
def test_a_ray_holder_streams_each_split_to_the_driver_as_it_is_written(tmp_path, ray_local, monkeypatch, where):
    """The progress bar advances split by split on Ray too, not once per holder."""
    from ray import cloudpickle

    from prep.materialize.executors import on_ray
    from prep.materialize.executors.on_ray import RayExecutor
    from prep.materialize.resolved import Call

    if where == "worker":
        monkeypatch.setattr(on_ray, "_driver_node", lambda resources: None)  # as on a head without CPUs

    marker, counted = tmp_path / "counted", []

    def on_done() -> None:
        counted.append(1)
        marker.touch()

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # Ray's workers do not have tests/ on their path
    try:
        out = RayExecutor(None, None).run_holders([Call("a holder", _two_splits, (str(marker),))], on_done)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert out == ["first", "second"] and counted == [1, 1]


def _where_and_free_cpus(executor) -> Iterator[tuple[int, float]]:
    """A holder that says which process runs it and how many CPUs Ray has free meanwhile."""
    import ray

    deadline = time.monotonic() + 10  # a guard for Ray's resource view to catch up, not a timing
    while ray.available_resources().get("CPU", 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield os.getpid(), ray.available_resources().get("CPU", 0)


def test_a_one_node_ray_runs_the_holder_in_the_driver_on_cpus_reserved_for_it(ray_local, monkeypatch):
    """A Ray worker would first import Ray, pyarrow and Lance (~3 CPU-s a job): the driver holds the rows
    itself, with its node's CPUs reserved, so that Ray places nothing else on them meanwhile."""
    from ray import cloudpickle

    from prep.materialize.executors import on_ray
    from prep.materialize.resolved import Call

    call = Call("a holder", _where_and_free_cpus, ())
    assert on_ray.RayExecutor(None, None).run_holders([call]) == [(os.getpid(), 0)]
    deadline = time.monotonic() + 10
    while ray_local.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray_local.available_resources().get("CPU") == 2  # given back
    monkeypatch.setattr(on_ray, "_driver_node", lambda resources: None)  # a head without CPUs, or without `resources`
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        [(pid, free)] = on_ray.RayExecutor(None, None).run_holders([call])
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert pid != os.getpid() and free == 0


def _after(marker: str, name: str, executor) -> Iterator[str]:
    """A holder that writes its split only once the driver has counted a split (``marker``; none: at once)."""
    deadline = time.monotonic() + 60  # a deadlock guard, not a timing
    while marker and not os.path.exists(marker):
        if time.monotonic() > deadline:
            raise RuntimeError("the driver had not counted the other holder's split")
        time.sleep(0.05)
    yield name


def test_ray_holders_on_two_nodes_are_counted_as_their_splits_are_written_whichever_comes_first(tmp_path, monkeypatch,
                                                                                                ray_local):
    """The first holder waits for the second holder's split to be counted: read in order, this never ends."""
    from ray import cloudpickle

    from prep.materialize.executors import on_ray
    from prep.materialize.resolved import Call

    monkeypatch.setattr(on_ray, "_nodes_cpus", lambda resources: [1, 1])  # two nodes of one CPU: both holders run at once
    marker = tmp_path / "counted"
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        out = on_ray.RayExecutor(None, None).run_holders(
            [Call("waits", _after, (str(marker), "waited")), Call("at once", _after, ("", "at once"))], marker.touch)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert out == ["at once", "waited"]


def test_the_cli_without_a_cluster_runs_in_process_without_ray_or_torch(synthetic, tmp_path):
    out = tmp_path / "out"
    code = (
        "import sys; from prep.cli import main; "
        f"rc = main(['materialize-shuffle', '--table', {synthetic!r}, '--output', {str(out)!r}, '--epochs', '1', '--splits', '4']); "
        "print(rc, 'ray' in sys.modules, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=_no_cluster_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "0 False False"
    assert verify(str(out)).ok


def test_use_ray_only_with_a_cluster(tmp_path):
    code = "from prep.runtime.ray_cluster import use_ray; import sys; print(use_ray(None), use_ray('127.0.0.1:6379'), 'ray' in sys.modules)"
    alone = subprocess.run([sys.executable, "-c", code], env=_no_cluster_env(), cwd=REPO, capture_output=True, text=True, check=True)
    assert alone.stdout.split() == ["False", "True", "False"]
    joined = subprocess.run([sys.executable, "-c", code], env={**_no_cluster_env(), "RAY_ADDRESS": "127.0.0.1:6379"},
                            cwd=REPO, capture_output=True, text=True, check=True)
    assert joined.stdout.split() == ["True", "True", "False"]


def test_use_ray_when_ray_is_initialised_in_this_process(ray_local, monkeypatch):
    from prep.runtime.ray_cluster import use_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert use_ray(None)


def test_sigkill_of_a_local_run_then_rerun_matches_an_uninterrupted_run(synthetic, tmp_path):
    out = tmp_path / "killed"
    args = ["materialize-shuffle", "--table", synthetic, "--output", str(out), "--epochs", "3", "--splits", "48",
            "--read-rows", "64", "--num-cpus", "1"]
    tables.kill_midway(args, out, env=_no_cluster_env())
    done = glob.glob(f"{out}/epoch-*/*.done.json")  # no process is left to write more
    assert 2 <= len(done) < 144, "not killed mid-run"
    assert not (out / "manifest.json").exists()
    survivors = {p: os.stat(p).st_mtime_ns for p in done}
    resumed = materialize_shuffle(table=synthetic, output=str(out), epochs=3, splits=48, read_rows=64, executor="local")
    assert {p: os.stat(p).st_mtime_ns for p in survivors} == survivors  # finished, not redone
    clean = materialize_shuffle(table=synthetic, output=str(tmp_path / "clean"), epochs=3, splits=48, executor="local")
    tables.same_output(str(out), str(tmp_path / "clean"), resumed, clean)
    assert verify(str(out)).ok


def test_an_unknown_executor_is_refused(synthetic, tmp_path):
    with pytest.raises(PrepError, match=r"executor='gpu' is not one of \['auto', 'ray', 'local'\]"):
        materialize_shuffle(table=synthetic, output=str(tmp_path / "o"), epochs=1, executor="gpu")


def _lost_after_the_check(src: str, monkeypatch) -> None:
    """A data file of ``src`` is lost once materialize has checked the table's files (a read then fails)."""
    from prep.materialize import table

    last = lance.dataset(src).get_fragments()[-1].data_files()[0].path
    checked = table.require_intact

    def check_then_lose(*args, **kwargs):
        checked(*args, **kwargs)
        os.remove(os.path.join(src, "data", os.path.basename(last)))

    monkeypatch.setattr(table, "require_intact", check_then_lose)


def test_a_failing_local_read_names_where_and_leaves_no_manifest(tmp_path, monkeypatch):
    src = tables.synthetic_table(str(tmp_path / "src.lance"), num_rows=3000, max_len=40, fragment_rows=1000)
    _lost_after_the_check(src, monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(PrepError, match=r"^reading the rows of splits 0\.\.3: "):
        materialize_shuffle(table=src, output=str(out), epochs=1, splits=4, executor="local")
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("where", ["driver", "worker"])
def test_a_failing_read_in_a_ray_holder_names_where_and_leaves_no_manifest(tmp_path, ray_local, monkeypatch, where):
    from prep.materialize.executors import on_ray

    if where == "worker":
        monkeypatch.setattr(on_ray, "_driver_node", lambda resources: None)
    src = tables.synthetic_table(str(tmp_path / "src.lance"), num_rows=3000, max_len=40, fragment_rows=1000)
    _lost_after_the_check(src, monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(PrepError, match=r"^reading the rows of splits 0\.\.3: \S.*data"):
        materialize_shuffle(table=src, output=str(out), epochs=1, splits=4, executor="ray")
    assert not (out / "manifest.json").exists()


def test_a_filter_of_more_than_one_expression_is_one_line_exit_2(synthetic, tmp_path, capsys):
    """Issue 21 #11: Lance read "length > 300" and silently ignored the rest."""
    rc = cli_main(["materialize-shuffle", "--table", synthetic, "--output", str(tmp_path / "o"), "--epochs", "1",
                   "--filter", "length > 300; anything at all", "--executor", "local"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "must be one SQL expression" in err[0], err
    assert not (tmp_path / "o").exists()
