"""SASRec as the code base of LRURec's authors builds it (``LRURecSASRec``), for LRURec's SASRec column.

LRURec's repository ships no baseline code, so its Table 3 SASRec figures come from code that is not
published. The closest published code is its first author's PyTorch SASRec (github
Yueeeeeeee/RecSys-Extraction-Attack, ``model/sasrec.py`` and ``model/attention.py``): the code base LRURec's
repository is cut from (the same ``args.bert_*`` settings, data pipeline and initialiser, as for NARM and
BERT4Rec, PROTOCOLS.md §1.11-§1.12). It is not the original SASRec (``seqrec.models.next_item.sasrec``)::

    x = Dropout(E[items] + P[positions])                   # (B, L, d); no √d; positions 1..n oldest to newest, 0 = padding
    repeat num_blocks:
        q = LN₁(x)
        x = LN₂(q + Attn(q, x, x))                          # causal; heads concatenated, no output projection W_o
        x = LN₃(x + Dropout(W₂ Dropout(ReLU(W₁ x + b₁)) + b₂))   # d -> 4d -> d (the original SASRec: d -> d)
    scores = x Eᵀ                                           # tied; no final LayerNorm (x is already LN₃'s output)

LN is the Annotated Transformer's LayerNorm (``BERTLayerNorm``: unbiased std, ε = 1e-6 added to it). Attention
dropout (``attention_dropout``, the reference's ``bert_attn_dropout``) acts on the attention probabilities;
``dropout`` (``bert_dropout``) on the embedding and inside and after the feed-forward. The attention output has no
residual dropout. Init: every encoder parameter but the LayerNorms (biases included) N(0, 0.02²) truncated at
±0.04; the item and position tables keep ``nn.Embedding``'s N(0, 1) (the reference initialises only its encoder), or
with ``embedding_init="truncated_normal"`` are drawn like the encoder, as LRURec's own model initialises every
parameter, its tables included (``truncated_normal_init`` over ``self.named_parameters()`` in LRURec's ``model/lru.py``).
Measured on Beauty (``sasrec_beauty@lrurec_code_dropout_06``, dropout 0.6, 2026-12-05): with N(0, 1) tables validation
Recall@10 sat at a popularity ranker's level (0.0099, 0.0105, 0.0098 at steps 1,000-3,000; a popularity ranker
validates 0.0102, results/SPLIT_DIFFICULTY.md), where the original SASRec at the same dropout had 0.019-0.042.

Padded positions (``padding``): a real position never reads one (its keys are the real items up to it), so every
evaluation is the same either way. They matter in training, where the first item of a window shorter than max_len
is a label whose input is padding (16.9% of Beauty's training labels, 0.7% of ML-1M's). In the reference every
key of a padded query is masked, and a softmax over scores that all equal -1e9 is uniform over **all L keys**, the
later real items included, so that label is predicted from an average over the window that holds it (a target
leak). ``padding="clean"`` (default) lets a padded query attend to itself only: its label is predicted from a
learned constant (E[0] + P[0] through the blocks), as ``SASRec`` and ``LRU`` do. ``padding="official"`` computes the
reference's uniform average, to reproduce its training exactly.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from seqrec.models.base import (
    SequenceRecommender,
    check_embedding_init,
    positions_from_oldest,
    require_positive,
    truncated_normal_,
    truncated_normal_tables_,
)
from seqrec.models.layers import BERTLayerNorm, Dropout, FeedForward, MultiHeadAttention

Padding = Literal["clean", "official"]


class LRURecSASRecBlock(nn.Module):
    """q = LN₁(x); x ← LN₂(q + Attn(q, x, x)); x ← LN₃(x + Dropout(FFN(x))), FFN(x) = W₂ Dropout(ReLU(W₁ x))."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, attention_dropout: float,
                 layer_norm_eps: float, masked_score: float | None = None) -> None:
        super().__init__()
        self.query_layer_norm = BERTLayerNorm(d_model, layer_norm_eps)
        self.attention = MultiHeadAttention(d_model, num_heads, attention_dropout, output_projection=False,
                                            masked_score=masked_score)
        self.attention_layer_norm = BERTLayerNorm(d_model, layer_norm_eps)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, activation="relu")
        self.ffn_layer_norm = BERTLayerNorm(d_model, layer_norm_eps)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, allowed: Tensor) -> Tensor:
        """x (B, L, d), allowed (B, 1, L, L) bool (True where query i may attend key j) -> (B, L, d)."""
        q = self.query_layer_norm(x)  # (B, L, d): queries LN₁(x); keys and values x
        x = self.attention_layer_norm(q + self.attention(q, x, allowed))
        return self.ffn_layer_norm(x + self.dropout(self.ffn(x)))

    def forward_last(self, x: Tensor, allowed: Tensor) -> Tensor:
        """The block's output at the newest position only: x (B, L, d), allowed (B, 1, 1, L) -> (B, 1, d)."""
        q = self.query_layer_norm(x[:, -1:])  # (B, 1, d): one query over all L keys
        last = self.attention_layer_norm(q + self.attention(q, x, allowed))
        return self.ffn_layer_norm(last + self.dropout(self.ffn(last)))


