"""Every private Lightning member seqrec reads still exists and means what it did: each is read on a real fit.

A failure here after a Lightning upgrade names the member to port in ``seqrec/lightning_private.py``.
"""

import inspect

import lightning as L
import pytest
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel

from seqrec import lightning_private as private


class Probe(Callback):
    """Records what each private reader returns after every training batch and at each epoch's end."""

    def __init__(self) -> None:
        self.after_batch: list[tuple[int, bool, bool, int]] = []
        self.saved_steps: list[tuple[int, int, bool]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.after_batch.append((trainer.global_step, private.validation_follows(trainer),
                                 private.is_last_batch(trainer), private.batches_processed(trainer)))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        keeper = trainer.checkpoint_callback
        self.saved_steps.append((trainer.global_step, private.last_global_step_saved(keeper),
                                 private.saves_on_train_epoch_end(keeper, trainer)))


def _fit(tmp_path, **trainer_args) -> tuple[Probe, ModelCheckpoint]:
    # seeded: the keeper saves at the second epoch's end only when valid_loss improved, which about one global
    # random state in ten does not give; unseeded, the result hung on the tests run before in the same process
    L.seed_everything(0, verbose=False)
    probe = Probe()
    keeper = ModelCheckpoint(dirpath=tmp_path, monitor="valid_loss", save_last=True)
    trainer = L.Trainer(default_root_dir=tmp_path, max_epochs=2, limit_train_batches=4, limit_val_batches=1,
                        logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[keeper, probe], **trainer_args)

    class Model(BoringModel):
        def validation_step(self, batch, batch_idx):
            loss = super().validation_step(batch, batch_idx)["x"]
            self.log("valid_loss", loss)

    trainer.fit(Model())
    return probe, keeper


def test_validation_cadence_last_batch_and_batch_count_on_a_step_cadence(tmp_path):
    probe, _ = _fit(tmp_path, val_check_interval=2)
    # (global step, a validation follows, last batch of the epoch, batches processed in the epoch)
    assert probe.after_batch == [(1, False, False, 1), (2, True, False, 2), (3, False, False, 3), (4, True, True, 4),
                                 (5, False, False, 1), (6, True, False, 2), (7, False, False, 3), (8, True, True, 4)]


def test_modelcheckpoint_saving_point_and_last_saved_step(tmp_path):
    probe, keeper = _fit(tmp_path, check_val_every_n_epoch=1)
    # every epoch validates: ModelCheckpoint saves at the training epoch's end (after that epoch's validation
    # there is nothing more to wait for), and its last save is the step of the previous epoch end until then
    assert [saves for _, _, saves in probe.saved_steps] == [True, True]
    assert [(step, last) for step, last, _ in probe.saved_steps] == [(4, 0), (8, 4)]
    assert private.last_global_step_saved(keeper) == 8
    probe, _ = _fit(tmp_path / "every2", check_val_every_n_epoch=2)
    assert [saves for _, _, saves in probe.saved_steps] == [False, False]


def test_validation_follows_is_false_outside_a_fit():
    assert private.validation_follows(L.Trainer(logger=False)) is False


def test_the_version_counter_is_the_constructor_argument(tmp_path):
    keeper = ModelCheckpoint(dirpath=tmp_path)
    assert "enable_version_counter" in inspect.signature(ModelCheckpoint).parameters
    assert keeper._enable_version_counter is True
    private.disable_version_counter(keeper)
    assert keeper._enable_version_counter is ModelCheckpoint(enable_version_counter=False)._enable_version_counter


def test_wandb_init_arguments_drop_an_unset_anonymous(tmp_path):
    pytest.importorskip("wandb")
    from lightning.pytorch.loggers import WandbLogger

    logger = WandbLogger(save_dir=str(tmp_path), offline=True)
    assert "anonymous" in logger._wandb_init
    private.drop_wandb_anonymous(logger)
    assert "anonymous" not in logger._wandb_init


@pytest.mark.parametrize(("cls", "name"), private.OVERRIDDEN, ids=lambda v: getattr(v, "__name__", v))
def test_private_methods_seqrec_overrides_still_exist(cls, name):
    assert callable(getattr(cls, name, None)), f"Lightning's {cls.__name__}.{name} is gone: port seqrec's override"
