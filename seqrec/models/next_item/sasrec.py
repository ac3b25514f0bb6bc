"""SASRec (Kang & McAuley, ICDM 2018): causal self-attention over the item sequence, tied item embedding."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from seqrec.models.base import SequenceRecommender
from seqrec.models.layers import Dropout, FeedForward, MultiHeadAttention


class SASRecBlock(nn.Module):
    """x ← Q + Attn(Q, x, x) with Q = LN(x); z = LN(x); x ← z + Dropout(FFN(z)); padded positions zeroed.

    FFN(z) = W₂ Dropout(ReLU(W₁ z)) (``seqrec.models.layers.FeedForward``). The official code applies the
    inner dropout before the ReLU; dropout scales by a non-negative factor, so the order gives the same
    numbers. As in the official code the FFN's residual adds the normalised input z.
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float) -> None:
        super().__init__()
        self.attn_layer_norm = nn.LayerNorm(d_model, eps=1e-8)
        self.attention = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn_layer_norm = nn.LayerNorm(d_model, eps=1e-8)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, activation="relu")
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, allowed: Tensor, keep: Tensor) -> Tensor:
        """x: (B, L, d); allowed: (B, 1, L, L) bool, True where query i may attend key j; keep: (B, L, 1) float, 0 at padding."""
        q = self.attn_layer_norm(x)  # (B, L, d)
        x = q + self.attention(q, x, allowed)  # queries LN(x), keys and values x
        z = self.ffn_layer_norm(x)
        x = z + self.dropout(self.ffn(z))
        return x * keep

    def forward_last(self, x: Tensor, allowed: Tensor, keep: Tensor) -> Tensor:
        """The block's output at the newest position only: x (B, L, d), allowed (B, 1, 1, L), keep (B, 1, 1) -> (B, 1, d)."""
        q = self.attn_layer_norm(x[:, -1:])  # (B, 1, d)
        x_last = q + self.attention(q, x, allowed)  # one query over all L keys
        z = self.ffn_layer_norm(x_last)
        return (z + self.dropout(self.ffn(z))) * keep


class SASRec(SequenceRecommender):
    """SASRec as in the paper and its official code (PROTOCOLS.md §5).

    e = E[items]·√d + P[positions]; Dropout; num_blocks × SASRecBlock; final LayerNorm.
    Positions are absolute slots 0..L-1 of the left-padded window (the newest item sits at L-1), as
    the official code tiles ``range(L)``. Attention is causal and never attends to padded keys (the
    official TF code's key masking); a padded query attends only to itself to stay finite.
    Scores are tied: s_i = h · E_i (no bias).
    """

    left_padding_invariant = True  # positions count back from the newest event; padded keys are never read

    def __init__(
        self,
        num_items: int,
        max_len: int = 50,
        d_model: int = 50,
        num_blocks: int = 2,
        num_heads: int = 1,
        ffn_dim: int | None = None,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        if num_items < 1:
            raise ValueError(f"num_items must be >= 1, got {num_items}")
        self.num_items, self.max_len, self.d_model = num_items, max_len, d_model
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.embedding_dropout = Dropout(dropout)
        self.blocks = nn.ModuleList(
            SASRecBlock(d_model, num_heads, ffn_dim or d_model, dropout) for _ in range(num_blocks)
        )
        self.final_layer_norm = nn.LayerNorm(d_model, eps=1e-8)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-normal weights and zero biases (the official PyTorch port's init); padding row zero."""
        for name, param in self.named_parameters():
            if "layer_norm" in name:
                continue
            if param.dim() > 1:
                nn.init.xavier_normal_(param)
            else:
                nn.init.zeros_(param)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table."""
        return self.item_embedding.weight

    def _embed(self, items: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(x (B, L, d) embedded with right-aligned positions, allowed (B, 1, L, L), keep (B, L, 1))."""
        B, L = items.shape
        if L > self.max_len:
            raise ValueError(f"sequence length {L} exceeds max_len={self.max_len} of the position table")
        real = items != 0  # (B, L)
        positions = torch.arange(self.max_len - L, self.max_len, device=items.device)  # (L,)
        x = self.item_embedding(items) * math.sqrt(self.d_model) + self.position_embedding(positions)
        keep = real.unsqueeze(-1).to(x.dtype)  # (B, L, 1)
        x = self.embedding_dropout(x) * keep  # (B, L, d)
        causal = torch.ones(L, L, dtype=torch.bool, device=items.device).tril()  # (L, L)
        eye = torch.eye(L, dtype=torch.bool, device=items.device)
        allowed = (causal & real.unsqueeze(1)) | eye  # (B, L, L): key j real and j <= i, or j == i
        return x, allowed.unsqueeze(1), keep  # (B, 1, L, L)

    def forward(self, items: Tensor) -> Tensor:
        """items: (B, L) left-padded ids -> hidden (B, L, d); rows at padding are zero before the final LN."""
        x, allowed, keep = self._embed(items)
        for block in self.blocks:
            x = block(x, allowed, keep)
        return self.final_layer_norm(x)  # (B, L, d)

    def last_hidden(self, items: Tensor) -> Tensor:
        """forward(items)[:, -1] computing the last block for the newest position only: (B, L) -> (B, d)."""
        x, allowed, keep = self._embed(items)
        for block in self.blocks[:-1]:
            x = block(x, allowed, keep)
        x = self.blocks[-1].forward_last(x, allowed[:, :, -1:], keep[:, -1:])  # (B, 1, d)
        return self.final_layer_norm(x[:, 0])  # (B, d)