class LRURecSASRec(SequenceRecommender):
    """SASRec as LRURec's authors' code computes it (module docstring); PROTOCOLS.md §1.11.

    Args:
        num_items: catalogue size N (ids 1..N).
        max_len: positions of the table (a window holds at most max_len items).
        d_model, num_blocks, num_heads: width, depth and heads (LRURec's baselines: 64, 2, 2).
        ffn_dim: feed-forward width (default 4·d_model, the reference's ``hidden * 4``).
        dropout: on the embedding and inside and after the feed-forward (``bert_dropout``).
        attention_dropout: on the attention probabilities (``bert_attn_dropout``).
        layer_norm_eps: ε added to the standard deviation in every LayerNorm (1e-6).
        padding: what a padded query attends to in training, "clean" (itself) or "official" (the reference's
            uniform average over all L keys, a target leak); real positions are the same either way.
        embedding_init: "normal" (the reference: N(0, 1) item and position tables) or "truncated_normal" (N(0, 0.02²)
            truncated at ±0.04 as every encoder weight, LRURec's own init; the padding row stays 0).
    """

    left_padding_invariant = True  # positions are counted within the real events; real queries never read padding

    def __init__(
        self,
        num_items: int,
        max_len: int = 200,
        d_model: int = 64,
        num_blocks: int = 2,
        num_heads: int = 2,
        ffn_dim: int | None = None,
        dropout: float = 0.2,
        attention_dropout: float = 0.2,
        layer_norm_eps: float = 1e-6,
        padding: Padding = "clean",
        embedding_init: Literal["normal", "truncated_normal"] = "normal",
    ) -> None:
        super().__init__()
        check_embedding_init(embedding_init)
        self.embedding_init = embedding_init
        require_positive(num_items=num_items, max_len=max_len, d_model=d_model, num_blocks=num_blocks,
                         num_heads=num_heads)
        if padding not in ("clean", "official"):
            raise ValueError(f"padding must be 'clean' or 'official', got {padding!r}")
        self.num_items, self.max_len, self.d_model, self.padding = num_items, max_len, d_model, padding
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.position_embedding = nn.Embedding(max_len + 1, d_model)  # 0 padding, 1..max_len oldest -> newest
        self.embedding_dropout = Dropout(dropout)
        self.blocks = nn.ModuleList(
            LRURecSASRecBlock(d_model, num_heads, ffn_dim or 4 * d_model, dropout, attention_dropout, layer_norm_eps,
                              masked_score=-1e9 if padding == "official" else None)  # the reference fills -1e9
            for _ in range(num_blocks)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The reference's init: N(0, 0.02²) truncated at ±0.04 for every encoder parameter but the LayerNorms; the
        item and position tables N(0, 1) (``nn.Embedding``'s own) or, with ``embedding_init="truncated_normal"``,
        drawn like the encoder; the item table's padding row 0."""
        for name, param in self.blocks.named_parameters():
            if "layer_norm" not in name:
                truncated_normal_(param)
        self.item_embedding.reset_parameters()
        self.position_embedding.reset_parameters()
        if self.embedding_init == "truncated_normal":
            truncated_normal_tables_(self.item_embedding, self.position_embedding)

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table."""
        return self.item_embedding.weight

    def positions(self, items: Tensor) -> Tensor:
        """Position ids (B, L): the k-th real item of a row (oldest first) gets k, padding 0 (``positions_from_oldest``)."""
        return positions_from_oldest(items)

    def embed(self, items: Tensor) -> tuple[Tensor, Tensor]:
        """(x (B, L, d) = Dropout(E[items] + P[positions]), allowed (B, 1, L, L)) of left-padded items (B, L)."""
        length = items.shape[1]
        if length > self.max_len:
            raise ValueError(f"sequence length {length} exceeds max_len={self.max_len} of the position table")
        real = items != 0  # (B, L)
        x = self.embedding_dropout(self.item_embedding(items) + self.position_embedding(self.positions(items)))
        causal = torch.ones(length, length, dtype=torch.bool, device=items.device).tril()  # (L, L)
        allowed = causal & real[:, None, :]  # (B, L, L): key j real and j <= i
        if self.padding == "clean":  # a padded query (every key masked) attends to itself only
            blind = ~allowed.any(dim=-1, keepdim=True)  # (B, L, 1)
            allowed = allowed | (blind & torch.eye(length, dtype=torch.bool, device=items.device))
        # "official": the row stays fully masked; the attention fills -1e9, so its weights are uniform over all L keys
        return x, allowed.unsqueeze(1)  # (B, 1, L, L)

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded ids -> hidden (B, L, d), the last block's LN₃ output."""
        x, allowed = self.embed(items)
        for block in self.blocks:
            x = block(x, allowed)
        return x  # (B, L, d)

    def last_hidden(self, items: Tensor) -> Tensor:
        """``forward(items)[:, -1]`` with the last block run for the newest position only: (B, L) -> (B, d)."""
        x, allowed = self.embed(items)
        for block in self.blocks[:-1]:
            x = block(x, allowed)
        return self.blocks[-1].forward_last(x, allowed[:, :, -1:])[:, 0]  # (B, d)
