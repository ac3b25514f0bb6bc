"""Ranking metrics from the target's rank, accumulated as exact sums and counts (torchmetrics)."""

from __future__ import annotations

import re

import torch
from torch import Tensor
from torchmetrics import Metric

# With one target per query, each metric is a function of its 1-based rank r (PROTOCOLS.md):
#   HR@k = Recall@k = 1[r <= k];  NDCG@k = 1[r <= k] / log2(r + 1);  MRR@k = MAP@k = 1[r <= k] / r.
_NAMES = {"hr", "recall", "ndcg", "mrr", "map"}
_PATTERN = re.compile(r"^([a-z]+)@(\d+)$")


def parse_metric(name: str) -> tuple[str, int]:
    """'ndcg@10' -> ('ndcg', 10); ValueError naming the valid metric names otherwise."""
    match = _PATTERN.match(name.strip().lower())
    if not match or match.group(1) not in _NAMES or int(match.group(2)) < 1:
        raise ValueError(f"unknown ranking metric {name!r}: use one of {sorted(_NAMES)} followed by @k, e.g. ndcg@10")
    return match.group(1), int(match.group(2))


def metric_values(kind: str, k: int, ranks: Tensor) -> Tensor:
    """Per-query value of metric ``kind@k`` for 1-based ranks (B,) -> (B,) float64."""
    ranks = ranks.to(torch.float64)
    hit = ranks <= k
    if kind in ("hr", "recall"):
        return hit.to(torch.float64)
    if kind == "ndcg":
        return torch.where(hit, 1.0 / torch.log2(ranks + 1.0), torch.zeros_like(ranks))
    if kind in ("mrr", "map"):
        return torch.where(hit, 1.0 / ranks, torch.zeros_like(ranks))
    raise ValueError(f"unknown ranking metric kind {kind!r}")


def rank_of_target(scores: Tensor, target_scores: Tensor) -> Tensor:
    """1 + number of candidates scored strictly above the target. scores (B, C), target_scores (B,) -> (B,).

    Ties count in the target's favour (strictly greater only), as PROTOCOLS.md states; callers give
    masked candidates a score of -inf so they can never outrank it.
    """
    return 1 + (scores > target_scores.unsqueeze(-1)).sum(dim=-1)


class RankingMetrics(Metric):
    """HR/Recall, NDCG, MRR, MAP at any k, from target ranks.

    State: one float64 sum per metric and a query count, both reduced by summation across processes,
    so the distributed value equals the single-process value exactly (no mean of means).
    ``update(ranks)`` takes (B,) 1-based ranks; ``compute()`` returns ``{"ndcg@10": value, ...}``.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, metrics: list[str] | tuple[str, ...] = ("hr@10", "ndcg@10", "mrr@10"), **kwargs) -> None:
        super().__init__(**kwargs)
        if not metrics:
            raise ValueError("RankingMetrics needs at least one metric name such as 'ndcg@10'")
        self.names = [name.strip().lower() for name in metrics]
        self.parsed = [parse_metric(name) for name in self.names]
        self.add_state("sums", default=torch.zeros(len(self.names), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, ranks: Tensor) -> None:
        """Accumulate a batch of 1-based target ranks (B,)."""
        if ranks.numel() and int(ranks.min()) < 1:
            raise ValueError(f"ranks are 1-based; got a minimum of {int(ranks.min())}")
        values = torch.stack([metric_values(kind, k, ranks) for kind, k in self.parsed])  # (M, B)
        # out of place: states reset under inference mode (trainer.validate) must stay updatable under no_grad
        self.sums = self.sums + values.sum(dim=1).to(self.sums.device)
        self.count = self.count + ranks.numel()

    def compute(self) -> dict[str, Tensor]:
        """Mean of each metric over all queries seen (sum / count)."""
        if self.count == 0:
            raise ValueError("RankingMetrics.compute() before any update: the evaluation split was empty")
        return {name: self.sums[i] / self.count for i, name in enumerate(self.names)}
