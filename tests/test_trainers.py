"""prep.reader under the frameworks' own machinery (issue 12): batch rebuilding, len(), prefetch
ahead of the trained batch, HF Trainer's default loader, Accelerate's re-sharding, StatefulDataLoader."""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import reader_fixtures as rf
from prep.reader import Batch, Loader, ReaderDataset

pytestmark = pytest.mark.skipif(not rf.GSM8K.exists(), reason=f"real data not found at {rf.SHARED_DATA}")
G = 4  # sft4x2: 4 splits x 3 rows, 2 epochs -> 3 steps an epoch


@pytest.fixture(scope="module")
def out():
    path, _ = rf.cached_output("sft4x2")
    reference = [(b.epoch, b.step, b.ids.copy()) for b in ReaderDataset(path, global_batch_size=G)]
    assert [(e, t) for e, t, _ in reference] == [(e, t) for e in (0, 1) for t in range(3)]
    return path, reference


def assert_sequence(got, want, what=""):
    assert [(e, t) for e, t, _ in got] == [(e, t) for e, t, _ in want], what
    for (_, _, a), (_, _, b) in zip(got, want):
        np.testing.assert_array_equal(a, b, err_msg=what)


def test_rebuilt_batches_keep_epoch_step_and_state(out):
    """Accelerate's send_to_device, HF's _prepare_inputs and Lightning's apply_to_collection all do this."""
    path, reference = out
    batch = next(iter(ReaderDataset(path, global_batch_size=G)))
    rebuilt = type(batch)({k: v.clone() for k, v in batch.items()})
    assert (rebuilt.epoch, rebuilt.step, rebuilt.state["step"]) == (0, 0, 1)
    np.testing.assert_array_equal(rebuilt.ids, reference[0][2])
    shipped = pickle.loads(pickle.dumps(rebuilt))  # DataLoader workers pickle batches
    assert isinstance(shipped, Batch) and (shipped.step, shipped.state) == (0, batch.state)
    assert all(torch.equal(shipped[k], batch[k]) for k in batch) and type(dict(batch)) is dict


def test_len_is_the_steps_one_iteration_yields(out):
    path, reference = out
    ds = ReaderDataset(path, global_batch_size=G, rank=1, world_size=2)
    assert len(ds) == len(list(ds)) == 6 and ds.steps_per_epoch == {0: 3, 1: 3}
    loader = Loader(ReaderDataset(path, global_batch_size=G), epoch_per_iter=True)
    assert len(loader) == 3 and len(Loader(ds)) == 6
    epochs = [[(b.epoch, b.step, b.ids.copy()) for b in loader] for _ in range(2)]
    assert_sequence(epochs[0] + epochs[1], reference)  # one reader epoch per iter(): the trainer's epoch 0 is ours


def prefetched(batches, ahead):
    """What Lightning's fetcher and Accelerate's DataLoaderShard do: hold `ahead` batches beyond the one handed out."""
    queue, it = collections.deque(), iter(batches)
    for batch in it:
        queue.append(batch)
        if len(queue) > ahead:
            yield queue.popleft()
    yield from queue


@pytest.mark.parametrize("ahead", [1, 2, 4])
def test_state_of_the_trained_batch_resumes_exactly_whatever_was_prefetched(out, ahead):
    path, reference = out
    stop = 2
    loader = Loader(ReaderDataset(path, global_batch_size=G))
    trained = []
    for batch in prefetched(loader, ahead):
        batch = type(batch)({k: v.clone() for k, v in batch.items()})  # the framework's device copy
        trained.append((batch.epoch, batch.step, batch.ids.copy()))
        if len(trained) == stop:
            break
    ahead_of_training = loader.dataset.schedule.position(stop + ahead)  # the loader's own state: never trained on
    assert (loader.state_dict()["epoch"], loader.state_dict()["step"]) == ahead_of_training
    again = Loader(ReaderDataset(path, global_batch_size=G))
    again.load_state_dict(batch.state)
    assert_sequence(trained + [(b.epoch, b.step, b.ids.copy()) for b in again], reference, f"ahead={ahead}")


def test_hf_trainer_default_loader_fails_and_the_mixin_feeds_reader_batches(out, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    from prep.integrations.hf import ReaderTrainerMixin

    path, reference = out
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, report_to=[], use_cpu=True)
    plain = Trainer(model=model, args=args, train_dataset=ReaderDataset(path, global_batch_size=G))
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        next(iter(plain.get_train_dataloader()))  # Trainer's DataLoader stacks whole batches into a batch of batches

    class ReaderTrainer(ReaderTrainerMixin, Trainer):
        pass

    trainer = ReaderTrainer(model=model, args=args, train_dataset=ReaderDataset(path, global_batch_size=G))
    loader = trainer.get_train_dataloader()
    assert len(loader) == 3
    assert_sequence([(b.epoch, b.step, b.ids.copy()) for b in loader], reference[:3])


