"""``fit_summary.json``: why and when fitting stopped, how long the sitting took, and the best checkpoint."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint


def checkpoint_callback(trainer: L.Trainer) -> ModelCheckpoint | None:
    """The run's first ModelCheckpoint (None without one)."""
    return next((cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint)), None)


def stop_reason(trainer: L.Trainer) -> str:
    """Why fitting ended: early stopping, the step or epoch budget, else an interruption or Lightning's max_time."""
    if any(isinstance(cb, EarlyStopping) and cb.stopped_epoch > 0 for cb in trainer.callbacks):
        return "early_stopping"
    if trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps:
        return "max_steps"
    if trainer.max_epochs not in (None, -1) and trainer.current_epoch >= trainer.max_epochs:
        return "max_epochs"
    return "interrupted_or_time_limit"  # Lightning's trainer.max_time: resume with --ckpt_path last


def fit_summary(trainer: L.Trainer, seconds: float, start_step: int, start_epoch: int,
                status: str | None = None) -> dict[str, Any]:
    """Why and when fitting stopped (``status``, else ``stop_reason``), and this sitting's length and pace, for
    results tables and time estimates: the steps and epochs it trained since ``start_step`` / ``start_epoch``,
    ``seconds / max(epochs, 1)`` and ``seconds / max(steps, 1)`` (validations included)."""
    best = checkpoint_callback(trainer)
    steps, epochs = trainer.global_step - start_step, trainer.current_epoch - start_epoch
    return {
        "status": status if status is not None else stop_reason(trainer),
        "epochs": trainer.current_epoch,
        "global_step": trainer.global_step,
        "seconds_this_sitting": round(seconds, 1),
        "steps_this_sitting": steps,
        "seconds_per_epoch": round(seconds / max(epochs, 1), 2),
        "seconds_per_step": round(seconds / max(steps, 1), 4),
        "best_checkpoint": getattr(best, "best_model_path", None) or None,
        "best_score": float(best.best_model_score) if getattr(best, "best_model_score", None) is not None else None,
    }
