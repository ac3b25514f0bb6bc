"""Language-model task: a next-item task over a vocabulary, scored on the last K words of each window.

A language model over word ids is a next-item model whose catalogue is the vocabulary, so training is
``NextItemTask``'s (full-softmax cross-entropy at every labelled position). Evaluation differs: each window
(``seqrec.datamodules.lm``) holds K = ``num_targets`` held-out words at its last K labelled positions, and this task
reports over those positions
- accuracy: the target scores strictly highest (ties count for the target, as ranks do everywhere here),
- perplexity: exp(Σ NLL / count), with NLL from a softmax over ids 1..N (padding excluded, as in training),
- per-horizon accuracy and perplexity (``accuracy_h1`` is the next word, ``h4`` four words ahead),
and the ranking metrics (``metrics``, default MAP@20) of the **next** word (horizon 1) among the full
vocabulary, without history masking (words repeat). Every value is an exact sum and count (DDP-safe).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn
from torchmetrics import Metric

from seqrec.tasks.next_item import NextItemTask
from seqrec.tasks.padding import drop_padding


def vocabulary_statistics(model: nn.Module, hidden: Tensor, target: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    """(NLL (P,), 1-based rank (P,)) of each target over ids 1..N, in vocabulary chunks.

    hidden (P, d), target (P,) in 1..N. log p = s_target − logsumexp_j s_j (running log-sum-exp over chunks,
    padding excluded); rank = 1 + #{j ≠ target : s_j > s_target}. Memory O(P · chunk_size).
    """
    target_scores = model.score(hidden, target.unsqueeze(-1)).squeeze(-1).float()  # (P,)
    running_max = torch.full_like(target_scores, -math.inf)
    running_sum = torch.zeros_like(target_scores)
    above = torch.zeros_like(target)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    num_rows = model.num_items + 1
    for start in range(0, num_rows, chunk_size):
        stop = min(start + chunk_size, num_rows)
        scores = model.score_chunk(hidden, start, stop).float().clone()  # (P, C)
        if start == 0:
            scores[:, 0] = -math.inf
        new_max = torch.maximum(running_max, scores.max(dim=-1).values)
        running_sum = running_sum * torch.exp(running_max - new_max) + torch.exp(scores - new_max.unsqueeze(-1)).sum(-1)
        running_max = new_max
        own = (target >= start) & (target < stop)
        scores[rows[own], target[own] - start] = -math.inf
        above += (scores > target_scores.unsqueeze(-1)).sum(dim=-1)
    nll = running_max + torch.log(running_sum) - target_scores
    return nll, above + 1


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


class LanguageModelTask(NextItemTask):
    """NextItemTask for language modelling: same training; evaluation over the last ``num_targets`` positions.

    Logged keys: ``{val,test}/accuracy``, ``/perplexity``, ``/accuracy_h{k}``, ``/perplexity_h{k}`` and the
    ranking metrics of the next word (``{val,test}/map@20`` by default).
    """

    def __init__(
        self,
        model: nn.Module,
        num_targets: int = 4,
        loss: Literal["ce", "bce"] = "ce",
        num_negatives: int = 1,
        optimizer: Literal["adam", "adamw"] = "adam",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        no_decay: list[str] | None = None,
        metrics: list[str] | None = None,
        score_chunk_size: int = 65536,
    ) -> None:
        super().__init__(
            model, loss=loss, num_negatives=num_negatives, optimizer=optimizer, lr=lr, weight_decay=weight_decay,
            betas=betas, eps=eps, no_decay=no_decay, metrics=metrics or ["map@20"], mask_history=False,
            score_chunk_size=score_chunk_size,
        )
        if num_targets < 1:
            raise ValueError(f"num_targets must be >= 1, got {num_targets}")
        self.num_targets = num_targets
        self.val_lm = LanguageModelMetrics(num_targets)
        self.test_lm = LanguageModelMetrics(num_targets)

    def target_statistics(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(NLL (B, K), ranks (B, K)) of the K targets in the last K positions of each window."""
        items, labels = batch["items"], batch["labels"]  # (B, L), (B, L)
        K = self.num_targets
        targets = labels[:, -K:]  # (B, K)
        if bool((targets <= 0).any()) or bool((labels[:, :-K] != 0).any()):
            raise ValueError(
                f"evaluation windows must label exactly their last {K} positions (num_targets={K}); check that "
                "the data module's num_targets equals the task's"
            )
        self._check_ids(items, targets)
        hidden = self.model(items)[:, -K:]  # (B, K, d)
        nll, ranks = vocabulary_statistics(
            self.model, hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1), self.score_chunk_size
        )
        return nll.view(-1, K), ranks.view(-1, K)

    def ranks(self, batch: dict[str, Tensor]) -> Tensor:
        """1-based rank of each window's next word (horizon 1); all K targets are scored, as evaluation does."""
        return self.target_statistics(batch)[1][:, 0]

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate validation statistics."""
        nll, ranks = self.target_statistics(drop_padding(batch))
        self.val_lm.update(nll, ranks)
        self.val_metrics.update(ranks[:, 0])

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Accumulate test statistics."""
        nll, ranks = self.target_statistics(drop_padding(batch))
        self.test_lm.update(nll, ranks)
        self.test_metrics.update(ranks[:, 0])

    def on_validation_epoch_end(self) -> None:
        """Log ``val/*`` and reset."""
        self._log_lm("val", self.val_lm)
        super().on_validation_epoch_end()

    def on_test_epoch_end(self) -> None:
        """Log ``test/*`` and reset."""
        self._log_lm("test", self.test_lm)
        super().on_test_epoch_end()

    def _log_lm(self, prefix: str, metric: LanguageModelMetrics) -> None:
        self.log_dict({f"{prefix}/{name}": value.float() for name, value in metric.compute().items()})
        metric.reset()
