"""Most-popular baseline: every user gets the catalogue ranked by training frequency."""

from __future__ import annotations

import torch
from torch import Tensor

from seqrec.models.base import SequenceRecommender


class Popularity(SequenceRecommender):
    """Scores s_i = count_i + i / (N + 2): training frequency, ties broken by a fixed item-id order.

    Fitted by ``observe(labels)`` over one pass of the training data (the task does this instead of a
    gradient step, since the model has no parameters). It fits the scoring contract with a 1-d hidden
    state equal to 1 and a 1-column item table of scores, so ``hidden @ table.T`` is the count.
    The tie-break keeps ranks honest: with strict-greater ranking, equal counts would otherwise all
    rank the target above its ties (``tie_break=False`` shows that optimistic figure).
    """

    def __init__(self, num_items: int, tie_break: bool = True) -> None:
        super().__init__()
        self.num_items = num_items
        self.tie_break = tie_break
        self.register_buffer("counts", torch.zeros(num_items + 1, dtype=torch.float64))

    @torch.no_grad()
    def observe(self, labels: Tensor) -> None:
        """Add the non-zero ids in ``labels`` (any shape) to the counts."""
        labels = labels[labels > 0].reshape(-1)
        self.counts += torch.bincount(labels, minlength=self.num_items + 1).to(self.counts)

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) -> a constant hidden state of ones (B, L, 1), float64 like the score table."""
        return torch.ones(*items.shape, 1, device=items.device, dtype=torch.float64)

    def item_embeddings(self) -> Tensor:
        """(N + 1, 1) popularity scores; padding gets -1."""
        n = self.num_items
        scores = self.counts.clone()
        if self.tie_break:
            scores += torch.arange(n + 1, device=self.counts.device, dtype=torch.float64) / (n + 2)
        scores[0] = -1.0
        return scores.unsqueeze(-1)  # float64: exact counts and tie-breaks for any catalogue size
