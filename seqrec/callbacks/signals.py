"""The run's resume point: ``last.ckpt`` after every validation in ``fit``, and a stop at an exact resume point at
SIGINT/SIGTERM or at the end of the sitting's time (``--sitting_time``), then a non-zero exit.

After every validation, ``last.ckpt`` holds that validation's state. Lightning's ``ModelCheckpoint(save_last=True)``
writes it only when it also wrote a top-k checkpoint (Lightning >= 2.1), so under early stopping a run killed
without a signal (kill -9, the machine lost) went back to its last *improvement*, up to ``patience`` validations
of training lost (10 x 500 steps for the LRURec protocol). ``SignalCheckpoint`` writes ``last.ckpt`` after each
validation that ``ModelCheckpoint`` did not save, wherever a ``ModelCheckpoint`` asks for ``save_last``.

``SignalCheckpoint`` replaces the handlers of both signals while the trainer fits (Lightning's own SIGTERM
handler only sets a flag and later exits with status 0 and no checkpoint). The handler only records the
signal; the callback acts at the next point where the run can be resumed exactly:

- after the current training batch (mid-epoch included): it writes ``<run>/checkpoints/last.ckpt``;
- when that batch is followed by a validation (the cadence's epoch or step), after the validation, so the
  resumed run does not skip it: the checkpoint then holds the validation's result, as the one
  ``ModelCheckpoint`` writes there (this callback runs after ModelCheckpoint's hooks); when that validation
  ends an epoch (or the signal comes during it), at the end of that epoch, after the epoch-end hooks of
  ModelCheckpoint and EarlyStopping;
- when it is the last batch of an epoch and no validation follows, at the end of the epoch (a checkpoint
  taken between the last batch and the epoch's end resumes, but Lightning then counts the next epoch as
  the one it resumed, and a checkpoint taken later in that sitting would resume an epoch early);

and then raises ``Interrupted``, which ``seqrec.fit`` turns into one line and exit status 128 + signal
(130 for SIGINT, 143 for SIGTERM). A second signal exits at once (the previous ``last.ckpt`` is whole:
checkpoints are written atomically). Under several processes every rank stops at the same batch: the
decision is reduced across ranks after every batch.

The sitting's time (``sitting_seconds``, wall time since training started in this process) ends the sitting
the same way, at the first batch end past it: a checkpoint at the next exact resume point, then ``Interrupted``
(``seqrec.fit`` first tests the best checkpoint so far) and exit status 75 (``os.EX_TEMPFAIL``, sysexits'
"temporary failure, try again": here, resume). Lightning's ``trainer.max_time`` is not such a point: at its
stop mid-epoch Lightning runs one more validation (early stopping counts it toward its patience) and the
resumed run's step-cadence validations come one step early (seen on the ML-1M reproduction: validations at
2,540, then 2,998 instead of 2,999); its budget also counts every earlier sitting of the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from seqrec.lightning_private import (
    is_last_batch,
    last_global_step_saved,
    saves_on_train_epoch_end,
    validation_follows,
)
from seqrec.run_files import last_checkpoint

SIGNALS = (signal.SIGINT, signal.SIGTERM)
TIME_UP = 0  # Interrupted's "signal" when the sitting's time ran out (no signal has number 0)


class Interrupted(Exception):
    """Training stopped by a signal (or, ``signum == TIME_UP``, by the sitting's time) after saving ``checkpoint``
    (None when no checkpoint could be written)."""

    def __init__(self, signum: int, checkpoint: Path | None = None, epoch: int | None = None, step: int | None = None) -> None:
        self.signum, self.checkpoint, self.epoch, self.step = signum, checkpoint, epoch, step
        self.name = "the sitting's time limit" if signum == TIME_UP else signal.Signals(signum).name
        if epoch is None:
            super().__init__(f"stopped by {self.name} outside training (nothing to save)")
        else:
            super().__init__(f"stopped by {self.name} at epoch {epoch}, step {step}: checkpoint {checkpoint}")

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process ended by that signal (130, 143); 75 at TIME_UP."""
        return os.EX_TEMPFAIL if self.signum == TIME_UP else 128 + self.signum


def sitting_seconds(text: str) -> float:
    """``--sitting_time`` ``DD:HH:MM:SS`` (Lightning's ``max_time`` format) in seconds; a one-line ValueError otherwise."""
    parts = text.split(":")
    if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--sitting_time {text!r}: must be DD:HH:MM:SS, e.g. 00:02:00:00 for two hours")
    days, hours, minutes, seconds = (int(p) for p in parts)
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"--sitting_time {text!r}: must be longer than 0 (leave it out for no limit)")
    return float(total)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While inside: SIGINT and SIGTERM raise ``Interrupted`` at once (outside training there is nothing to save)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    for signum in SIGNALS:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)


def last_checkpoint_path(trainer: L.Trainer) -> Path:
    """Where this run's ``last.ckpt`` lives: ModelCheckpoint's folder, else ``<log dir>/checkpoints``."""
    for callback in trainer.callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            name = callback.CHECKPOINT_NAME_LAST + callback.FILE_EXTENSION
            return Path(callback.dirpath) / name
    return last_checkpoint(Path(trainer.log_dir or trainer.default_root_dir))


