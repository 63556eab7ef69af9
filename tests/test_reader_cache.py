"""The reader cache: same batches as without it, damage detected, bounded size, shared by processes, kill-safe."""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import pytest

import tables
from conftest import REPO
from prep.cache.store import SplitCache
from prep.materialize import materialize_shuffle
from prep.cache.prewarm import prewarm
from prep.reader import ReaderDataset


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> str:
    """3 epochs x 4 splits of a 2,000-row table (about 110 kB per split)."""
    root = tmp_path_factory.mktemp("cache-src")
    src = tables.synthetic_table(str(root / "t.lance"), num_rows=2000, max_len=40)
    out = str(root / "out")
    materialize_shuffle(table=src, output=out, epochs=3, splits=4, executor="local")
    return out


def batch_ids(path: str, consume_s: float = 0.0, **kw) -> tuple[list[list[int]], ReaderDataset]:
    ds = ReaderDataset(path, global_batch_size=32, **kw)
    out = []
    for batch in ds:
        out.append([int(i) for i in batch.ids])
        time.sleep(consume_s)  # a trainer's step: gives the fetch stage time to run ahead
    return out, ds


@pytest.fixture(scope="module")
def expected(output) -> list[list[int]]:
    return batch_ids(output)[0]


def test_a_cold_then_warm_cache_gives_the_same_batches(output, expected, tmp_path):
    cold, ds = batch_ids(output, consume_s=0.01, cache_dir=str(tmp_path / "c"))
    assert ds.stats().fetched_objects > 0 and ds.stats().cache_misses > 0
    summary = prewarm(output, cache=str(tmp_path / "c"))  # the same cache: completes what the first pass left
    assert summary["copied"] + summary["cached"] == 12 and summary["cached"] > 0
    warm, ds2 = batch_ids(output, cache_dir=str(tmp_path / "c"))
    assert cold == expected and warm == expected
    assert ds2.stats().cache_hits == 12 and ds2.stats().cache_misses == 0 and ds2.stats().fetched_bytes == 0
    assert "cache 12 hit/0 miss" in ds2.status_line()


def test_a_damaged_copy_is_detected_and_fetched_again(output, expected, tmp_path):
    cache = str(tmp_path / "c")
    batch_ids(output, consume_s=0.01, cache_dir=cache)
    batch_ids(output, cache_dir=cache)  # whatever the first pass left, now every split is cached
    data = sorted(glob.glob(f"{cache}/epoch-00001/split-0000*.lance/data/*.lance"))
    flipped = bytearray(open(data[0], "rb").read())
    flipped[len(flipped) // 2] ^= 0xFF
    open(data[0], "wb").write(bytes(flipped))  # same size, one byte changed
    with open(data[1], "r+b") as f:
        f.truncate(100)
    os.remove(glob.glob(f"{cache}/epoch-00002/split-00003.copy.json")[0])  # a copy without its record
    got, ds = batch_ids(output, consume_s=0.01, cache_dir=cache)
    assert got == expected
    store = SplitCache(cache, source=output)
    assert all(store.valid((e, s)) for e in range(3) for s in range(4))
    refetched = [f"{cache}/epoch-00001/split-00000.lance", f"{cache}/epoch-00001/split-00001.lance",
                 f"{cache}/epoch-00002/split-00003.lance"]
    assert ds.stats().cache_damaged == 2  # the copy without a record is missing, not damaged
    assert ds.stats().fetched_bytes == sum(os.path.getsize(f) for d in refetched
                                           for f in glob.glob(f"{d}/**/*", recursive=True) if os.path.isfile(f))


def test_a_cache_smaller_than_an_epoch_still_reads_every_batch(output, expected, tmp_path):
    cache = str(tmp_path / "c")
    limit = 250_000  # about two splits of the four in an epoch
    got, ds = batch_ids(output, consume_s=0.02, cache_dir=cache, cache_max_bytes=limit)
    assert got == expected
    s = ds.stats()
    assert s.cache_evictions > 0 and s.fetched_objects > 0, s
    assert SplitCache(cache, source=output).cached_bytes() <= limit


def _read_in_process(path: str, cache: str, queue) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    ids, ds = batch_ids(path, consume_s=0.005, cache_dir=cache)
    queue.put((ids, ds.stats().fetched_objects))


def test_two_processes_share_one_cache(output, expected, tmp_path):
    cache = str(tmp_path / "c")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    other = ctx.Process(target=_read_in_process, args=(output, cache, queue))
    other.start()
    while not os.path.isdir(cache):  # both readers start on a cold cache, at about the same time
        time.sleep(0.01)
    mine, _ = batch_ids(output, consume_s=0.005, cache_dir=cache)
    theirs, _ = queue.get(timeout=120)
    other.join(timeout=30)
    assert mine == expected and theirs == expected
    store = SplitCache(cache, source=output)
    assert sorted(store.cached()) == [(e, s) for e in range(3) for s in range(4)]
    assert all(store.valid(k) for k in store.cached())


@pytest.mark.s3
def test_a_kill_during_a_fetch_leaves_no_copy_that_counts(s3_env, s3_bucket, tmp_path):
    """SIGKILL a prewarm while objects are in flight (a proxy slows every request), then read with the cache."""
    from fault_proxy import FaultProxy
    from prep.io import storage

    src = f"s3://{s3_bucket}/t.lance"
    tables.synthetic_table(src, num_rows=600, max_len=30, storage_options=storage.lance_storage_options(src))
    out = f"s3://{s3_bucket}/out"
    materialize_shuffle(table=src, output=out, epochs=1, splits=4, executor="local")
    cache = str(tmp_path / "c")
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], latency_s=0.15) as proxy:
        env = {**os.environ, "AWS_ENDPOINT_URL": proxy.url, "PYTHONPATH": str(REPO)}
        child = subprocess.Popen([sys.executable, "-m", "prep", "prewarm", out, "--cache", cache, "--threads", "1"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not glob.glob(f"{cache}/epoch-*/*.tmp-*/**/*.lance", recursive=True) and time.time() < deadline:
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert glob.glob(f"{cache}/epoch-*/*.tmp-*"), "the kill should have hit a fetch in flight"
    store = SplitCache(cache, source=out)  # the next user of the cache clears what the killed fetch left
    assert not glob.glob(f"{cache}/epoch-*/*.tmp-*")
    assert len(store.cached()) < 4 and all(store.valid(k) for k in store.cached())
    assert batch_ids(out, cache_dir=cache)[0] == batch_ids(out)[0]  # reads what is there, fetches the rest
    summary = prewarm(out, cache=cache)  # and a rerun finishes the job
    assert summary["copied"] + summary["cached"] == 4
    assert all(store.valid(k) for k in store.cached()) and len(store.cached()) == 4
    assert not glob.glob(f"{cache}/epoch-*/*.tmp-*")


def test_a_copy_damaged_after_this_process_checked_it_is_not_served_but_fetched_again(output, tmp_path):
    """Issue 31 #1: a copy was hashed once per process, so bytes flipped later were served to that process."""
    cache = str(tmp_path / "c")
    prewarm(output, cache=cache, epochs=[0])
    store = SplitCache(cache, source=output)
    try:
        assert store.valid((0, 1))
        data = glob.glob(f"{cache}/epoch-00000/split-00001.lance/data/*.lance")[0]
        tables.flip_bytes(data)
        assert not store.valid((0, 1)) and store.damaged == 1
        assert store.fetch((0, 1)) and store.copies == 1 and store.valid((0, 1))
    finally:
        store.close()
