"""CTR metrics: AUC (torchmetrics), GAUC (per-user AUC, its own Metric) and Logloss, exact under DDP.

AUC = P(s⁺ > s⁻) + ½ P(s⁺ = s⁻) over all (positive, negative) pairs (Mann-Whitney, ties count half).
GAUC = Σ_u w_u AUC_u / Σ_u w_u over the users u that have both a positive and a negative impression;
w_u = n_u impressions (DIN, FuxiCTR) or P_u positives (RecBole's weighting). Users with one label class
are skipped. Logloss = −mean(y log σ(s) + (1−y) log(1−σ(s))).

AUC and GAUC need every score, so their states are concatenated tensors (``dist_reduce_fx="cat"``);
duplicate samples that a distributed sampler pads in are dropped by their ``indexes`` before computing,
so the distributed result equals the single-process result. Logloss is a float64 sum and a count.
"""

from __future__ import annotations

import logging
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.functional.classification import binary_auroc
from torchmetrics.utilities import dim_zero_cat

log = logging.getLogger(__name__)

GAUCWeighting = Literal["impressions", "positives"]


def _flat(*tensors: Tensor) -> list[Tensor]:
    return [t.reshape(-1) for t in tensors]


def _check(preds: Tensor, target: Tensor, *others: Tensor) -> None:
    shapes = {tuple(t.shape) for t in (preds, target, *others)}
    if len(shapes) != 1:
        raise ValueError(f"CTR metric inputs must have one shape, got {[tuple(t.shape) for t in (preds, target, *others)]}")
    if target.numel() and not bool(((target == 0) | (target == 1)).all()):
        raise ValueError("CTR labels must be 0 or 1")


def drop_duplicates(indexes: Tensor, *values: Tensor) -> list[Tensor]:
    """Keep the first occurrence of every sample index (padding duplicates of a distributed sampler)."""
    if indexes.numel() == 0:
        return list(values)
    unique, inverse = torch.unique(indexes, return_inverse=True)
    first = torch.full((len(unique),), indexes.numel(), dtype=torch.long, device=indexes.device)
    first.scatter_reduce_(0, inverse, torch.arange(indexes.numel(), device=indexes.device), reduce="amin")
    return [v[first] for v in values]


def grouped_auc(preds: Tensor, target: Tensor, groups: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group AUC with ties counted half, in one vectorised pass.

    Returns (group ids G, AUC_g (G,) float64, positives P_g, negatives N_g as (2, G)) for groups with
    both labels. AUC_g = (Σ rank of positives − P(P+1)/2) / (P·N), ranks 1-based within the group and
    averaged over tied scores.
    """
    preds = preds.to(torch.float64)
    target = target.to(torch.int64)
    # sort by (group, score): a stable sort by score, then a stable sort by group
    order = torch.argsort(preds, stable=True)
    order = order[torch.argsort(groups[order], stable=True)]
    g, s, y = groups[order], preds[order], target[order]
    n = g.numel()
    idx = torch.arange(n, device=g.device)
    new_group = torch.ones(n, dtype=torch.bool, device=g.device)
    new_group[1:] = g[1:] != g[:-1]
    group_start = torch.cummax(torch.where(new_group, idx, torch.zeros_like(idx)), dim=0).values
    rank = (idx - group_start + 1).to(torch.float64)  # 1-based rank within the group
    # average ranks over runs of equal (group, score)
    new_run = new_group.clone()
    new_run[1:] |= s[1:] != s[:-1]
    run_id = torch.cumsum(new_run.to(torch.int64), 0) - 1
    runs = int(run_id[-1]) + 1 if n else 0
    run_sum = torch.zeros(runs, dtype=torch.float64, device=g.device).index_add_(0, run_id, rank)
    run_len = torch.zeros(runs, dtype=torch.float64, device=g.device).index_add_(0, run_id, torch.ones_like(rank))
    rank = (run_sum / run_len)[run_id]
    group_id = torch.cumsum(new_group.to(torch.int64), 0) - 1
    count = int(group_id[-1]) + 1 if n else 0
    pos = torch.zeros(count, dtype=torch.float64, device=g.device).index_add_(0, group_id, y.to(torch.float64))
    tot = torch.zeros(count, dtype=torch.float64, device=g.device).index_add_(0, group_id, torch.ones_like(rank))
    pos_rank = torch.zeros(count, dtype=torch.float64, device=g.device).index_add_(0, group_id, rank * y)
    neg = tot - pos
    both = (pos > 0) & (neg > 0)
    auc = (pos_rank[both] - pos[both] * (pos[both] + 1) / 2) / (pos[both] * neg[both])
    return g[new_group][both], auc, torch.stack([pos[both], neg[both]])


class GAUC(Metric):
    """Group (per-user) AUC, weighted by impressions (default) or by positives.

    ``update(preds, target, users, indexes=None)``: scores (any monotone scale: logits or
    probabilities), 0/1 labels, user ids, and optional unique sample indexes used to drop the
    duplicates a distributed sampler pads in. ``compute()`` is NaN (with a warning) when no user has
    both labels.
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, weighting: GAUCWeighting = "impressions", **kwargs) -> None:
        super().__init__(**kwargs)
        if weighting not in ("impressions", "positives"):
            raise ValueError(f"GAUC weighting must be 'impressions' or 'positives', got {weighting!r}")
        self.weighting = weighting
        for name in ("preds", "target", "users", "indexes"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, preds: Tensor, target: Tensor, users: Tensor, indexes: Tensor | None = None) -> None:
        """Accumulate one batch (all tensors of one shape)."""
        preds, target, users = _flat(preds, target, users)
        _check(preds, target, users)
        if indexes is None:
            indexes = torch.full_like(users, -1)
        self.preds.append(preds.detach().to(torch.float64))
        self.target.append(target.detach().to(torch.int64))
        self.users.append(users.detach().to(torch.int64))
        self.indexes.append(indexes.reshape(-1).detach().to(torch.int64))

    def compute(self) -> Tensor:
        """Σ_u w_u AUC_u / Σ_u w_u over users with both labels."""
        preds, target, users, indexes = (dim_zero_cat(x) for x in (self.preds, self.target, self.users, self.indexes))
        if bool((indexes >= 0).all()):
            preds, target, users = drop_duplicates(indexes, preds, target, users)
        _, auc, counts = grouped_auc(preds, target, users)
        if auc.numel() == 0:
            log.warning("GAUC: no user has both a positive and a negative impression; returning NaN")
            return torch.tensor(float("nan"), dtype=torch.float64)
        weight = counts[0] if self.weighting == "positives" else counts.sum(0)
        return (auc * weight).sum() / weight.sum()


