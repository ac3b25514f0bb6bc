"""``ValidationPruning`` with a real Optuna study and pruner and a real Lightning Trainer: a trial whose validation
curve is below the median of the earlier ones is stopped after that validation; reports land on the protocol's
cadence (global steps under a step cadence, epochs under an epoch cadence); ``trainer.validate`` is not a point."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from seqrec.callbacks.pruning import ValidationPruning

optuna = pytest.importorskip("optuna", reason="the tune extra is not installed (pip install 'seqrec[tune]')")


class Curve(L.LightningModule):
    """A deterministic toy objective: validation number k logs ``val/score = curve[k]``; training fits one weight."""

    def __init__(self, curve: list[float]) -> None:
        super().__init__()
        self.curve, self.validations = curve, 0
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return (self.weight - batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        return None

    def on_validation_epoch_end(self) -> None:
        self.log("val/score", self.curve[min(self.validations, len(self.curve) - 1)])
        self.validations += 1

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(batches: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.ones(batches, 1)), batch_size=1)


def run(trial, curve: list[float], epochs: int = 4, **trainer_args) -> tuple[ValidationPruning, L.Trainer, Curve]:
    pruning = ValidationPruning(trial, "val/score")
    trainer = L.Trainer(max_epochs=epochs, callbacks=[pruning], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        accelerator="cpu", devices=1, **trainer_args)
    module = Curve(curve)
    trainer.fit(module, train_dataloaders=loader(6), val_dataloaders=loader(1))
    return pruning, trainer, module


def test_a_worse_validation_curve_is_pruned_and_a_better_one_is_not():
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    good = [0.25, 0.375, 0.5, 0.625]

    trial = study.ask()
    pruning, trainer, _ = run(trial, good)
    assert pruning.pruned_at is None and trainer.current_epoch == 4
    study.tell(trial, 0.625)

    trial = study.ask()  # below the median at its first validation: stopped there, after that epoch
    pruning, trainer, module = run(trial, [0.125, 0.875, 0.875, 0.875])
    assert pruning.pruned_at == 0 and module.validations == 1 and trainer.current_epoch == 1
    assert study.trials[1].intermediate_values == {0: 0.125}
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)

    trial = study.ask()  # at or above the median everywhere: runs to the end
    pruning, trainer, module = run(trial, [0.25, 0.5, 0.625, 0.75])
    assert pruning.pruned_at is None and module.validations == 4
    assert study.trials[2].intermediate_values == {0: 0.25, 1: 0.5, 2: 0.625, 3: 0.75}


def test_a_step_cadence_reports_every_validation_at_its_global_step():
    """Three validations in one epoch (every 2 of 6 steps): three points, which an epoch key would fold into one."""
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
    trial = study.ask()
    run(trial, [0.125, 0.25, 0.375], epochs=1, val_check_interval=2, check_val_every_n_epoch=None)
    assert study.trials[0].intermediate_values == {2: 0.125, 4: 0.25, 6: 0.375}


def test_validate_before_fit_is_not_a_point_of_the_curve():
    """``--validate_first``: the step-0 validation of trainer.validate is not reported; fit's first one is, at epoch 0."""
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
    trial = study.ask()
    pruning = ValidationPruning(trial, "val/score")
    trainer = L.Trainer(max_epochs=2, callbacks=[pruning], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        accelerator="cpu", devices=1)
    module = Curve([0.0625, 0.25, 0.375])
    trainer.validate(module, dataloaders=loader(1), verbose=False)
    trainer.fit(module, train_dataloaders=loader(6), val_dataloaders=loader(1))
    assert study.trials[0].intermediate_values == {0: 0.25, 1: 0.375}


def test_a_monitor_the_validation_does_not_log_is_an_error():
    study = optuna.create_study(direction="maximize")
    pruning = ValidationPruning(study.ask(), "val/ndcg@10")
    trainer = L.Trainer(max_epochs=1, callbacks=[pruning], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        accelerator="cpu", devices=1)
    with pytest.raises(ValueError, match=r"'val/ndcg@10', which this validation did not log \(logged: \['val/score'\]\)"):
        trainer.fit(Curve([0.1]), train_dataloaders=loader(2), val_dataloaders=loader(1))
