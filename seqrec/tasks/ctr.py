"""One LightningModule for CTR models: binary cross-entropy, AUC / GAUC / Logloss on validation and test.

The injected ``model`` maps ``history (B, L)`` and ``targets (B, C)`` to click logits (B, C)
(``CTRTransformer``, ``CTRLRU``, or a compression wrapper around the transformer). Training batches come
either as samples (``history``, ``targets``, ``labels``) or as windows (``items``, ``targets``,
``labels``, ``target_mask``; the model's ``forward_windows`` scores every position in one pass).
Evaluation logs ``val/auc``, ``val/gauc``, ``val/logloss`` (``test/...``), and at test end the cost of
a request where the model reports it: ``cost/macs_per_request`` (scoring one target from the stored
state of a full history of the data's max_len; ``cost/state_bytes_per_user`` comes from the memory callback).
"""

from __future__ import annotations

from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqrec.metrics.ctr import CTRMetrics, GAUCWeighting
from seqrec.tasks.optim import build_optimizer
from seqrec.tasks.padding import drop_padding


def trim_padding(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Drop the leading columns that are padding in every row (exact: padding never influences a score).

    Histories are pre-padded, so a batch of short histories needs only its longest row's width.
    """
    key = "items" if "items" in batch else "history"
    real = (batch[key] > 0).any(dim=0)
    if not bool(real.any()):
        return batch
    start = int(real.to(torch.int8).argmax())
    if start == 0:
        return batch
    out = dict(batch)
    out[key] = batch[key][:, start:]
    if key == "items":  # windows: the per-position targets shrink with the inputs
        for name in ("targets", "labels", "target_mask"):
            out[name] = batch[name][:, start:]
    return out


class CTRTask(L.LightningModule):
    """Trains a CTR ``model`` with BCE and evaluates AUC, GAUC (per-user, impression-weighted) and Logloss.

    Optimiser: Adam or AdamW; parameters whose names contain any of ``no_decay`` get no weight decay.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: Literal["adam", "adamw"] = "adam",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        no_decay: list[str] | None = None,
        gauc_weighting: GAUCWeighting = "impressions",
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["model"])
        self.model = model
        self.val_metrics = CTRMetrics(gauc_weighting)
        self.test_metrics = CTRMetrics(gauc_weighting)

    def setup(self, stage: str) -> None:
        """Fail early when the data's catalogue and the model's vocabulary disagree."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        data_items = getattr(datamodule, "num_items", None)
        model_items = getattr(self.model, "num_items", None)
        if data_items is not None and model_items is not None and data_items != model_items:
            raise ValueError(
                f"the data has {data_items} items but the model was built for {model_items}: "
                "leave num_items unset in the config so the CLI links it from the data"
            )

    def _check_ids(self, *tensors: Tensor) -> None:
        n = self.model.num_items
        for t in tensors:
            if t.numel() and (int(t.min()) < 0 or int(t.max()) > n):
                raise ValueError(f"item ids {int(t.min())}..{int(t.max())} fall outside the model's 0..{n}")

    # --- training -------------------------------------------------------------------------------
    def loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        """(mean BCE over the batch's valid targets, their number)."""
        batch = trim_padding(drop_padding(batch))
        if "items" in batch:  # windows: every position of the window is a target
            self._check_ids(batch["items"], batch["targets"])
            logits = self.model.forward_windows(batch["items"], batch["targets"])  # (B, L, C)
            mask = batch["target_mask"].unsqueeze(-1).expand_as(logits)
            logits, labels = logits[mask], batch["labels"][mask]
        else:
            self._check_ids(batch["history"], batch["targets"])
            logits = self.model(batch["history"], batch["targets"]).reshape(-1)  # (B·C,)
            labels = batch["labels"].reshape(-1)
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float()), labels.numel()

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """Mean BCE over the batch's (valid) targets."""
        loss, count = self.loss(batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"training loss is {loss.item()} at step {self.global_step}: lower the learning rate or enable "
                "gradient clipping (trainer.gradient_clip_val)"
            )
        self.log("train/loss", loss, prog_bar=True, batch_size=count)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer | None:
        """Adam/AdamW with decay / no-decay groups."""
        hp = self.hparams
        return build_optimizer(self.model.named_parameters(), hp.optimizer, hp.lr, hp.weight_decay, hp.betas, hp.eps,
                               hp.no_decay)

    def macs_probe(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        """What the MACs callback counts for one batch: a training step, or scoring the batch's targets
        (re-encoding each history: the cost of a request without a stored state)."""
        if stage == "train":
            return self.loss(batch)[0]
        return self.model(batch["history"], batch["targets"])

    # --- evaluation -----------------------------------------------------------------------------
    def _update(self, metrics: CTRMetrics, batch: dict[str, Tensor]) -> None:
        batch = trim_padding(drop_padding(batch))
        history, targets, labels = batch["history"], batch["targets"], batch["labels"]  # (B, L), (B, C), (B, C)
        self._check_ids(history, targets)
        logits = self.model(history, targets)  # (B, C)
        C = targets.shape[1]
        users = batch["user"].unsqueeze(1).expand(-1, C)
        index = batch.get("index")
        if index is not None:  # a unique id per impression: sample index · C + column
            index = index.unsqueeze(1) * C + torch.arange(C, device=index.device)
        metrics.update(logits.float(), labels, users, index)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate validation scores."""
        self._update(self.val_metrics, batch)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate test scores."""
        self._update(self.test_metrics, batch)

    def on_validation_epoch_end(self) -> None:
        """Log ``val/auc``, ``val/gauc``, ``val/logloss`` and reset."""
        self._log_metrics("val", self.val_metrics)

    def on_test_epoch_end(self) -> None:
        """Log ``test/...`` and the model's per-request cost where it reports one."""
        self._log_metrics("test", self.test_metrics)
        max_len = getattr(getattr(self.trainer, "datamodule", None), "max_len", None)
        if hasattr(self.model, "macs_per_request"):  # state bytes: the memory callback logs them
            self.log("cost/macs_per_request", float(self.model.macs_per_request(max_len)))

    def _log_metrics(self, prefix: str, metrics: CTRMetrics) -> None:
        values = {f"{prefix}/{name}": value.float() for name, value in metrics.compute().items()}
        self.log_dict(values, prog_bar=prefix == "val")
        metrics.reset()