def test_accelerate_prepare_reshards_a_reader_dataloader_but_passes_the_reader_loader_through(out):
    from accelerate import Accelerator
    from accelerate.data_loader import prepare_data_loader

    from prep.integrations.accelerate import reader_loader

    path, _ = out
    resharded = prepare_data_loader(DataLoader(ReaderDataset(path, global_batch_size=G, rank=0, world_size=2),
                                               batch_size=None), num_processes=2, process_index=0, put_on_device=False)
    assert type(resharded.dataset).__name__ == "IterableDatasetShard"  # a per-rank reader sharded a second time
    with pytest.raises(TypeError):
        next(iter(resharded))
    accelerator = Accelerator(cpu=True)
    loader = reader_loader(accelerator, ReaderDataset(path, global_batch_size=G))
    assert accelerator.prepare(loader) is loader  # not a DataLoader: no re-sharding, no dispatching
    assert accelerator._custom_objects == [loader]


@pytest.mark.parametrize("num_workers,stop", [(0, 2), (2, 4)])
def test_stateful_dataloader_state_dict_resumes_exactly(out, num_workers, stop):
    from prep.integrations.torchdata import stateful_loader

    path, reference = out
    loader = stateful_loader(ReaderDataset(path, global_batch_size=G), num_workers=num_workers)
    first = []
    for batch in loader:
        first.append((batch.epoch, batch.step, batch.ids.copy()))
        if len(first) == stop:
            break
    state = loader.state_dict()
    del loader
    again = stateful_loader(ReaderDataset(path, global_batch_size=G), num_workers=num_workers)
    again.load_state_dict(state)
    assert_sequence(first + [(b.epoch, b.step, b.ids.copy()) for b in again], reference, f"{num_workers} workers")


@pytest.mark.parametrize("key", ["num_splits", "global_batch_size"])
def test_a_checkpointed_state_with_a_number_as_a_string_names_the_type(out, key):
    """A state re-serialised by a config tool (``"16"`` for 16) said "num_splits=16, this reader has num_splits=16"."""
    from prep.errors import PrepError

    path, _ = out
    loader = Loader(ReaderDataset(path, global_batch_size=G))
    state = loader.state_dict()
    state[key] = str(state[key])
    with pytest.raises(PrepError, match=rf"reader state {key}='{state[key]}' is a str, not an integer"):
        loader.load_state_dict(state)


def test_accelerate_epoch_loop_trains_each_reader_epoch_once_and_resume_restores_the_step_count(out):
    """``for epoch in range(2): for batch in loader`` used to get every epoch in the first pass: four epochs."""
    from accelerate import Accelerator

    from prep.integrations.accelerate import reader_loader

    path, reference = out
    accelerator = Accelerator(cpu=True)
    loader = reader_loader(accelerator, ReaderDataset(path, global_batch_size=G))
    assert len(loader) == 3 and (loader.position, loader.steps_done) == ((0, 0), 0)
    passes = [[(b.epoch, b.step, b.ids.copy()) for b in loader] for _ in range(2)]
    assert [[e for e, _, _ in p] for p in passes] == [[0, 0, 0], [1, 1, 1]]
    assert_sequence(passes[0] + passes[1], reference)
    stopped = Loader(ReaderDataset(path, global_batch_size=G))
    consumed = [b for _, b in zip(range(4), stopped)]
    resumed = reader_loader(accelerator, ReaderDataset(path, global_batch_size=G))
    resumed.load_state_dict(stopped.state_dict())  # what accelerator.load_state does with the saved state
    assert (resumed.position, resumed.steps_done) == ((1, 1), len(consumed))
    from prep.integrations.progress import epochs_done, rows_per_epoch

    assert epochs_done(resumed) == pytest.approx(4 / 3) and rows_per_epoch(resumed) == 3 * G  # what to log
    rest = [[(b.epoch, b.step, b.ids.copy()) for b in resumed] for _ in range(resumed.position[0], 2)]
    assert rest == [rest[0]] and [(e, t) for e, t, _ in rest[0]] == [(1, 1), (1, 2)]


