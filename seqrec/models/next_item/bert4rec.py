"""BERT4Rec (Sun et al., CIKM 2019): a bidirectional transformer over the item sequence, trained by the cloze task.

Layout as the PyTorch BERT4Rec of LRURec's first author (github Yueeeeeeee/RecSys-Extraction-Attack and
RecSys-Substitution-Defense, ``model/bert.py``; the code base LRURec's repository is cut from: same ``args.bert_*``
settings, trainer and initialiser; LRURec's own repository ships no BERT4Rec, PROTOCOLS.md §1.12)::

    x = Dropout(LN(E[items] + P[positions]))                  # (B, L, d); positions 1..n oldest to newest, 0 = padding
    repeat num_blocks:                                         # post-LN blocks, as BERT
        x = LN(x + Dropout(MHA(x, x, x)))                      # every real key visible to every query (bidirectional)
        x = LN(x + Dropout(W₂ GELU(W₁ x + b₁) + b₂))            # d -> 4d -> d, tanh GELU, no inner dropout
    h = GELU(W_h x + b_h)                                      # the output transform (no LayerNorm, unlike the TF code)
    scores = h Eᵀ + b                                          # tied with the input item table, an output bias

LN is that code's LayerNorm, a·(x − mean)/(std + ε) + b with the unbiased standard deviation and ε = 1e-6 (not
``nn.LayerNorm``: ``BERTLayerNorm``). The item table has num_items + 2 rows: 0 padding, 1..N items, N + 1 the
``[mask]`` token. The mask row and its bias are never scored (``item_embeddings`` stops at N): the softmax runs over
items 1..N, as the task excludes padding (choice; the reference's softmax also spans the padding and mask columns).

Queries: ``last_hidden`` appends ``[mask]`` after the history and keeps the newest ``max_len`` tokens, so the
query's state is the mask's, as the reference's evaluation datasets build ``seq + [mask]`` (the data give it
``max_len - 1`` history events: ``NextItemDataModule.history_len``).
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
from seqrec.models.layers import BERTLayerNorm, Dropout, FeedForward, MultiHeadAttention, TanhGELU


class BERT4RecBlock(nn.Module):
    """x ← LN(x + Dropout(MHA(x, x, x))); x ← LN(x + Dropout(FFN(x))), FFN(x) = W₂ GELU(W₁ x) (post-LN, as BERT)."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, attention_dropout: float,
                 layer_norm_eps: float) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(d_model, num_heads, attention_dropout)
        self.attention_layer_norm = BERTLayerNorm(d_model, layer_norm_eps)
        self.ffn = FeedForward(d_model, ffn_dim, 0.0, activation="gelu_tanh")  # the reference has no inner dropout
        self.ffn_layer_norm = BERTLayerNorm(d_model, layer_norm_eps)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, allowed: Tensor) -> Tensor:
        """x (B, L, d), allowed (B, 1, L, L) bool (True where query i may attend key j) -> (B, L, d)."""
        x = self.attention_layer_norm(x + self.dropout(self.attention(x, x, allowed)))
        return self.ffn_layer_norm(x + self.dropout(self.ffn(x)))

    def forward_last(self, x: Tensor, allowed: Tensor) -> Tensor:
        """The block's output at the newest position only: x (B, L, d), allowed (B, 1, 1, L) -> (B, 1, d)."""
        last = x[:, -1:]  # (B, 1, d): one query over all L keys
        last = self.attention_layer_norm(last + self.dropout(self.attention(last, x, allowed)))
        return self.ffn_layer_norm(last + self.dropout(self.ffn(last)))


