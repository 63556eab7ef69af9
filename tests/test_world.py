"""prep.runtime.world: rank resolution (rank_and_world_size) in real processes: arguments, a torch.distributed
process group, launcher variables; a world without a rank is an error, never rank 0."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reader_fixtures as rf

REPO = Path(__file__).resolve().parent.parent
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                 "MASTER_ADDR", "MASTER_PORT")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any launcher variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def resolve(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``rank_and_world_size(*args)`` in a fresh interpreter with exactly the launcher variables ``env``."""
    code = ("import sys\nfrom prep.errors import PrepError\nfrom prep.runtime.world import rank_and_world_size\n"
            "try:\n    print(*rank_and_world_size(%s))\n"
            "except PrepError as e:\n    print('PrepError:', e); sys.exit(2)\n") % ", ".join(args)
    return subprocess.run([sys.executable, "-c", code], env=clean_env(**env), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,env,want", [
    ((), {}, "0 1"),
    (("2", "4"), {}, "2 4"),
    ((), {"RANK": "1", "WORLD_SIZE": "2"}, "1 2"),
    ((), {"WORLD_SIZE": "1"}, "0 1"),
    ((), {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, "0 1"),  # one process on one node: nothing to guess
    ((), {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, "3 4"),
    ((), {"SLURM_PROCID": "3", "SLURM_NTASKS": "4"}, "3 4"),
    ((), {"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "3", "SLURM_NTASKS": "4"}, "0 2"),  # RANK first
    (("None", "2"), {"RANK": "1", "WORLD_SIZE": "2"}, "1 2"),
    (("1", "None"), {"WORLD_SIZE": "2"}, "1 2"),
    (("1", "2"), {"RANK": "abc", "WORLD_SIZE": "8"}, "1 2"),  # arguments win: the environment is not read
], ids=["nothing", "arguments", "env", "world-of-one", "local-world-of-one", "env-with-local", "slurm", "env-before-slurm", "world-size-agrees",
        "rank-argument-env-world", "arguments-ignore-env"])
def test_rank_comes_from_the_first_source_that_has_it(args, env, want):
    out = resolve(*args, **env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == want


@pytest.mark.parametrize("args,env,message", [
    ((), {"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set but RANK is not"),
    ((), {"WORLD_SIZE": "2", "LOCAL_RANK": "1"}, "WORLD_SIZE=2 is set but RANK is not"),
    ((), {"SLURM_NTASKS": "4"}, "SLURM_NTASKS=4 is set but SLURM_PROCID is not"),
    ((), {"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc' is not an integer"),
    ((), {"SLURM_PROCID": "0", "SLURM_NTASKS": "four"}, "SLURM_NTASKS='four' is not an integer"),
    ((), {"RANK": "2", "WORLD_SIZE": "2"}, r"rank 2 must be in \[0, 2\) \(RANK/WORLD_SIZE\)"),
    (("3", "None"), {"RANK": "1", "WORLD_SIZE": "2"}, r"rank 3 must be in \[0, 2\) \(rank from argument, world size from RANK/WORLD_SIZE\)"),
    (("None", "4"), {"RANK": "1", "WORLD_SIZE": "2"}, r"world_size=4 \(argument\) comes without a rank, and RANK/WORLD_SIZE gives rank 1 of 2"),
    (("None", "2"), {}, r"world_size=2 \(argument\) comes without a rank"),
    ((), {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 are set but RANK and WORLD_SIZE are not"),
    ((), {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 are set but RANK and WORLD_SIZE are not"),
    ((), {"LOCAL_RANK": "1"}, "LOCAL_RANK=1 is set but RANK and WORLD_SIZE are not"),
    (("1", "None"), {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 are set but RANK"),
], ids=["world-size-alone", "local-rank-is-not-a-rank", "slurm-ntasks-alone", "rank-abc", "slurm-ntasks-four",
        "rank-out-of-range", "argument-rank-vs-env", "argument-world-vs-env", "argument-world-alone",
        "local-world-alone", "local-rank-0-of-2", "local-rank-alone", "argument-rank-local-world"])
def test_a_world_without_a_usable_rank_is_a_one_line_error(args, env, message):
    out = resolve(*args, **env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and len(out.stdout.strip().splitlines()) == 1
    assert re.search(message, out.stdout), out.stdout


RANK_MAIN = """
import sys
import numpy as np
import torch.distributed as dist
from prep.reader import ReaderDataset

rank, init, path, dest = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
ds = ReaderDataset(path, global_batch_size=4)  # no rank=, no RANK: the process group must decide
np.save(dest, np.stack([b.ids for b in ds]))
print(ds.rank, ds.world_size)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")
def test_two_torch_distributed_ranks_without_rank_variables_read_disjoint_halves(tmp_path):
    path, manifest = rf.cached_output("sft4")  # 4 splits of 10 rows: G=4 -> 10 steps, 2 splits a rank
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [subprocess.Popen([sys.executable, "-c", RANK_MAIN, str(r), init, path, str(tmp_path / f"rank{r}.npy")],
                              env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert [o.strip() for o, _ in outs] == ["0 2", "1 2"]
    ids = [np.load(tmp_path / f"rank{r}.npy") for r in range(2)]
    want = rf.expected_steps(path, manifest, global_batch_size=4, epoch=0)
    assert ids[0].shape == ids[1].shape == (len(want), 2)
    assert not set(ids[0].ravel().tolist()) & set(ids[1].ravel().tolist())
    for step, global_ids in enumerate(want):
        np.testing.assert_array_equal(np.concatenate([ids[0][step], ids[1][step]]), global_ids)


# --- the global order: any global batch, any world size dividing it ------------------------------------------------

from math import gcd  # noqa: E402

from prep.errors import PrepError  # noqa: E402
from prep.plan.order import Share  # noqa: E402


def global_order(num_splits: int, global_batch_size: int, positions: range) -> list[tuple[int, int]]:
    """The documented rule, position by position: ``(split, row)`` of global positions ``p``."""
    g = gcd(global_batch_size, num_splits)
    sigma = lambda j: (j % g) * (num_splits // g) + j // g  # noqa: E731
    return [(sigma(p % num_splits), p // num_splits) for p in positions]


def rank_pairs(share: Share, steps: np.ndarray) -> list[list[tuple[int, int]]]:
    """``(split, row)`` of rank ``share.rank`` at each step, in batch order (split after split)."""
    starts, counts = share.rows(steps)
    return [[(s, int(starts[i, s]) + k) for s in range(share.num_splits) for k in range(int(counts[i, s]))]
            for i in range(len(steps))]


@pytest.mark.parametrize("G", [8, 32, 64, 96, 256, 1024, 7, 100])
@pytest.mark.parametrize("S", [48, 4, 64])
def test_every_world_size_dividing_the_batch_takes_the_global_order_split_after_split(G, S):
    steps = np.arange(S // gcd(G, S) + 2)  # the order repeats every S // gcd(G, S) steps
    want = [sorted(global_order(S, G, range(t * G, (t + 1) * G))) for t in steps]
    for W in [w for w in (1, 2, 3, 4, 8, 16, 32) if G % w == 0]:
        ranks = [rank_pairs(Share(G, S, r, W), steps) for r in range(W)]
        for i, t in enumerate(steps):
            got = [pair for rank in ranks for pair in rank[i]]
            assert got == want[i], f"G={G} S={S} W={W} step {t}"
            assert all(len(rank[i]) == G // W for rank in ranks)
        for r, rank in enumerate(ranks):
            share = Share(G, S, r, W)
            touched = {s for step in rank for s, _ in step}
            assert touched <= set(share.splits)
            if S % W == 0:  # W divides the splits too: only its own splits, all of them (the cache relies on it)
                assert share.splits == range(r * S // W, (r + 1) * S // W) and touched == set(share.splits)
            for step in rank:  # each split gives a step one contiguous run of rows
                for s in {s for s, _ in step}:
                    rows = [k for ss, k in step if ss == s]
                    assert rows == list(range(rows[0], rows[0] + len(rows)))


def test_a_global_batch_that_the_splits_divide_is_todays_rows_of_every_split():
    share = Share(96, 48)
    starts, counts = share.rows(np.arange(5))
    assert (counts == 2).all() and (starts == np.arange(5)[:, None] * 2).all()
    assert share.steps_per_epoch(min_split_rows=13) == 6 and Share(64, 48).steps_per_epoch(min_split_rows=13) == 9


def test_a_world_size_that_does_not_divide_the_global_batch_is_a_one_line_error():
    with pytest.raises(PrepError, match=r"world_size=3 does not divide global_batch_size=64.*\[1, 2, 4, 8, 16, 32, 64\]"):
        Share(64, 48, 0, 3)
    with pytest.raises(PrepError, match="global_batch_size=0 must be >= 1"):
        Share(0, 48)
