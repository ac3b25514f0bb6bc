"""Every private Lightning member seqrec relies on, one small function each (read against Lightning 2.6.6; pyproject
allows 2.4-2.6, and the tests below run against whichever is installed).

Resume exactness needs a few of Lightning's internal decisions (does a validation follow this batch? did
ModelCheckpoint just save?) that have no public API. They are read here only, so that a Lightning upgrade that
renames one breaks one function, and ``tests/test_lightning_private.py`` (which runs each on a real fit) fails
loudly naming it. Where a public constructor argument exists it is used instead (``ModelCheckpoint``'s
``enable_version_counter`` is a constructor argument; ``disable_version_counter`` changes it on a callback that
already exists, for a resumed sitting only).

``OVERRIDDEN`` lists the private methods seqrec's own subclasses override (``seqrec.loggers.run_logger``).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.fabric.loggers.csv_logs import CSVLogger as FabricCSVLogger
from lightning.fabric.loggers.csv_logs import _ExperimentWriter
from lightning.pytorch.callbacks import ModelCheckpoint

# (class, private method) pairs that seqrec's subclasses override; each must still exist on the class
OVERRIDDEN: tuple[tuple[type, str], ...] = (
    (FabricCSVLogger, "_get_next_version"),  # RunLogger: claim version_N by creating its folder
    (_ExperimentWriter, "_check_log_dir_exists"),  # AppendingWriter: keep metrics.csv across sittings
    (_ExperimentWriter, "_rewrite_with_new_header"),  # AppendingWriter: rewrite it atomically
)


def validation_follows(trainer: L.Trainer) -> bool:
    """Whether Lightning validates right after the training batch that just ended (its own rule).

    ``fit_loop.epoch_loop._should_check_val_fx(fit_loop._data_fetcher)`` (Lightning 2.6); False outside a fit.
    Used by ``SignalCheckpoint`` to stop after that validation, not before it.
    """
    loop = trainer.fit_loop
    try:
        return bool(loop.epoch_loop._should_check_val_fx(loop._data_fetcher))
    except (AttributeError, TypeError):
        return False


def is_last_batch(trainer: L.Trainer) -> bool:
    """Whether the training batch that just ended is the epoch's last.

    ``fit_loop.epoch_loop.batch_progress.is_last_batch`` (Lightning 2.6; the loop classes are private).
    Used by ``SignalCheckpoint``: a checkpoint there resumes ill, so it stops at the epoch's end.
    """
    return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)


def batches_processed(trainer: L.Trainer) -> int:
    """Training batches processed in the current epoch (restored from a checkpoint on resume).

    ``fit_loop.epoch_loop.batch_progress.current.processed`` (Lightning 2.6). Used by the resumable samplers
    of ``seqrec.datamodules.loaders`` to skip what the interrupted epoch already trained on.
    """
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)


def saves_on_train_epoch_end(callback: ModelCheckpoint, trainer: L.Trainer) -> bool:
    """Whether ``callback`` saves in ``on_train_epoch_end`` rather than after validation.

    ``ModelCheckpoint._should_save_on_train_epoch_end(trainer)`` (Lightning 2.6). ``SignalCheckpoint`` writes
    ``last.ckpt`` at the same point, so both resume alike.
    """
    return bool(callback._should_save_on_train_epoch_end(trainer))


def last_global_step_saved(callback: ModelCheckpoint) -> int:
    """The global step of ``callback``'s latest save (0 before any).

    ``ModelCheckpoint._last_global_step_saved`` (Lightning 2.6). ``SignalCheckpoint`` does not write
    ``last.ckpt`` again at a step ModelCheckpoint just saved.
    """
    return int(callback._last_global_step_saved)


def disable_version_counter(callback: ModelCheckpoint) -> None:
    """Make an existing ``callback`` overwrite a file of the same name instead of writing ``...-v1.ckpt`` beside it.

    ``ModelCheckpoint._enable_version_counter`` (Lightning 2.6; the constructor's ``enable_version_counter``).
    A resumed sitting overwrites the files the interrupted one wrote from the same state; a new run keeps the
    counter on (the constructor's default), so runs sharing a checkpoint folder never overwrite each other.
    """
    callback._enable_version_counter = False


def drop_wandb_anonymous(logger: Any) -> None:
    """Remove an unset ``anonymous`` from a WandbLogger's init arguments (wandb warns that it is deprecated).

    ``WandbLogger._wandb_init`` (Lightning 2.6), the keyword arguments its ``wandb.init`` call receives.
    """
    if logger._wandb_init.get("anonymous") is None:
        logger._wandb_init.pop("anonymous", None)