class AUC(Metric):
    """Exact binary AUC (``torchmetrics.functional.binary_auroc`` with no thresholds) over deduplicated samples."""

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        for name in ("preds", "target", "indexes"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, preds: Tensor, target: Tensor, indexes: Tensor | None = None) -> None:
        """Accumulate probabilities (or any monotone score) and 0/1 labels."""
        preds, target = _flat(preds, target)
        _check(preds, target)
        if indexes is None:
            indexes = torch.full_like(target, -1, dtype=torch.int64)
        self.preds.append(preds.detach().to(torch.float64))
        self.target.append(target.detach().to(torch.int64))
        self.indexes.append(indexes.reshape(-1).detach().to(torch.int64))

    def compute(self) -> Tensor:
        """AUC over every (positive, negative) pair; ties count half."""
        preds, target, indexes = (dim_zero_cat(x) for x in (self.preds, self.target, self.indexes))
        if bool((indexes >= 0).all()):
            preds, target = drop_duplicates(indexes, preds, target)
        if preds.numel() and (preds.min() < 0 or preds.max() > 1):
            # binary_auroc would apply a sigmoid to scores outside [0, 1], which saturates large logits
            # into ties; a min-max rescale keeps the order (and the AUC) exactly
            span = (preds.max() - preds.min()).clamp_min(torch.finfo(torch.float64).tiny)
            preds = (preds - preds.min()) / span
        return binary_auroc(preds, target, thresholds=None).to(torch.float64)


class Logloss(Metric):
    """Mean binary cross-entropy from **logits** (computed stably in float64): sum and count states."""

    full_state_update = False
    higher_is_better = False
    is_differentiable = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, logits: Tensor, target: Tensor) -> None:
        """Accumulate −[y log σ(s) + (1−y) log(1−σ(s))] for logits s and labels y."""
        logits, target = _flat(logits, target)
        _check(logits, target)
        loss = F.binary_cross_entropy_with_logits(logits.double(), target.double(), reduction="sum")
        self.total = self.total + loss.detach().to(self.total.device)
        self.count = self.count + logits.numel()

    def compute(self) -> Tensor:
        """total / count."""
        if self.count == 0:
            raise ValueError("Logloss.compute() before any update: the evaluation split was empty")
        return self.total / self.count


class CTRMetrics(nn.Module):
    """AUC, GAUC and Logloss of one split, updated together from logits, labels and user ids."""

    def __init__(self, gauc_weighting: GAUCWeighting = "impressions") -> None:
        super().__init__()
        self.auc = AUC()
        self.gauc = GAUC(weighting=gauc_weighting)
        self.logloss = Logloss()

    def update(self, logits: Tensor, labels: Tensor, users: Tensor, indexes: Tensor | None = None) -> None:
        """logits, labels, users (and optional unique sample indexes) of one shape, flattened."""
        self.auc.update(logits, labels, indexes)
        self.gauc.update(logits, labels, users, indexes)
        self.logloss.update(logits, labels)

    def compute(self) -> dict[str, Tensor]:
        """``{"auc", "gauc", "logloss"}``."""
        return {"auc": self.auc.compute(), "gauc": self.gauc.compute(), "logloss": self.logloss.compute()}

    def reset(self) -> None:
        """Clear every state."""
        for metric in (self.auc, self.gauc, self.logloss):
            metric.reset()
