"""One LightningModule for every next-item model: training loss, full or sampled ranking, exact metrics."""

from __future__ import annotations

import math
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqrec.metrics.ranking import RankingMetrics, rank_of_target
from seqrec.tasks.optim import build_optimizer
from seqrec.tasks.padding import drop_padding

DEFAULT_METRICS = ["hr@10", "ndcg@10", "mrr@10", "hr@20", "ndcg@20", "map@20"]


def full_catalogue_ranks(
    model: nn.Module,
    hidden: Tensor,
    target: Tensor,
    history: Tensor | None,
    chunk_size: int,
) -> Tensor:
    """1-based rank of each target among all items 1..N, scored in item chunks.

    hidden (B, d), target (B,), history (B, L) ids to exclude (None: mask nothing). Memory is
    O(B · chunk_size) whatever the catalogue size. Excluded from the count: the padding id, the items in
    ``history``, and the target's own column. With one target per query the rank is all a metric needs,
    so a running count of higher-scored items replaces a running top-k.
    """
    target_scores = model.score(hidden, target.unsqueeze(-1)).squeeze(-1)  # (B,)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    above = torch.zeros_like(target)
    num_rows = model.num_items + 1
    for start in range(0, num_rows, chunk_size):
        stop = min(start + chunk_size, num_rows)
        scores = model.score_chunk(hidden, start, stop).clone()  # (B, C)
        if start == 0:
            scores[:, 0] = -math.inf
        if history is not None:
            inside = (history >= start) & (history < stop)  # (B, L)
            r, c = inside.nonzero(as_tuple=True)
            scores[r, history[r, c] - start] = -math.inf
        own = (target >= start) & (target < stop)
        scores[rows[own], target[own] - start] = -math.inf
        above += (scores > target_scores.unsqueeze(-1)).sum(dim=-1)
    return above + 1


