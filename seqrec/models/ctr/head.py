"""The click head every CTR backbone shares: an MLP over the user representation and the target embedding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqrec.models.layers import Dropout


class CTRHead(nn.Module):
    """logit = w₂ᵀ GELU(W₁ [h; e; h ⊙ e] + b₁) + b₂ for user representation h and target embedding e."""

    def __init__(self, d_model: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.hidden_layer = nn.Linear(3 * d_model, hidden)
        self.output_layer = nn.Linear(hidden, 1)
        self.dropout = Dropout(dropout)

    def forward(self, h: Tensor, e: Tensor) -> Tensor:
        """h, e: (..., d) -> logits (...)."""
        z = torch.cat([h, e, h * e], dim=-1)  # (..., 3d)
        return self.output_layer(self.dropout(F.gelu(self.hidden_layer(z)))).squeeze(-1)

    def macs(self) -> int:
        """3d·hidden + hidden MACs per target."""
        return self.hidden_layer.in_features * self.hidden_layer.out_features + self.output_layer.in_features
