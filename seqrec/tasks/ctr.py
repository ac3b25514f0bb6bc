"""One LightningModule for CTR models: binary cross-entropy, AUC / GAUC / Logloss on validation and test.

The injected network ``net`` maps ``history (B, L)`` and ``targets (B, C)`` to click logits (B, C)
(``CTRTransformer``, ``CTRLRU``, or a compression wrapper around the transformer). Training batches come
either as samples (``history``, ``targets``, ``labels``) or as windows (``items``, ``targets``,
``labels``, ``target_mask``; the model's ``forward_windows`` scores every position in one pass).
Evaluation logs ``val/auc``, ``val/gauc``, ``val/logloss`` (``test/...``), and at test end the cost of
a request where the model reports it: ``cost/macs_per_request`` (scoring one target from the stored
state of a full history of the data's max_len; ``cost/state_bytes_per_user`` comes from the memory callback).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqrec.datamodules.base import RecommendationData
from seqrec.metrics.ctr import CTRMetrics, GAUCWeighting
from seqrec.models.base import DeclaresRequestMACs, leading_padding
from seqrec.tasks.base import RecommendationTask
from seqrec.tasks.padding import drop_padding


def trim_padding(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Drop the leading columns that are padding in every row (exact: padding never influences a score).

    Histories are pre-padded, so a batch of short histories needs only its longest row's width.
    """
    key = "items" if "items" in batch else "history"
    start = leading_padding(batch[key])
    if start == 0 or start == batch[key].shape[1]:
        return batch
    out = dict(batch)
    out[key] = batch[key][:, start:]
    if key == "items":  # windows: the per-position targets shrink with the inputs
        for name in ("targets", "labels", "target_mask"):
            out[name] = batch[name][:, start:]
    return out


class CTRTask(RecommendationTask):
    """Trains a CTR network ``net`` with BCE and evaluates AUC, GAUC (per-user, impression-weighted) and Logloss.

    Declares ``ProbesMACs`` (``seqrec.tasks.base``). Optimiser settings (``optimizer``, ``lr``, ``weight_decay``,
    ``betas``, ``eps``, ``no_decay``): see ``RecommendationTask``.
    """

    def __init__(
        self,
        net: nn.Module,
        gauc_weighting: GAUCWeighting = "impressions",
        **optimizer_args: Any,
    ) -> None:
        super().__init__(net, **optimizer_args)
        self.save_hyperparameters(ignore=["net"])
        self.val_metrics = CTRMetrics(gauc_weighting)
        self.test_metrics = CTRMetrics(gauc_weighting)

    # --- training -------------------------------------------------------------------------------
    def loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        """(mean BCE over the batch's valid targets, their number)."""
        batch = trim_padding(drop_padding(batch))
        if "items" in batch:  # windows: every position of the window is a target
            self.check_ids(batch["items"], batch["targets"])
            logits = self.net.forward_windows(batch["items"], batch["targets"])  # (B, L, C)
            mask = batch["target_mask"].unsqueeze(-1).expand_as(logits)
            logits, labels = logits[mask], batch["labels"][mask]
        else:
            self.check_ids(batch["history"], batch["targets"])
            logits = self.net(batch["history"], batch["targets"]).reshape(-1)  # (B·C,)
            labels = batch["labels"].reshape(-1)
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float()), labels.numel()

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """Mean BCE over the batch's (valid) targets."""
        loss, count = self.loss(batch)
        self.check_finite(loss)
        self.log("train/loss", loss, prog_bar=True, batch_size=count)
        return loss

    def macs_probe(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        """What the MACs callback counts for one batch: a training step, or scoring the batch's targets
        (re-encoding each history: the cost of a request without a stored state)."""
        if stage == "train":
            return self.loss(batch)[0]
        return self.net(batch["history"], batch["targets"])

    # --- evaluation -----------------------------------------------------------------------------
    def _update(self, metrics: CTRMetrics, batch: dict[str, Tensor]) -> None:
        batch = trim_padding(drop_padding(batch))
        history, targets, labels = batch["history"], batch["targets"], batch["labels"]  # (B, L), (B, C), (B, C)
        self.check_ids(history, targets)
        logits = self.net(history, targets)  # (B, C)
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
        self.log_metrics("val", self.val_metrics)

    def on_test_epoch_end(self) -> None:
        """Log ``test/...`` and the model's per-request cost where it reports one."""
        self.log_metrics("test", self.test_metrics)
        if isinstance(self.net, DeclaresRequestMACs):  # state bytes: the memory callback logs them
            data = self.trainer.datamodule
            max_len = data.max_len if isinstance(data, RecommendationData) else None  # None: the model's own
            self.log("cost/macs_per_request", float(self.net.macs_per_request(max_len)))
