"""The one executor layer (prep.runtime.executor): the choice both stages take, its retries, its two runners."""

from __future__ import annotations

import inspect
import sys
import threading

import pytest

from prep.cli import build_parser
from prep.errors import PrepError
from prep.integrations.ray_table import write_table
from prep.materialize.options import RunOptions
from prep.prepare.isolation import Limits
from prep.runtime.config import JobConfig
from prep.runtime.executor import EXECUTORS, MAX_TASK_RETRIES, LocalRunner, RayRunner, in_order, resolve


def test_both_stages_take_the_one_executor_choice(monkeypatch, tmp_path):
    """prepare's config, materialize's options and every command's ``--executor`` take the same values and
    refuse the same; ``resolve`` decides for both (``auto``: Ray only with a cluster to join)."""
    parser = build_parser()
    for value in EXECUTORS:
        assert JobConfig(input="in", output="out", executor=value).executor == value
        assert RunOptions(output="out", epochs=1, executor=value).executor == value
        for command in (["pretokenize", "--input", "in", "--output", "out"], ["materialize-shuffle", "--table", "t", "--output", str(tmp_path), "--epochs", "1"]):
            assert parser.parse_args([*command, "--executor", value]).executor == value
    with pytest.raises(PrepError, match=r"executor='ray-local' is not one of \['auto', 'ray', 'local'\]"):
        RunOptions(output="out", epochs=1, executor="ray-local")
    with pytest.raises(PrepError, match=r"executor='ray-local' is not one of \['auto', 'ray', 'local'\]"):
        resolve("ray-local")
    with pytest.raises(ValueError, match="auto"):
        JobConfig(input="in", output="out", executor="ray-local")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert [resolve(e, "ray://head:10001") for e in EXECUTORS] == ["ray", "ray", "local"]
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert resolve("auto") == "ray" and resolve("local") == "local"


def test_ray_task_retries_come_from_one_setting(ray_local):
    """Every Ray task prep starts is retried :data:`MAX_TASK_RETRIES` times when its worker dies: prepare's
    (a config key that defaults to it), materialize's and write_table's."""
    from prep.materialize.executors.on_ray import RayExecutor

    assert JobConfig(input="in", output="out").max_task_retries == MAX_TASK_RETRIES
    assert Limits().max_task_retries == Limits.of(JobConfig(input="in", output="out")).max_task_retries == MAX_TASK_RETRIES
    assert inspect.signature(write_table).parameters["max_retries"].default == MAX_TASK_RETRIES
    with RayExecutor(None, None) as executor:
        assert executor.runner.task_options["max_retries"] == MAX_TASK_RETRIES
    assert RayRunner(retries=1).task_options["max_retries"] == 1  # prepare's runner: limits.max_task_retries


def _square(x: int) -> int:
    return x * x


def _lookup(shared: dict, key: str) -> int:
    return shared[key]


def _fails_on(x: int, bad: int) -> int:
    if x == bad:
        raise PrepError(f"item {x}: bad")
    if x > bad:
        raise ValueError(f"item {x}: also bad")
    return x


@pytest.fixture(params=["local", "ray"])
def runner(request):
    if request.param == "local":
        with LocalRunner(2, "prep-test") as local:
            yield local
    else:
        from ray import cloudpickle

        request.getfixturevalue("ray_local")
        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import this test module
        yield RayRunner(num_cpus=1)


def test_both_runners_take_the_same_calls(runner):
    """``as_done`` yields each key with its result (any order); ``in_order`` puts them back in the calls' order."""
    assert sorted(runner.as_done(_square, ((f"k{i}", (i,)) for i in range(20)))) == sorted((f"k{i}", i * i) for i in range(20))
    seen: list[int] = []
    assert in_order(runner, _square, [(i,) for i in range(20)], seen.append) == [i * i for i in range(20)]
    assert sorted(seen) == [i * i for i in range(20)]
    shared = runner.put({"a": 1})
    assert in_order(runner, _lookup, [(shared, "a")]) == [1]


def test_both_runners_raise_a_tasks_error_as_one_line(runner):
    with pytest.raises(PrepError, match=r"^item 3: bad$"):
        in_order(runner, _fails_on, [(i, 3) for i in range(4)])


def test_the_local_runner_drops_the_calls_not_started_on_the_first_error():
    """The first error stops the run: the running calls finish (nothing writes behind the caller's cleanup), the
    others never start."""
    started, release = [], threading.Event()

    def call(i: int) -> int:
        started.append(i)
        if i == 0:
            raise PrepError("item 0: bad")
        release.wait(10)
        return i

    with LocalRunner(2, "prep-test") as local:
        threading.Timer(0.2, release.set).start()
        with pytest.raises(PrepError, match="item 0: bad"):
            in_order(local, call, [(i,) for i in range(50)])
        assert len(started) < 50
        count = len(started)
        release.set()
    assert len(started) == count  # nothing started after the error was raised


def test_a_kept_local_runner_keeps_its_threads_across_runs():
    """prepare's pool outlives a job (its threads' sandboxes stay warm); another size replaces it."""
    names = [in_order(LocalRunner(2, "prep-kept", kept=True), lambda: threading.current_thread(), [()] * 4)
             for _ in range(2)]
    assert all(t.name.startswith("prep-kept") for t in names[0] + names[1])
    assert len(set(names[0] + names[1])) <= 2  # the same thread objects, run after run
    bigger = in_order(LocalRunner(3, "prep-kept", kept=True), lambda: threading.current_thread(), [()])
    assert bigger[0] not in names[0] + names[1]
