"""SIGTERM/SIGINT during fit: a checkpoint at the signal (end of an epoch without validation; after the validation
that follows the batch), one line, exit 143/130, and a resumed run equal to an uninterrupted one."""

import csv
import json
import signal

import pytest
import torch

import seqrec.fit
from seqrec.callbacks.signals import Interrupted, stop_on_signals
from seqrec.fit import main
from tests.reliability.faulty import FaultAt
from tests.test_fit import tiny

EVERY_2_EPOCHS = ("--trainer.check_val_every_n_epoch", "2", "--trainer.max_epochs", "4")  # 8 batches an epoch


def with_fault(monkeypatch, what: str, batch: int) -> None:
    """The next fit in this process sends itself ``what`` after its ``batch``-th training batch."""
    build = seqrec.fit.build

    def build_with_fault(*args, **kwargs):
        run = build(*args, **kwargs)
        run.trainer.callbacks.append(FaultAt(what, "train_batch", batch))
        return run

    monkeypatch.setattr(seqrec.fit, "build", build_with_fault)


def stopped(monkeypatch, capsys, args, what: str, batch: int) -> tuple[int, str]:
    with monkeypatch.context() as patch:
        with_fault(patch, what, batch)
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main(args)
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("stopped by")]
    return exit_info.value.code, line


def test_signals_checkpoint_where_they_come_and_the_run_resumes_exactly(ml100k_root, tmp_path, monkeypatch, capsys):
    whole = main(tiny(ml100k_root, tmp_path / "whole", *EVERY_2_EPOCHS))
    args = tiny(ml100k_root, tmp_path / "split", *EVERY_2_EPOCHS)
    run = tmp_path / "split" / "sasrec_ml100k" / "version_0"
    last = run / "checkpoints" / "last.ckpt"
    # SIGTERM after the last batch of epoch 0 (no validation follows): saved there
    code, line = stopped(monkeypatch, capsys, args, "SIGTERM", 8)
    assert code == 143 and line.startswith("stopped by SIGTERM at epoch 0, step 8: checkpoint") and str(run) in line
    assert torch.load(last, weights_only=False)["global_step"] == 8
    assert json.loads((run / "fit_summary.json").read_text())["status"] == "interrupted"
    # SIGINT after batch 16 (the validation of epoch 1 follows): saved after that validation
    code, line = stopped(monkeypatch, capsys, args + ["--ckpt_path", "last"], "SIGINT", 8)
    assert code == 130 and line.startswith("stopped by SIGINT at epoch 1, step 16")
    assert torch.load(last, weights_only=False)["global_step"] == 16
    with open(run / "metrics.csv", newline="") as handle:  # the validation of epoch 1 ran before the save
        assert any(row["val/ndcg@10"] and row["epoch"] == "1" for row in csv.DictReader(handle))
    resumed = main(args + ["--ckpt_path", "last"])
    assert resumed == whole
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers given back


def test_outside_training_a_signal_stops_at_once():
    with pytest.raises(Interrupted, match="stopped by SIGTERM outside training"), stop_on_signals():
        signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("cadence, best_step, last_step", [
    (("--trainer.max_epochs", "3"), 8, 24),  # every epoch: ModelCheckpoint saves at the epoch's end
    (EVERY_2_EPOCHS, 16, 32),  # after the validation
    (("--trainer.max_epochs", "3", "--trainer.check_val_every_n_epoch", "null", "--trainer.val_check_interval", "5"), 5, 20),
])
def test_last_checkpoint_follows_every_validation_even_without_an_improvement(ml100k_root, tmp_path, monkeypatch,
                                                                               cadence, best_step, last_step):
    """kill -9 after a validation that did not improve resumes from that validation, not from the last best."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    build = seqrec.fit.build

    def build_never_improving(*args, **kwargs):
        run = build(*args, **kwargs)
        callbacks = [cb for cb in run.trainer.callbacks if not isinstance(cb, ModelCheckpoint)]
        # "step" with mode min: the first validation stays the best, no later one is saved as top-k
        run.trainer.callbacks = [*callbacks, ModelCheckpoint(monitor="step", mode="min", save_top_k=1, save_last=True)]
        return run

    monkeypatch.setattr(seqrec.fit, "build", build_never_improving)
    main(tiny(ml100k_root, tmp_path, "--test", "false", *cadence))  # 8 batches an epoch
    checkpoints = tmp_path / "sasrec_ml100k" / "version_0" / "checkpoints"
    [best] = checkpoints.glob("epoch=*.ckpt")
    assert sorted(p.name for p in checkpoints.iterdir()) == sorted([best.name, "last.ckpt"])
    assert torch.load(best, weights_only=False)["global_step"] == best_step
    assert torch.load(checkpoints / "last.ckpt", weights_only=False)["global_step"] == last_step