class NextItemTask(L.LightningModule):
    """Trains a next-item ``model`` and evaluates it by ranking.

    Loss "ce": full-softmax cross-entropy over the catalogue at every labelled position
    (LRURec, and SASRec under LRURec's protocol); the padding column is excluded from the softmax.
    Loss "bce": SASRec's binary cross-entropy, −log σ(s_pos) − Σ_neg log(1 − σ(s_neg)) with
    ``num_negatives`` uniform negatives per position (redrawn where one equals the positive).
    Evaluation: the target's rank among the full catalogue (history masked when ``mask_history``) or
    among the batch's frozen ``candidates``; metrics are sums and counts (exact under DDP).

    Optimiser: Adam or AdamW; parameters whose names contain any of ``no_decay`` get no weight decay
    (LRURec: "bias" and "layer_norm"; embeddings are decayed).
    """

    def __init__(
        self,
        model: nn.Module,
        loss: Literal["ce", "bce"] = "ce",
        num_negatives: int = 1,
        optimizer: Literal["adam", "adamw"] = "adam",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        no_decay: list[str] | None = None,
        metrics: list[str] | None = None,
        mask_history: bool = True,
        score_chunk_size: int = 65536,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["model"])
        self.model = model
        self.loss_kind, self.num_negatives = loss, num_negatives
        self.mask_history = mask_history
        self.score_chunk_size = score_chunk_size
        names = metrics or DEFAULT_METRICS
        self.val_metrics = RankingMetrics(names)
        self.test_metrics = RankingMetrics(names)

    # --- checks ---------------------------------------------------------------------------------
    def _check_ids(self, *tensors: Tensor) -> None:
        n = self.model.num_items
        for t in tensors:
            if t.numel() and (int(t.min()) < 0 or int(t.max()) > n):
                raise ValueError(
                    f"item id out of range: found ids {int(t.min())}..{int(t.max())} but the model's "
                    f"vocabulary is 0..{n} (0 = padding). The model's num_items must equal the data's."
                )

    def setup(self, stage: str) -> None:
        """Fail early when the data's catalogue and the model's vocabulary disagree."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        data_items = getattr(datamodule, "num_items", None)
        if data_items is not None and data_items != self.model.num_items:
            raise ValueError(
                f"the data has {data_items} items but the model was built for {self.model.num_items}: "
                "leave model.init_args.num_items unset so the CLI links it from the data"
            )
        if getattr(self.model, "uses_item_features", False) and datamodule is not None:
            # feature models (MLP4Rec) hold the item-feature tables as buffers, copied once from the data
            tables = getattr(datamodule, "item_feature_tables", None)
            self.model.set_item_features(tables() if tables is not None else {})

    # --- training -------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor | None:
        """Loss over labelled positions; a model without parameters (popularity) just counts labels."""
        items, labels = batch["items"], batch["labels"]  # (B, L), (B, L)
        self._check_ids(items, labels)
        if not getattr(self.model, "causal", True) and bool((labels[:, :-1] > 0).any()):
            raise ValueError(
                "the model is not causal (each position sees later items) but the batch has labels before the "
                "last position, which later inputs would reveal: use data.train_mode: prefix, or causal: true"
            )
        if not any(p.requires_grad for p in self.model.parameters()):
            self.model.observe(labels)
            return None
        hidden = self.model(items)  # (B, L, d)
        labelled = labels > 0  # (B, L)
        h = hidden[labelled]  # (P, d)
        y = labels[labelled]  # (P,)
        if self.loss_kind == "ce":
            logits = self.model.score(h).float()  # (P, N+1)
            logits[:, 0] = -math.inf
            loss = F.cross_entropy(logits, y)
        else:
            negatives = torch.randint(1, self.model.num_items + 1, (y.shape[0], self.num_negatives), device=y.device)
            clash = negatives == y.unsqueeze(-1)
            negatives = torch.where(clash, negatives % self.model.num_items + 1, negatives)  # (P, K)
            pos = self.model.score(h, y.unsqueeze(-1)).float()  # (P, 1)
            neg = self.model.score(h, negatives).float()  # (P, K)
            loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
            loss = loss + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="sum")
            loss = loss / y.shape[0]
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"training loss is {loss.item()} at step {self.global_step}: lower the learning rate, "
                "enable gradient clipping (trainer.gradient_clip_val) or check the data; the last saved "
                "checkpoint is intact"
            )
        self.log("train/loss", loss, prog_bar=True, batch_size=y.shape[0])
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer | None:
        """Adam/AdamW with decay/no-decay parameter groups; None for parameter-free models."""
        hp = self.hparams
        return build_optimizer(self.model.named_parameters(), hp.optimizer, hp.lr, hp.weight_decay, hp.betas, hp.eps,
                               hp.no_decay)

    # --- evaluation -----------------------------------------------------------------------------
    def ranks(self, batch: dict[str, Tensor]) -> Tensor:
        """1-based rank of each query's target: among its candidates, or among the full catalogue."""
        items, target = batch["items"], batch["target"]  # (B, L), (B,)
        self._check_ids(items, target)
        hidden = self.model(items)[:, -1]  # (B, d): the newest position (left padding)
        if "candidates" in batch:
            candidates = batch["candidates"]  # (B, C)
            self._check_ids(candidates)
            target_scores = self.model.score(hidden, target.unsqueeze(-1)).squeeze(-1)  # (B,)
            return rank_of_target(self.model.score(hidden, candidates), target_scores)
        history = items if self.mask_history else None
        return full_catalogue_ranks(self.model, hidden, target, history, self.score_chunk_size)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate validation ranks."""
        self.val_metrics.update(self.ranks(drop_padding(batch)))

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate test ranks."""
        self.test_metrics.update(self.ranks(drop_padding(batch)))

    def on_validation_epoch_end(self) -> None:
        """Log ``val/<metric>`` (computed from global sums and counts) and reset."""
        self._log_metrics("val", self.val_metrics)

    def on_test_epoch_end(self) -> None:
        """Log ``test/<metric>`` and reset."""
        self._log_metrics("test", self.test_metrics)

    def _log_metrics(self, prefix: str, metric: RankingMetrics) -> None:
        values = {f"{prefix}/{name}": value.float() for name, value in metric.compute().items()}
        self.log_dict(values, prog_bar=prefix == "val")
        metric.reset()
