"""The contract every next-item sequence model follows (models import torch only)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SequenceRecommender(nn.Module):
    """Base for next-item models: item ids in, hidden states out, scores against the item table.

    Conventions, shared by every model and the task that wraps it:
    - item ids are ``1..num_items``; ``0`` is padding; sequences are **left**-padded, so the
      newest event of every row sits at position ``L-1``;
    - ``forward(items)`` maps ``items (B, L)`` to hidden states ``(B, L, d)``; the padding mask is
      ``items == 0`` and padding must never influence a real position;
    - ``item_embeddings()`` is the ``(num_items + 1, d)`` table used for scoring and
      ``item_bias()`` an optional ``(num_items + 1,)`` bias, so
      ``scores = hidden @ item_embeddings().T + item_bias()``.
    Sub-classes set ``num_items`` and implement ``forward`` and ``item_embeddings``.
    """

    num_items: int

    def item_embeddings(self) -> Tensor:
        """(num_items + 1, d) item table used for scoring (row 0 = padding)."""
        raise NotImplementedError

    def item_bias(self) -> Tensor | None:
        """(num_items + 1,) additive score bias, or None."""
        return None

    def score(self, hidden: Tensor, items: Tensor | None = None) -> Tensor:
        """Scores ``s = h·e_i (+ b_i)``.

        hidden: (..., d). items=None scores the whole catalogue -> (..., num_items + 1);
        items (..., C) scores those candidates only -> (..., C).
        """
        table = self.item_embeddings()
        bias = self.item_bias()
        if items is None:
            out = hidden @ table.T  # (..., N+1)
            return out if bias is None else out + bias
        cand = table[items]  # (..., C, d)
        out = (cand @ hidden.unsqueeze(-1)).squeeze(-1)  # (..., C)
        return out if bias is None else out + bias[items]

    def score_chunk(self, hidden: Tensor, start: int, stop: int) -> Tensor:
        """Scores of items ``start..stop-1`` for hidden (B, d) -> (B, stop - start)."""
        out = hidden @ self.item_embeddings()[start:stop].T
        bias = self.item_bias()
        return out if bias is None else out + bias[start:stop]


def truncated_normal_(tensor: Tensor, std: float = 0.02, bound: float = 0.04) -> Tensor:
    """In-place N(0, std²) truncated to [-bound, bound] (LRURec's and BERT's init)."""
    with torch.no_grad():
        return nn.init.trunc_normal_(tensor, mean=0.0, std=std, a=-bound, b=bound)
