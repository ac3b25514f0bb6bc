"""Throughput: what counts as a sample, a token and a user; the values reach the progress bar and the results."""

import lightning as L
import pytest
import torch

from seqrec.callbacks.throughput import ThroughputCallback, batch_rows, batch_tokens
from seqrec.models.next_item.sasrec import SASRec
from seqrec.tasks.next_item import NextItemTask


def test_rows_and_tokens():
    batch = {"items": torch.tensor([[0, 0, 3], [1, 2, 3]]), "target": torch.tensor([4, 5])}
    assert batch_rows(batch) == 2
    assert batch_tokens(batch, "items") == 4  # padding id 0 is not a token
    assert batch_tokens(batch, "history") == 0
    padded = {**batch, "valid": torch.tensor([True, False])}  # a distributed padding row
    assert batch_rows(padded) == 1


def test_callback_reports_training_and_evaluation_rates(ml100k_root, tmp_path):
    from seqrec.data.sources.movielens import MovieLens100K
    from seqrec.datamodules.next_item import NextItemDataModule

    data = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, batch_size=16, eval_batch_size=16)
    task = NextItemTask(SASRec(num_items=data.num_items, max_len=10, d_model=8))
    callback = ThroughputCallback(window=3)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[callback], default_root_dir=tmp_path)
    trainer.fit(task, datamodule=data)
    assert trainer.progress_bar_metrics["train/samples_per_s"] > 0
    assert trainer.progress_bar_metrics["train/tokens_per_s"] > trainer.progress_bar_metrics["train/samples_per_s"]
    metrics = trainer.callback_metrics
    assert metrics["train/samples_per_s_epoch"] > 0 and metrics["val/users_per_s"] > 0
    assert callback._epoch_samples == len(data.datasets["train"])
    [result] = trainer.test(task, datamodule=data, verbose=False)
    assert callback.test_users_per_s > 0 and "test/users_per_s" not in result  # logged, not returned
    assert callback._eval_users == len(data.datasets["test"])


def test_an_epoch_resumed_mid_way_is_timed_from_the_resume(ml100k_root, tmp_path):
    """Lightning calls no on_train_epoch_start for an epoch resumed from a mid-epoch checkpoint: the epoch's rate
    then counts the resumed part over this fit's time (it divided by the time since boot: 0.25 samples/s logged by
    MLP4Rec's second sitting, which trains at about 43)."""
    import time

    from lightning.pytorch.callbacks import Callback

    from seqrec.data.sources.movielens import MovieLens100K
    from seqrec.datamodules.next_item import NextItemDataModule

    class Stop(Exception):
        pass

    class SaveAndStop(Callback):  # a checkpoint after step 5, then a stop: as a signal does (callbacks/signals.py)
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 5:
                trainer.save_checkpoint(tmp_path / "mid.ckpt")
                raise Stop

    def fit(*callbacks, ckpt_path=None):
        data = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, batch_size=16, eval_batch_size=16)
        task = NextItemTask(SASRec(num_items=data.num_items, max_len=10, d_model=8))
        callback = ThroughputCallback(window=1000)  # the rolling window holds the first resumed step
        trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, callbacks=[callback, *callbacks], limit_val_batches=0,
                            default_root_dir=tmp_path)
        trainer.fit(task, datamodule=data, ckpt_path=ckpt_path, weights_only=False)  # our own checkpoint
        return trainer, callback, len(data.datasets["train"])

    with pytest.raises(Stop):
        fit(SaveAndStop())
    start = time.perf_counter()
    trainer, callback, train_rows = fit(ckpt_path=tmp_path / "mid.ckpt")
    seconds = time.perf_counter() - start
    assert trainer.global_step > 5 and callback._epoch_samples == train_rows - 5 * 16  # the rest of the epoch
    assert trainer.callback_metrics["train/samples_per_s_epoch"] >= callback._epoch_samples / seconds
    assert trainer.progress_bar_metrics["train/samples_per_s"] >= callback._epoch_samples / seconds  # so does the window
