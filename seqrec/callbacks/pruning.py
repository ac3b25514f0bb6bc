"""``ValidationPruning``: report the monitored validation metric of every validation of ``fit`` to an Optuna
trial and stop the fit when the study's pruner says the trial's validation curve is not worth continuing.

Optuna's own Lightning callback (``optuna_integration.PyTorchLightningPruningCallback``, 4.9) imports and runs
with the ``lightning`` package, but three of its choices do not fit a seqrec run, so this small one replaces it:

- it reports at ``step = current_epoch``: under a step cadence (the LRURec protocols validate every N steps,
  LM1B and XLong every 2,000) several validations fall in one epoch, and Optuna ignores every report after the
  first at a step, so the pruner would judge a long run by one point per epoch. Here the step is the
  protocol's own unit: the epoch when it validates every n epochs, the global step when it validates every n
  steps, so trials of one protocol are compared at the same points of their curves;
- it also reports the validation that ``trainer.validate`` runs before training (``--validate_first``, LRURec's
  step-0 validation) as epoch 0, so that the first validation of training (epoch 0 under an epoch cadence)
  is ignored as a repeat; here only the validations of ``fit`` are points of the curve;
- it raises ``TrialPruned`` inside ``Trainer.fit``; a seqrec run then ends as a failure (its report, its
  ``fit_summary.json`` and its logger's close are skipped). Here the callback stops the fit as early stopping
  does (``trainer.should_stop``, after this validation's checkpoints are written), the run ends normally and
  ``seqrec.tune`` marks the trial pruned.

One process per trial: ``seqrec.tune`` refuses multi-process trials (the pruning decision is not broadcast).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

if TYPE_CHECKING:  # the callback only calls report/should_prune: no optuna import at run time
    import optuna


def curve_position(trainer: L.Trainer) -> int:
    """Where a validation lies on the protocol's cadence: the epoch (every n epochs) or the global step (every n steps)."""
    return trainer.global_step if trainer.check_val_every_n_epoch is None else trainer.current_epoch


class ValidationPruning(Callback):
    """After every validation of ``fit``: ``trial.report(monitor, curve_position)``; stop the fit if the pruner says so.

    ``pruned_at`` is the curve position of the validation after which the trial was pruned (None: not pruned).
    """

    def __init__(self, trial: optuna.trial.Trial, monitor: str) -> None:
        super().__init__()
        self.trial, self.monitor = trial, monitor
        self.pruned_at: int | None = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Report this validation's value; set ``trainer.should_stop`` when the pruner prunes the trial."""
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or self.pruned_at is not None:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise ValueError(f"pruning monitors {self.monitor!r}, which this validation did not log "
                             f"(logged: {sorted(trainer.callback_metrics)})")
        position = curve_position(trainer)
        self.trial.report(float(value), position)
        if self.trial.should_prune():
            self.pruned_at = position
            trainer.should_stop = True