def test_lightning_counts_the_loader_as_resumable_and_its_state_is_the_trained_batch(out):
    """Lightning warned "your dataloader is not resumable" at every mid-epoch resume: it checks the loader for
    ``state_dict``/``load_state_dict`` (its ``_Stateful`` protocol). The state must be the trained batch's, not
    the one its fetcher prefetched."""
    from types import SimpleNamespace

    from lightning.fabric.utilities.types import _Stateful

    from prep.integrations.lightning import ReaderDataModule

    path, reference = out
    dm = ReaderDataModule(path, global_batch_size=G)
    dm.trainer = SimpleNamespace(global_rank=0, world_size=1, training=True)
    dm.setup("fit")
    batches = dm.train_dataloader()
    assert isinstance(batches, _Stateful) and len(batches) == 3
    it = iter(batches)
    trained = dm.on_before_batch_transfer(next(it), 0)  # Lightning hands the first batch to training_step...
    next(it)  # ...having fetched the second already
    state = batches.state_dict()
    assert state == dm.state_dict() == {"reader": trained.state}
    again = ReaderDataModule(path, global_batch_size=G)
    again.trainer = dm.trainer
    again.setup("fit")
    again.train_dataloader().load_state_dict(state)  # what Lightning's fit loop does on resume
    rest = [(b.epoch, b.step, b.ids.copy()) for b in again.train_dataloader()]
    assert_sequence([(trained.epoch, trained.step, trained.ids.copy())] + rest, reference[:3])


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=32768, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1))


@pytest.mark.slow
def test_hf_trainer_reports_the_readers_samples_and_an_epoch_that_continues_after_a_resume(out, tmp_path):
    """Issue 33: Trainer counted samples with per_device_train_batch_size=8, which the reader ignores
    (train_samples_per_second 0.589 for ~4.7 rows/s), and after a resume its epoch fell (0.0862 -> 0.008621)."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from prep.integrations.hf import ReaderTrainerMixin

    class ReaderTrainer(ReaderTrainerMixin, Trainer):
        pass

    class Epochs(TrainerCallback):
        def __init__(self) -> None:
            self.seen: list[tuple[int, float]] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.seen.append((state.global_step, logs["epoch"]))

    path, _ = out

    def run(max_steps: int | None, resume: bool) -> tuple[list[tuple[int, float]], dict]:
        args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=2,
                                 max_steps=max_steps or -1, save_steps=2, logging_steps=1, report_to=[], use_cpu=True,
                                 disable_tqdm=True)
        epochs = Epochs()
        trainer = ReaderTrainer(model=_tiny_llama(), args=args, train_dataset=ReaderDataset(path, global_batch_size=G),
                                callbacks=[epochs])
        assert trainer.num_examples(trainer.get_train_dataloader()) == 3 * G  # one epoch's rows, not its steps
        metrics = trainer.train(resume_from_checkpoint=resume or None).metrics
        return epochs.seen, metrics

    first, _ = run(max_steps=2, resume=False)  # stops after step 2, checkpoint-2 saved (mid-epoch 0)
    rest, metrics = run(max_steps=None, resume=True)
    assert first == [(1, pytest.approx(1 / 3)), (2, pytest.approx(2 / 3))]
    assert rest == [(s, pytest.approx(s / 3)) for s in (3, 4, 5, 6)]  # Trainer alone: 1/3, 2/3, 1.0, 4/3 after it
    rows = 4 * G  # four steps of G rows trained in the resumed run (Trainer alone: 4 x 8)
    assert metrics["train_samples_per_second"] * metrics["train_runtime"] == pytest.approx(rows, rel=0.02)


@pytest.mark.slow
def test_lightning_counts_the_readers_rows_and_its_epoch_and_step_continue_after_a_resume(out, tmp_path):
    """Issue 33 asked for Lightning's numbers as HF Trainer's: Lightning sizes a batch itself (for ``self.log``
    and ``ThroughputMonitor``: here the reader's local batch) and restores epoch, batch index and step from the
    checkpoint (the reader seeks, Lightning skips nothing)."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.utilities.data import extract_batch_size

    from prep.integrations.lightning import ReaderDataModule

    path, reference = out

    class LM(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _tiny_llama()
            self.seen: list[tuple[int, int, int, int, int]] = []

        def training_step(self, batch, batch_idx):
            self.seen.append((self.current_epoch, batch_idx, self.global_step, batch.step, extract_batch_size(batch)))
            return self.model(**batch).loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def fit(max_steps: int, ckpt_path: str | None) -> LM:
        module = LM()
        trainer = L.Trainer(max_epochs=2, max_steps=max_steps, accelerator="cpu", logger=False, enable_progress_bar=False,
                            enable_model_summary=False, callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True,
                                                                                   every_n_train_steps=2)])
        trainer.fit(module, datamodule=ReaderDataModule(path, global_batch_size=G), ckpt_path=ckpt_path)
        return module

    first = fit(max_steps=2, ckpt_path=None)
    rest = fit(max_steps=-1, ckpt_path=str(tmp_path / "last.ckpt"))
    assert [s[:4] for s in first.seen] == [(0, 0, 0, 0), (0, 1, 1, 1)]
    assert [s[:4] for s in rest.seen] == [(0, 2, 2, 2), (1, 0, 3, 0), (1, 1, 4, 1), (1, 2, 5, 2)]
    assert {s[4] for s in first.seen + rest.seen} == {G}  # rows Lightning counts per step: the reader's batch
