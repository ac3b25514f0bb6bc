"""Language-model metrics: accuracy and perplexity per horizon, from exact sums and counts."""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric


class LanguageModelMetrics(Metric):
    """Accuracy and perplexity per horizon h = 1..K and overall, from exact sums (float64) and counts."""

    full_state_update = False
    higher_is_better = None

    def __init__(self, num_targets: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.num_targets = num_targets
        self.add_state("nll", default=torch.zeros(num_targets, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("correct", default=torch.zeros(num_targets, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros(num_targets, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, nll: Tensor, ranks: Tensor) -> None:
        """nll, ranks: (B, K) for the K target positions of B windows."""
        if nll.shape != ranks.shape or nll.shape[-1] != self.num_targets:
            raise ValueError(f"expected (B, {self.num_targets}) NLL and ranks, got {tuple(nll.shape)}, {tuple(ranks.shape)}")
        self.nll += nll.to(torch.float64).sum(dim=0).to(self.nll.device)
        self.correct += (ranks == 1).to(torch.float64).sum(dim=0).to(self.correct.device)
        self.count += torch.full((self.num_targets,), float(nll.shape[0]), dtype=torch.float64, device=self.count.device)

    def compute(self) -> dict[str, Tensor]:
        """accuracy, perplexity, and accuracy_h{k}, perplexity_h{k} for every horizon k."""
        if float(self.count.sum()) == 0:
            raise ValueError("LanguageModelMetrics.compute() before any update: the evaluation split was empty")
        out = {
            "accuracy": self.correct.sum() / self.count.sum(),
            "perplexity": torch.exp(self.nll.sum() / self.count.sum()),
        }
        for h in range(self.num_targets):
            out[f"accuracy_h{h + 1}"] = self.correct[h] / self.count[h]
            out[f"perplexity_h{h + 1}"] = torch.exp(self.nll[h] / self.count[h])
        return out