class SignalCheckpoint(Checkpoint):
    """Checkpoint and stop at SIGINT/SIGTERM, or after ``sitting_seconds`` of this sitting, during ``fit`` (module
    docstring).

    A ``Checkpoint`` subclass only so that Lightning runs its hooks after ``ModelCheckpoint``'s.
    """

    def __init__(self, sitting_seconds: float | None = None) -> None:
        if sitting_seconds is not None and sitting_seconds <= 0:
            raise ValueError(f"sitting_seconds {sitting_seconds}: must be positive (or None: no limit)")
        self.sitting_seconds = sitting_seconds
        self._deadline: float | None = None
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._after_validation = False
        self._at_epoch_end = False
        self._trainer: L.Trainer | None = None

    # --- handlers ---------------------------------------------------------------------------------
    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum not in (None, TIME_UP):  # second signal: leave now; the last complete checkpoint stays
            print(f"\n{signal.Signals(signum).name} again: exiting without a new checkpoint", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.signum = signum
        if self._trainer is not None and self._trainer.is_global_zero:
            launcher = self._trainer.strategy.launcher
            if launcher is not None and hasattr(launcher, "kill") and signum == signal.SIGTERM:
                launcher.kill(signum)  # DDP children started by this process stop with it

    @staticmethod
    def _now() -> float:
        """The clock of the sitting's time (a method so that tests can drive it)."""
        return time.monotonic()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the sitting's clock; install the handlers (after Lightning installed its own, which they replace)."""
        self._trainer = trainer
        if self.sitting_seconds is not None:
            self._deadline = self._now() + self.sitting_seconds
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)

    def _restore_handlers(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Give the signals back to their previous handlers."""
        self._restore_handlers()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """Give the signals back to their previous handlers."""
        self._restore_handlers()

    # --- acting on a signal -----------------------------------------------------------------------
    def _pending(self, trainer: L.Trainer) -> bool:
        """True on every rank when any rank received a signal or, after a batch, saw the sitting's time run out."""
        flag = self.signum is not None
        if trainer.world_size > 1:
            flag = bool(trainer.strategy.reduce_boolean_decision(flag, all=False))
            if flag and self.signum is None:
                self.signum = int(signal.SIGTERM)
        if flag or self._deadline is None:
            return flag
        time_up = self._now() >= self._deadline
        if trainer.world_size > 1:  # the ranks' clocks differ: all stop when the first sees it
            time_up = bool(trainer.strategy.reduce_boolean_decision(time_up, all=False))
        if time_up:
            self.signum = TIME_UP
        return time_up

    def _stop(self, trainer: L.Trainer) -> None:
        assert self.signum is not None  # a signal, or TIME_UP
        path = last_checkpoint_path(trainer)
        trainer.save_checkpoint(path)
        for logger in trainer.loggers:
            logger.save()
        raise Interrupted(self.signum, path, trainer.current_epoch, trainer.global_step)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """After a batch: checkpoint and stop, unless a validation follows (then after it)."""
        if not self._pending(trainer):
            return
        if validation_follows(trainer):
            self._after_validation = True
        elif is_last_batch(trainer):
            self._at_epoch_end = True  # Lightning resumes a checkpoint from here ill (its epoch count lags)
        else:
            self._stop(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """``last.ckpt`` where ModelCheckpoint saves at epoch ends; after an epoch no validation followed, at a signal: stop."""
        if self._at_epoch_end:
            self._at_epoch_end = False
            self._stop(trainer)
        if self._saves_at_epoch_end(trainer):
            self._keep_last(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """After a validation inside ``fit`` (and after ModelCheckpoint's save): ``last.ckpt``; at a signal, stop."""
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        if self._after_validation or self._pending(trainer):
            self._after_validation = False
            if is_last_batch(trainer):
                # The validation that ends an epoch: the epoch's own end (ModelCheckpoint's epoch-end save,
                # EarlyStopping's every-epoch check) has not run yet. A checkpoint taken here resumes into that
                # epoch end without the validation's metrics, and EarlyStopping stops the resumed run with
                # "metric not available"; stop at the epoch's end instead, where Lightning itself saves.
                self._at_epoch_end = True
            else:
                self._stop(trainer)
        if not self._saves_at_epoch_end(trainer):
            self._keep_last(trainer)

    @staticmethod
    def _keepers(trainer: L.Trainer) -> list[ModelCheckpoint]:
        return [cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint) and cb.save_last]

    def _saves_at_epoch_end(self, trainer: L.Trainer) -> bool:
        """Whether ModelCheckpoint saves in ``on_train_epoch_end`` (validation every epoch) rather than after validation.

        Lightning's own rule (a private method, ``seqrec.lightning_private``): ``last.ckpt`` is written at the same point as ModelCheckpoint's,
        so that both resume alike and ModelCheckpoint finds its own file there (no ``last-v1.ckpt`` beside it).
        """
        return any(saves_on_train_epoch_end(cb, trainer) for cb in self._keepers(trainer))

    def _keep_last(self, trainer: L.Trainer) -> None:
        """Write ``last.ckpt`` at this step unless ``ModelCheckpoint`` just did (only where one asks for it)."""
        keepers = self._keepers(trainer)
        if not keepers or any(last_global_step_saved(cb) == trainer.global_step for cb in keepers):
            return
        path = last_checkpoint_path(trainer)
        for callback in keepers:  # as ModelCheckpoint does before its own save: the path is part of the state
            callback.last_model_path = str(path)
        trainer.save_checkpoint(path)

    # Checkpoint's state: nothing to save
    def state_dict(self) -> dict[str, Any]:
        """No state."""
        return {}
