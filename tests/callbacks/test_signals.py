"""SIGTERM/SIGINT (or the end of --sitting_time) during fit: a checkpoint at the signal (end of an epoch without
validation; after the validation that follows the batch), one line, exit 143/130 (75), and a resumed run equal to
an uninterrupted one."""

import csv
import json
import signal

import pytest
import torch
from lightning.pytorch.callbacks import Callback

import seqrec.fit
from seqrec.callbacks.signals import Interrupted, SignalCheckpoint, stop_on_signals
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
    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN in a pytest-xdist worker
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
    assert signal.getsignal(signal.SIGINT) is before  # handlers given back


def test_outside_training_a_signal_stops_at_once():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted, match="stopped by SIGTERM outside training"), stop_on_signals():
        signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


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


class BatchClock(Callback):
    """The sitting's clock for ``SignalCheckpoint._now``: 0 when training starts, one second per training batch."""

    now = 0.0

    def on_train_start(self, trainer, pl_module):
        BatchClock.now = 0.0  # runs before SignalCheckpoint's on_train_start (Checkpoint callbacks come last)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        BatchClock.now += 1.0


def validation_steps(run) -> list[int]:
    with open(run / "metrics.csv", newline="") as handle:
        return [int(row["step"]) for row in csv.DictReader(handle) if row.get("val/ndcg@10")]


def test_the_sitting_time_ends_a_sitting_at_an_exact_resume_point(ml100k_root, tmp_path, monkeypatch, capsys):
    """--sitting_time stops where a signal would (after the validation that follows the batch, else after the batch),
    tests the best so far, exits 75; the sittings together equal one uninterrupted run, validations included.
    (Lightning's trainer.max_time validates once more at its stop and shifts the resumed cadence.)"""
    build = seqrec.fit.build

    def build_with_clock(*args, **kwargs):
        run = build(*args, **kwargs)
        run.trainer.callbacks.append(BatchClock())
        return run

    monkeypatch.setattr(seqrec.fit, "build", build_with_clock)
    monkeypatch.setattr(SignalCheckpoint, "_now", staticmethod(lambda: BatchClock.now))
    every_5 = ("--trainer.max_epochs", "3", "--trainer.check_val_every_n_epoch", "null", "--trainer.val_check_interval", "5")
    whole = main(tiny(ml100k_root, tmp_path / "whole", *every_5))  # 8 batches an epoch, 24 in all
    args = tiny(ml100k_root, tmp_path / "split", *every_5)
    run = tmp_path / "split" / "sasrec_ml100k" / "version_0"
    for limit, resume, step, epoch in (("00:00:00:05", [], 5, 0), ("00:00:00:06", ["--ckpt_path", "last"], 11, 1)):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main(args + ["--sitting_time", limit, *resume])
        [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("stopped by")]
        assert exit_info.value.code == 75
        assert line.startswith(f"stopped by the sitting's time limit at epoch {epoch}, step {step}: checkpoint")
        assert line.endswith(f"resume with the same command and --ckpt_path {run}")
        assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == step
        assert json.loads((run / "fit_summary.json").read_text())["status"] == "sitting_time_limit"
        assert json.loads((run / "test_metrics.json").read_text())["test/ndcg@10"] > 0  # the best so far, tested
    assert validation_steps(run) == [4, 9]  # step 5 is followed by a validation: it ran before the stop, once
    resumed = main(args + ["--ckpt_path", "last"])
    assert resumed == whole
    assert validation_steps(run) == validation_steps(tmp_path / "whole" / "sasrec_ml100k" / "version_0") == [4, 9, 14, 19]


@pytest.mark.parametrize("value", ["2h", "00:00:00:00", "00:01:00"])
def test_a_sitting_time_that_is_not_a_duration_is_one_line(ml100k_root, tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        main(tiny(ml100k_root, tmp_path, "--sitting_time", value))
    assert exit_info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: --sitting_time {value!r}: must be")


def test_a_signal_during_the_validation_that_ends_an_epoch_stops_at_the_epoch_end(ml100k_root, tmp_path, monkeypatch,
                                                                                  capsys):
    """Every-epoch cadence, SIGTERM while the validation after epoch 0 runs: a stop there used to checkpoint before
    the epoch-end hooks, and the resumed run failed in EarlyStopping ("val/ndcg@10 ... not available")."""
    every_epoch = ("--trainer.max_epochs", "3")
    whole = main(tiny(ml100k_root, tmp_path / "whole", *every_epoch))
    args = tiny(ml100k_root, tmp_path / "split", *every_epoch)
    run = tmp_path / "split" / "sasrec_ml100k" / "version_0"
    build = seqrec.fit.build

    def build_with_fault(*a, **k):
        built = build(*a, **k)
        built.trainer.callbacks.append(FaultAt("SIGTERM", "val_batch", 1))
        return built

    with monkeypatch.context() as patch:
        patch.setattr(seqrec.fit, "build", build_with_fault)
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main(args)
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("stopped by")]
    assert exit_info.value.code == 143 and line.startswith("stopped by SIGTERM at epoch 0, step 8")
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 8
    resumed = main(args + ["--ckpt_path", "last"])
    assert resumed == whole