class BERT4Rec(SequenceRecommender):
    """BERT4Rec as the PyTorch reference computes it (module docstring); PROTOCOLS.md §1.12.

    Args:
        num_items: catalogue size N (ids 1..N; N + 1 is ``[mask]``).
        max_len: tokens of an input (training windows; a query is max_len − 1 events + ``[mask]``).
        d_model, num_blocks, num_heads: width, depth and heads (LRURec's baselines: 64, 2, 2).
        ffn_dim: feed-forward width (default 4·d_model).
        dropout: on the embedding and after each sublayer (``bert_dropout``).
        attention_dropout: on the attention probabilities (``bert_attn_dropout``).
        layer_norm_eps: ε added to the standard deviation in every LayerNorm (1e-6).
        embedding_init: "normal" (the reference: the item and position tables keep ``nn.Embedding``'s N(0, 1)) or
            "truncated_normal" (N(0, 0.02²) truncated at ±0.04 like every other weight, as the original TensorFlow
            BERT4Rec and LRURec's own model initialise their tables; with the tied output it trains about 3x faster
            on ML-1M, PROTOCOLS.md §1.12, and ``model/bert4rec.yaml`` ships it).
    """

    causal = False  # every position attends to every real position, later ones included
    left_padding_invariant = True  # positions are counted within the real events; padded keys are never read

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
        embedding_init: Literal["normal", "truncated_normal"] = "normal",
    ) -> None:
        super().__init__()
        check_embedding_init(embedding_init)
        self.embedding_init = embedding_init
        require_positive(num_items=num_items, d_model=d_model, num_blocks=num_blocks, num_heads=num_heads)
        if max_len < 2:
            raise ValueError(f"max_len must be >= 2 (one history event and the [mask]), got {max_len}")
        self.num_items, self.max_len, self.d_model = num_items, max_len, d_model
        self.mask_token = num_items + 1
        self.item_embedding = nn.Embedding(num_items + 2, d_model, padding_idx=0)  # 0 padding, N + 1 [mask]
        self.position_embedding = nn.Embedding(max_len + 1, d_model)  # 0 padding, 1..max_len oldest -> newest
        self.embedding_layer_norm = BERTLayerNorm(d_model, layer_norm_eps)
        self.embedding_dropout = Dropout(dropout)
        self.blocks = nn.ModuleList(
            BERT4RecBlock(d_model, num_heads, ffn_dim or 4 * d_model, dropout, attention_dropout, layer_norm_eps)
            for _ in range(num_blocks)
        )
        self.head = nn.Linear(d_model, d_model)
        self.head_activation = TanhGELU()
        self.output_bias = nn.Parameter(torch.zeros(num_items + 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The reference's init: N(0, 0.02²) truncated at ±0.04 for every parameter of the encoder and the head
        (biases and the output bias included) except LayerNorms; the embedding tables keep ``nn.Embedding``'s
        N(0, 1) (the reference initialises only its ``BERTModel``, not its ``BERTEmbedding``) unless
        ``embedding_init`` is "truncated_normal"; padding row 0."""
        for module in (self.blocks, self.head):
            for name, param in module.named_parameters():
                if "layer_norm" not in name:
                    truncated_normal_(param)
        truncated_normal_(self.output_bias)
        if self.embedding_init == "truncated_normal":
            truncated_normal_tables_(self.item_embedding, self.position_embedding)

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table: padding and items 1..N, without the ``[mask]`` row."""
        return self.item_embedding.weight[: self.num_items + 1]

    def item_bias(self) -> Tensor:
        """(N + 1,) output bias of padding and items 1..N."""
        return self.output_bias[: self.num_items + 1]

    def positions(self, items: Tensor) -> Tensor:
        """Position ids (B, L): the k-th real item of a row (oldest first) gets k, padding 0 (``positions_from_oldest``)."""
        return positions_from_oldest(items)

    def embed(self, items: Tensor) -> tuple[Tensor, Tensor]:
        """(x (B, L, d) = Dropout(LN(E[items] + P[positions])), allowed (B, 1, L, L)) of items (B, L)."""
        length = items.shape[1]
        if length > self.max_len:
            raise ValueError(f"sequence length {length} exceeds max_len={self.max_len} of the position table")
        real = items != 0  # (B, L)
        x = self.item_embedding(items) + self.position_embedding(self.positions(items))  # (B, L, d)
        x = self.embedding_dropout(self.embedding_layer_norm(x))
        eye = torch.eye(length, dtype=torch.bool, device=items.device)
        # every query sees every real key; a padded query also sees itself (finite, never read by a real position)
        allowed = (real[:, None, :] | eye).unsqueeze(1)  # (B, 1, L, L)
        return x, allowed

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded ids, ``[mask]`` allowed -> hidden (B, L, d) = GELU(W_h x + b_h)."""
        x, allowed = self.embed(items)
        for block in self.blocks:
            x = block(x, allowed)
        return self.head_activation(self.head(x))  # (B, L, d)

    def with_mask(self, items: Tensor) -> Tensor:
        """History (B, L) -> ``[history, [mask]]`` cut to its newest ``max_len`` tokens: (B, min(L + 1, max_len))."""
        mask = torch.full((items.shape[0], 1), self.mask_token, dtype=items.dtype, device=items.device)
        return torch.cat([items, mask], dim=1)[:, -self.max_len:]

    def last_hidden(self, items: Tensor) -> Tensor:
        """The query state: the hidden state of ``[mask]`` appended after the history items (B, L) -> (B, d), i.e.
        ``forward(with_mask(items))[:, -1]``, with the last block and the output transform run for that position only."""
        x, allowed = self.embed(self.with_mask(items))
        for block in self.blocks[:-1]:
            x = block(x, allowed)
        x = self.blocks[-1].forward_last(x, allowed[:, :, -1:])  # (B, 1, d)
        return self.head_activation(self.head(x[:, 0]))  # (B, d)

    def macs_per_sequence(self, seq_len: int) -> int:
        """MACs of ``forward`` on one sequence of L tokens: blocks·(4Ld² + 2L²d + 2Ldf) + Ld² (the output transform).

        Per block: Q, K, V and output projections 4d² per token, QKᵀ and AV over all L keys 2Ld per token, the
        feed-forward 2df per token (PROTOCOLS.md §7.1; SASRec's formula plus the d × d output transform).
        """
        d, length = self.d_model, seq_len
        encoder = sum(
            block.attention.projection_macs() * length + 2 * length * length * d + block.ffn.macs_per_token() * length
            for block in self.blocks
        )
        return encoder + length * d * d
