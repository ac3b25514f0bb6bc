"""The MACs callback: counts through the task (scored sequence, training sample), both backends give the
same logged values, a declared hand formula is logged beside the count, untraceable models fall back.

The counting itself (hand formulas of every model, the backends' traps) is tested in tests/cost/test_flops.py.
"""

import pytest
import torch
from torch import nn

from seqrec.callbacks.macs import MACsCallback, measure
from seqrec.models.next_item.evornn import EvoRNN
from seqrec.models.next_item.sasrec import SASRec
from seqrec.tasks.next_item import NextItemTask
from tests.cost.test_flops import BACKENDS, N, sasrec_last_macs, sasrec_macs

# --- through the task and the callback ---


def _batch(L: int, rows: int = 4) -> dict:
    items = torch.randint(1, N + 1, (rows, L))
    items[0, :3] = 0
    labels = torch.roll(items, -1, dims=1)
    labels[items == 0] = 0
    return {"items": items, "labels": labels, "target": torch.randint(1, N + 1, (rows,))}


@pytest.mark.parametrize("backend", BACKENDS)
def test_scored_sequence_and_training_sample_through_the_task(backend):
    L, d = 12, 16
    task = NextItemTask(SASRec(num_items=N, max_len=L, d_model=d, ffn_dim=d), loss="ce")
    batch = _batch(L)
    encoder = sasrec_macs(L, d, 2, d)
    rows = batch["items"].shape[0]
    # evaluation: the newest position's hidden (the last block for that query only) + the target's score (d)
    # + every row of the catalogue (N + 1 rows, padding included)
    assert measure(task, batch, "eval", backend).total == rows * (sasrec_last_macs(L, d, 2, d) + d + d * (N + 1))
    # training: encoder + full-softmax logits at every labelled position
    labelled = int((batch["labels"] > 0).sum())
    assert measure(task, batch, "train", backend).total == rows * encoder + labelled * d * (N + 1)
    # counting never changes the run: modes and the RNG are restored
    state = torch.get_rng_state()
    task.train()
    measure(task, batch, "train", backend)
    assert task.training and torch.equal(state, torch.get_rng_state())


def test_macs_callback_gives_the_same_numbers_with_both_backends(ml100k_root, tmp_path):
    import lightning as L

    from seqrec.data.sources.movielens import MovieLens100K
    from seqrec.datamodules.next_item import NextItemDataModule

    values = {}
    for backend in BACKENDS:
        data = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, eval_batch_size=16)
        torch.manual_seed(0)
        task = NextItemTask(SASRec(num_items=data.num_items, max_len=10, d_model=8))
        callback = MACsCallback(backend=backend, probe_size=4)
        trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[callback], default_root_dir=tmp_path)
        [tested] = trainer.test(task, datamodule=data, verbose=False)  # counts eval and training probes
        values[backend] = {k: v for k, v in tested.items() if k.startswith("cost/macs")}
    assert set(values["fvcore"]) == {"cost/macs_per_sequence", "cost/macs_per_scored_sequence",
                                     "cost/macs_per_train_sample_forward", "cost/macs_per_train_sample"}
    assert values["fvcore"] == values["flop_counter"]
    L_ = 10
    assert values["fvcore"]["cost/macs_per_sequence"] == sasrec_macs(L_, 8, 2, 8)
    assert values["fvcore"]["cost/macs_per_train_sample"] == 3 * values["fvcore"]["cost/macs_per_train_sample_forward"]


def test_a_declared_hand_formula_is_logged_beside_the_count(ml100k_root, tmp_path, caplog):
    """EvoRNN is a ``DeclaresMACs``: its ``macs_per_sequence`` goes to ``cost/macs_hand_per_sequence``."""
    import lightning as L

    from seqrec.data.sources.movielens import MovieLens100K
    from seqrec.datamodules.next_item import NextItemDataModule

    data = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, eval_batch_size=16)
    model = EvoRNN(num_items=data.num_items, max_len=10, d_model=8, hidden_sizes=[4, 8], segment_lengths=[4])
    callback = MACsCallback(backend="flop_counter", probe_size=4)
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[callback], default_root_dir=tmp_path)
    with caplog.at_level("WARNING"):
        [tested] = trainer.test(NextItemTask(model), datamodule=data, verbose=False)
    assert tested["cost/macs_hand_per_sequence"] == model.macs_per_sequence(10) == tested["cost/macs_per_sequence"]
    assert "fix the formula" not in caplog.text


def test_untraceable_model_falls_back_to_flop_counter(caplog):
    class Untraceable(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, items):
            (items.shape[1] - 1).bit_length()  # Python arithmetic on a traced size
            return self.linear(torch.zeros(items.shape[0], items.shape[1], 4))

    class Task(NextItemTask):
        pass

    task = Task(Untraceable())
    callback = MACsCallback(backend="fvcore")
    batch = {"items": torch.ones(2, 3, dtype=torch.long)}
    with caplog.at_level("WARNING"):
        assert callback._count(task, batch, "encoder") == 2 * 3 * 16
    assert "FlopCounterMode instead" in caplog.text


def test_bad_backend_names_the_valid_ones():
    with pytest.raises(ValueError, match="fvcore.*flop_counter"):
        MACsCallback(backend="thop")


def test_what_is_counted_follows_what_the_task_declares():
    import lightning as L

    from seqrec.callbacks.macs import probe_function

    task = NextItemTask(SASRec(num_items=N, max_len=6, d_model=8))
    probes = []

    class Probed(NextItemTask):  # ProbesMACs: its own probe wins over ranks / training_step
        def macs_probe(self, batch, stage):
            probes.append(stage)
            return self.net(batch["items"])

    probed = Probed(SASRec(num_items=N, max_len=6, d_model=8))
    batch = _batch(6)
    probe_function(probed, "eval")(batch)
    probe_function(probed, "train")(batch)
    assert probes == ["eval", "train"]
    calls = []
    task.macs_probe = lambda batch, stage: calls.append(stage)  # NextItemTask declares one too
    probe_function(task, "eval")(batch)
    assert calls == ["eval"]
    plain = L.LightningModule()  # not a RecommendationTask: no network to count, no declared probe
    assert probe_function(plain, "encoder") is None and probe_function(plain, "eval") is None


def test_a_probe_batch_comes_only_from_a_map_style_loader():
    from torch.utils.data import DataLoader, IterableDataset

    from seqrec.callbacks.macs import first_examples

    class Stream(IterableDataset):
        def __iter__(self):
            yield {"items": torch.ones(3, dtype=torch.long)}

    examples = [{"items": torch.full((3,), i)} for i in range(5)]
    assert first_examples(DataLoader(examples, batch_size=2), 8)["items"].shape == (2, 3)  # never more than a batch
    assert first_examples(DataLoader(Stream(), batch_size=2), 8) is None
    assert first_examples(examples, 8) is None  # not a DataLoader
