"""One LightningModule for every next-item model: training loss, full or sampled ranking, exact metrics."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from seqrec.metrics.query_ranks import QueryRanks
from seqrec.metrics.ranking import RankingMetrics, rank_of_target
from seqrec.models.base import ClozeRecommender, CountingRecommender, SequenceRecommender
from seqrec.tasks.base import RecommendationTask
from seqrec.tasks.catalogue import catalogue_scan
from seqrec.tasks.losses import (
    SAMPLED_CHUNK_ROWS,
    auto_chunk_rows,
    fused_cross_entropy,
    sampled_cross_entropy,
)
from seqrec.tasks.padding import drop_padding

DEFAULT_METRICS = ["hr@10", "ndcg@10", "mrr@10", "hr@20", "ndcg@20", "map@20"]


class NextItemTask(RecommendationTask):
    """Trains a next-item network ``net`` and evaluates it by ranking.

    Loss "ce": full-softmax cross-entropy over the catalogue at every labelled position
    (LRURec, and SASRec under LRURec's protocol; for a cloze model, BERT4Rec, the masked positions: the others
    carry label 0); the padding column is excluded from the softmax. By
    default it is fused with the output projection in chunks of ``ce_chunk_rows`` labelled positions
    (``seqrec.tasks.losses``: same loss and gradients, never the whole logits; "auto" sizes a chunk's logits
    to stay in cache, ``auto_chunk_rows``); ``ce_chunk_rows: null`` runs the plain reference path.
    Loss "bce": SASRec's binary cross-entropy, −log σ(s_pos) − Σ_neg log(1 − σ(s_neg)) with
    ``num_negatives`` uniform negatives per position (redrawn where one equals the positive).
    Loss "sampled_ce": softmax over the target and ``num_negatives`` items drawn uniformly from 1..N per labelled
    position (LRURec's XLong loss, ``sampled_cross_entropy``; fused in chunks of ``ce_chunk_rows`` like "ce").
    A batch whose only labels sit at the newest position (``train_mode: prefix``) is encoded with
    ``query_hidden`` (that position alone; the same value as ``forward(items)[:, -1]``), not ``forward``.
    Evaluation: the target's rank among the full catalogue (history masked when ``mask_history``) or
    among the batch's frozen ``candidates``; metrics are sums and counts (exact under DDP).

    Declares ``RanksTargets`` and ``ProbesMACs`` (``seqrec.tasks.base``). Optimiser settings (``optimizer``, ``lr``,
    ``weight_decay``, ``betas``, ``eps``, ``no_decay``): see ``RecommendationTask``.
    """

    net: SequenceRecommender
    mask_history: bool
    score_chunk_size: int

    def __init__(
        self,
        net: SequenceRecommender,
        loss: Literal["ce", "bce", "sampled_ce"] = "ce",
        num_negatives: int = 1,
        metrics: list[str] | None = None,
        mask_history: bool = True,
        score_chunk_size: int = 65536,
        ce_chunk_rows: int | Literal["auto"] | None = "auto",
        **optimizer_args: Any,
    ) -> None:
        super().__init__(net, **optimizer_args)
        self.save_hyperparameters(ignore=["net"])
        rows_ok = ce_chunk_rows in (None, "auto") or (type(ce_chunk_rows) is int and ce_chunk_rows >= 1)
        if not rows_ok:
            raise ValueError(f"ce_chunk_rows must be \"auto\", an integer >= 1 or None (the plain reference path), "
                             f"got {ce_chunk_rows!r}")
        if loss == "sampled_ce" and num_negatives < 1:
            raise ValueError(f"loss sampled_ce needs num_negatives >= 1 (LRURec's XLong: 100), got {num_negatives}")
        self.loss_kind, self.num_negatives = loss, num_negatives
        self.ce_chunk_rows = ce_chunk_rows
        self.mask_history = mask_history
        self.score_chunk_size = score_chunk_size
        names = metrics or DEFAULT_METRICS
        self.val_metrics = RankingMetrics(names)
        self.test_metrics = RankingMetrics(names)
        # each test query's rank by its index, for paired comparisons of runs (fit writes test_ranks.csv)
        self.test_ranks = QueryRanks()
        self.last_test_ranks: Tensor | None = None  # (Q, 2) index, rank of the latest test

    # --- training -------------------------------------------------------------------------------
    def loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        """(training loss over the batch's labelled positions, their number P)."""
        items, labels = batch["items"], batch["labels"]  # (B, L), (B, L)
        self.check_ids(items, inputs=True)
        self.check_ids(labels)
        # a cloze model's labelled positions hold [mask] (or a replacement) in the input: nothing later reveals them
        if not self.net.causal and not isinstance(self.net, ClozeRecommender) and bool((labels[:, :-1] > 0).any()):
            raise ValueError(
                "the model is not causal (each position sees later items) but the batch has labels before the "
                "last position, which later inputs would reveal: use data.train_mode: prefix, or causal: true"
            )
        labelled = labels > 0  # (B, L)
        # a cloze model's query appends its [mask]: its training positions are always read from forward
        if bool(labelled[:, :-1].any()) or isinstance(self.net, ClozeRecommender):
            h = self.net(items)[labelled]  # (P, d) from hidden (B, L, d)
        else:  # one label per row, at the newest position (prefix training): only that position is computed
            h = self.net.query_hidden(items)[labelled[:, -1]]  # (P, d)
        y = labels[labelled]  # (P,)
        if y.numel() == 0:  # no labelled position (a cloze batch may mask none): no loss, no gradient, not NaN
            return h.sum() * 0.0, 0
        if self.loss_kind == "ce" and self.ce_chunk_rows is not None:
            table = self.net.item_embeddings()  # (N+1, d)
            rows = auto_chunk_rows(table.shape[0]) if self.ce_chunk_rows == "auto" else self.ce_chunk_rows
            loss = fused_cross_entropy(h, table, self.net.item_bias(), y, rows, self.matmul_dtype())
        elif self.loss_kind == "sampled_ce":  # target + num_negatives uniform items per position (LRURec, XLong)
            rows = SAMPLED_CHUNK_ROWS if self.ce_chunk_rows == "auto" else self.ce_chunk_rows
            loss = sampled_cross_entropy(h, self.net.item_embeddings(), self.net.item_bias(), y, self.num_negatives,
                                         chunk_rows=rows, matmul_dtype=self.matmul_dtype())
        elif self.loss_kind == "ce":  # the plain reference path: the whole (P, N+1) logits at once
            logits = self.net.score(h).float()  # (P, N+1)
            logits[:, 0] = -math.inf
            loss = F.cross_entropy(logits, y)
        else:
            negatives = torch.randint(1, self.net.num_items + 1, (y.shape[0], self.num_negatives), device=y.device)
            clash = negatives == y.unsqueeze(-1)
            negatives = torch.where(clash, negatives % self.net.num_items + 1, negatives)  # (P, K)
            pos = self.net.score(h, y.unsqueeze(-1)).float()  # (P, 1)
            neg = self.net.score(h, negatives).float()  # (P, K)
            loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
            loss = loss + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="sum")
            loss = loss / y.shape[0]
        return loss, int(y.shape[0])

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor | None:
        """Loss over labelled positions; a parameter-free model (popularity) just counts labels."""
        if isinstance(self.net, CountingRecommender):  # parameter-free (popularity): count, no gradient
            self.check_ids(batch["items"], batch["labels"])
            self.net.observe(batch["labels"])
            return None
        loss, count = self.loss(batch)
        self.check_finite(loss)
        self.log("train/loss", loss, prog_bar=True, batch_size=max(count, 1))
        return loss

    def macs_probe(self, batch: dict[str, Tensor], stage: str) -> Tensor | None:
        """What the MACs callback counts: a training step's forward through the plain loss (the fused loss
        runs the same products inside an autograd Function, which tracers do not see), or ``ranks``."""
        if stage != "train":
            return self.ranks(batch)
        if isinstance(self.net, CountingRecommender):
            return None  # no gradient step to count
        fused, self.ce_chunk_rows = self.ce_chunk_rows, None
        try:
            return self.loss(batch)[0]
        finally:
            self.ce_chunk_rows = fused

    # --- evaluation -----------------------------------------------------------------------------
    def ranks(self, batch: dict[str, Tensor]) -> Tensor:
        """1-based rank of each query's target: among its candidates, or among the full catalogue."""
        items, target = batch["items"], batch["target"]  # (B, L), (B,)
        self.check_ids(items, target)
        hidden = self.net.query_hidden(items)  # (B, d): the newest position (left padding)
        if "candidates" in batch:
            candidates = batch["candidates"]  # (B, C)
            self.check_ids(candidates)
            target_scores = self.net.score(hidden, target.unsqueeze(-1)).squeeze(-1)  # (B,)
            return rank_of_target(self.net.score(hidden, candidates), target_scores)
        history = items if self.mask_history else None
        return catalogue_scan(self.net, hidden, target, history, self.score_chunk_size)[0]

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate validation ranks."""
        self.val_metrics.update(self.ranks(drop_padding(batch)))

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate test ranks, and each query's rank by its index where the batch carries ``index``."""
        batch = drop_padding(batch)
        ranks = self.ranks(batch)  # (B,)
        self.test_metrics.update(ranks)
        if "index" in batch:
            self.test_ranks.update(batch["index"], ranks)

    def on_validation_epoch_end(self) -> None:
        """Log ``val/<metric>`` (computed from global sums and counts) and reset."""
        self.log_metrics("val", self.val_metrics)

    def on_test_epoch_end(self) -> None:
        """Log ``test/<metric>``, keep the per-query ranks in ``last_test_ranks`` (gathered from every process), reset."""
        self.log_metrics("test", self.test_metrics)
        self.last_test_ranks = self.test_ranks.compute().cpu() if self.test_ranks.update_called else None
        self.test_ranks.reset()
