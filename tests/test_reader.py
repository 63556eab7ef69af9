"""prep.reader on real Lance outputs: order, exactly-once, elastic world sizes, resume, batch layout."""

from __future__ import annotations

import os
from dataclasses import replace
import subprocess
import sys

import numpy as np
import pytest
import torch

import reader_fixtures as rf
from prep.errors import PrepError
from prep.reader import Loader, ReaderDataset, ReaderError, ReaderOptions

pytestmark = pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")
G = 96  # 48 splits -> b = 2 rows per split per step, 6 steps per epoch, 2 epochs


@pytest.fixture(scope="module")
def out48():
    return rf.cached_output("sft48")


def read_all(path, *, stop=None, state=None, **kw):
    """Steps read until ``stop`` batches; returns ([(epoch, step, ids)], state after the last one)."""
    ds = ReaderDataset(path, global_batch_size=G, **kw)
    if state is not None:
        ds.load_state_dict(state)
    got = []
    for batch in ds:
        got.append((batch.epoch, batch.step, batch.ids.copy()))
        if stop is not None and len(got) == stop:
            break
    return got, ds.state_dict()


def test_every_row_is_delivered_once_across_ranks_in_materialized_order(out48):
    path, manifest = out48
    expected = [rf.expected_steps(path, manifest, global_batch_size=G, epoch=e) for e in (0, 1)]
    ranks = [read_all(path, rank=r, world_size=8)[0] for r in range(8)]
    for r, got in enumerate(ranks):
        assert [(e, t) for e, t, _ in got] == [(e, t) for e in (0, 1) for t in range(6)]
        for e, t, ids in got:
            np.testing.assert_array_equal(ids, expected[e][t][r * 12:(r + 1) * 12])
    for e in (0, 1):
        delivered = np.concatenate([ids for got in ranks for ee, _, ids in got if ee == e])
        assert len(delivered) == len(set(delivered.tolist())) == 6 * G
    ds = ReaderDataset(path, global_batch_size=G, rank=0, world_size=8)
    assert ds.dropped_rows == sum(int(n) - 12 for e in (0, 1) for n in ds.layout.split_rows[e][:6])


def test_global_batch_at_each_step_is_the_same_set_for_world_sizes_1_2_3_4_6_8(out48):
    path, _ = out48
    reference = None
    for world in (1, 2, 3, 4, 6, 8):
        per_rank = [read_all(path, rank=r, world_size=world)[0] for r in range(world)]
        steps = [sorted(np.concatenate([got[i][2] for got in per_rank]).tolist()) for i in range(12)]
        assert all(len(got) == 12 for got in per_rank)
        reference = reference or steps
        assert steps == reference, f"world size {world} changes the global batches"


@pytest.mark.parametrize("stop", [3, 6, 12, 8], ids=["mid-epoch", "epoch-boundary", "last-batch", "second-epoch"])
def test_resume_after_any_batch_matches_uninterrupted_run(out48, stop):
    path, _ = out48
    full, end = read_all(path)
    first, state = read_all(path, stop=stop)
    rest, _ = read_all(path, state=state)
    assert [(e, t) for e, t, _ in first + rest] == [(e, t) for e, t, _ in full]
    for (_, _, a), (_, _, b) in zip(first + rest, full):
        np.testing.assert_array_equal(a, b)
    assert (end["epoch"], end["step"]) == (2, 0)


def test_state_dict_inside_the_loop_resumes_after_the_batch_just_consumed(out48):
    path, _ = out48
    ds = ReaderDataset(path, global_batch_size=G)
    states = [(batch.epoch, batch.step, ds.state_dict()) for batch in ds]
    for epoch, step, state in states:
        nxt = (epoch, step + 1) if step + 1 < 6 else (epoch + 1, 0)
        assert (state["epoch"], state["step"]) == nxt


def test_resume_with_a_smaller_world_size_continues_the_global_batch_sequence(out48):
    path, _ = out48
    full = read_all(path)[0]
    ranks8 = [read_all(path, rank=r, world_size=8, stop=4) for r in range(8)]
    states = {(s["epoch"], s["step"]) for _, s in ranks8}
    assert states == {(0, 4)}
    ranks6 = [read_all(path, rank=r, world_size=6, state=ranks8[0][1])[0] for r in range(6)]
    before = [np.concatenate([got[i][2] for got, _ in ranks8]) for i in range(4)]
    after = [np.concatenate([got[i][2] for got in ranks6]) for i in range(8)]
    for i, ids in enumerate(before + after):
        np.testing.assert_array_equal(ids, full[i][2])


def test_loader_without_workers_resumes_exactly(out48):
    path, _ = out48
    full = read_all(path)[0]
    loader = Loader(ReaderDataset(path, global_batch_size=G), device="cpu")  # the device feed passes CPU batches through
    first = []
    for batch in loader:
        first.append(batch.ids.copy())
        if len(first) == 7:
            break
    again = Loader(ReaderDataset(path, global_batch_size=G))
    again.load_state_dict(loader.state_dict())
    rest = [batch.ids.copy() for batch in again]
    assert len(first + rest) == len(full)
    for a, (_, _, b) in zip(first + rest, full):
        np.testing.assert_array_equal(a, b)
    line = again.status_line()
    assert line.startswith("epoch 1 of 2 step 6 | ") and line.endswith("-bound") and "tok/s" in line


def test_loader_frees_the_batches_a_loop_let_go_of_on_its_release_thread(out48):
    """``for batch in loader`` lets go of a batch at the next ``next()``: its memory is then freed on the
    loader's release thread, not on the trainer's (there it cost 1% of an image step, feed.py)."""
    import threading
    import weakref

    path, _ = out48
    freed: dict[int, str] = {}
    held_back = None
    for i, batch in enumerate(Loader(ReaderDataset(path, global_batch_size=G))):
        weakref.finalize(batch, lambda i=i: freed.__setitem__(i, threading.current_thread().name))
        if i == 2:
            held_back = batch  # a loop that keeps a batch: it is freed where the loop drops it
        if i == 8:
            break
    let_go = (0, 1, 3, 4, 5, 6)  # 7 and 8 are let go of when the loop ends
    for _ in range(100):  # the release thread drops them as it gets the GIL
        if all(i in freed for i in let_go):
            break
        threading.Event().wait(0.02)
    assert {i: freed.get(i) for i in let_go} == dict.fromkeys(let_go, "reader release")
    assert 2 not in freed
    del held_back
    assert freed[2] == threading.current_thread().name


def test_batches_are_padded_with_the_tokenizer_pad_id_and_labels_mask_prompt_and_padding(out48):
    path, manifest = out48
    source = rf.gsm8k_sft(600)
    by_id = {int(i): k for k, i in enumerate(source.column("id").to_numpy())}
    tokens, masks = source.column("input_ids").to_pylist(), source.column("loss_mask").to_pylist()
    pad = manifest.source.metadata.tokenizer.pad_or_eos
    batch = next(iter(ReaderDataset(path, global_batch_size=G, pad_to_multiple_of=64, return_loss_mask=True)))
    ids, labels, attn = batch["input_ids"], batch["labels"], batch["attention_mask"]
    assert ids.dtype == labels.dtype == attn.dtype == torch.int64 and ids.shape[1] % 64 == 0
    for row, row_id in enumerate(batch.ids):
        toks, mask = tokens[by_id[int(row_id)]], masks[by_id[int(row_id)]]
        n = len(toks)
        assert ids[row, :n].tolist() == toks and (ids[row, n:] == pad).all()
        assert attn[row].tolist() == [1] * n + [0] * (ids.shape[1] - n)
        assert labels[row, :n].tolist() == [t if m else -100 for t, m in zip(toks, mask)]
        assert (labels[row, n:] == -100).all() and batch["loss_mask"][row, :n].tolist() == mask
    assert batch.num_tokens == int(attn.sum())


def test_transform_runs_on_a_thread_pool_in_step_order_and_failures_name_the_step(out48):
    path, _ = out48
    add = lambda b: {**b, "doubled": b["input_ids"] * 2}  # noqa: E731
    got = list(ReaderDataset(path, global_batch_size=G, transform=add, transform_threads=3))
    assert [(b.epoch, b.step) for b in got] == [(e, t) for e in (0, 1) for t in range(6)]
    assert all(torch.equal(b["doubled"], b["input_ids"] * 2) for b in got)

    def boom(b):
        if b.step == 2:
            raise KeyError("no such key")
        return b

    with pytest.raises(ReaderError, match="epoch 0 step 2: KeyError"):
        list(ReaderDataset(path, global_batch_size=G, transform=boom))


def test_state_from_another_plan_or_batch_size_is_rejected(out48):
    path, _ = out48
    other, _ = rf.cached_output("sft4-seed1")
    foreign = ReaderDataset(other, global_batch_size=8).state_dict()
    ds = ReaderDataset(path, global_batch_size=G)
    with pytest.raises(PrepError, match="fingerprint .*another table, table version or shuffle plan"):
        ds.load_state_dict(foreign)
    with pytest.raises(PrepError, match="global_batch_size=192"):
        ds.load_state_dict({**ds.state_dict(), "global_batch_size": 192})
    with pytest.raises(PrepError, match=r"unknown keys \['sample'\]"):
        ds.load_state_dict({**ds.state_dict(), "sample": 3})
    with pytest.raises(PrepError, match="step=7 is outside epoch 0"):
        ds.load_state_dict({**ds.state_dict(), "step": 7})


def test_the_knobs_come_as_keywords_or_as_options_and_an_unknown_one_is_named(out48):
    path, _ = out48
    options = ReaderOptions(pad_to_multiple_of=64, return_loss_mask=True)
    ds = ReaderDataset(path, global_batch_size=G, options=options, pad_to_multiple_of=24)  # a keyword wins
    assert ds.options == replace(options, pad_to_multiple_of=24)
    batch = next(iter(ds))
    assert batch["input_ids"].shape[1] % 24 == 0 and "loss_mask" in batch
    assert ReaderDataset(path, global_batch_size=G).options == ReaderOptions()
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['pad_multiple'\]"):
        ReaderDataset(path, global_batch_size=G, pad_multiple=8)


def test_import_does_not_pull_in_ray_opens_fast_and_an_abandoned_iterator_exits_cleanly(out48):
    path, _ = out48
    code = ("import sys, time; import prep.reader as r; t = time.perf_counter(); "
            f"ds = r.ReaderDataset({path!r}, global_batch_size=96, rank=1, world_size=4); "
            "print('ray' in sys.modules, time.perf_counter() - t); "
            "it = iter(ds); next(it)")  # exits with reader threads mid-read: must not abort
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split()
    assert out[0] == "False"
    assert float(out[1]) < 0.5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_feed_copies_pinned_batches_to_the_gpu_on_a_side_stream(out48):
    path, _ = out48
    host = list(ReaderDataset(path, global_batch_size=G))
    loader = Loader(ReaderDataset(path, global_batch_size=G, pin_memory=True), device="cuda")
    got = list(loader)
    assert len(got) == len(host)
    for a, b in zip(got, host):
        assert all(t.is_cuda for t in a.values()) and (a.epoch, a.step) == (b.epoch, b.step)
        assert all(torch.equal(a[k].cpu(), b[k]) for k in b)
    assert loader.status_line().endswith(("gpu-bound", "io-bound", "cpu-bound"))
