"""FMLP-Rec (Zhou et al., WWW 2022): filter-enhanced MLP blocks, a learnable filter applied in the frequency domain.

Read from the authors' code (github Woeee/FMLP-Rec, ``models.py`` / ``modules.py``), written anew here:

    e = Dropout(LN(E[i_t] + P[t]))                                 positions t = 0..L-1 of the padded window
    per block:  X̃ = irfft(W ⊙ rfft(X)),  X ← LN(X + Dropout(X̃))   the filter layer (along the sequence)
                X ← LN(X + Dropout(W₂ GELU(W₁ X + b₁) + b₂))         the feed-forward layer (d → 4d → d)
    scores s_i = h_{L-1} · E_i                                     tied item table, no bias

``rfft``/``irfft`` run along the sequence axis with ``norm="ortho"``; W ∈ ℂ^{(L//2+1)×d} is one complex
weight per frequency and channel (drawn N(0, 0.02²) for its real and imaginary parts). LayerNorms use
eps 1e-12 (the authors' TF-style LayerNorm, eps inside the square root: the same function).

Padding, exactly as the reference code (``FMLPRecDataset`` left-pads every input to ``max_seq_length``):

- the filter has L//2 + 1 frequencies for one fixed L = ``max_len``, so every input is brought to that length:
  a shorter batch (B, L' < max_len) is left-padded with item 0 to max_len and the last L' positions are
  returned (what the reference computes on the same history); a longer one is an error;
- padded positions are NOT masked: they embed the padding row E[0] (drawn N(0, 0.02²) with the rest of the
  table and then frozen by ``padding_idx``, as the reference's initialiser leaves it) plus their position
  embedding, and the circular convolution the filter applies mixes them into every real position;
- positions are counted from the left edge of the padded window, so the newest event sits at max_len - 1.

Hence the model is neither causal (the filter is a circular convolution over the whole window: position t
sees later positions, so it trains on prefixes with one label each, ``train_mode: prefix``, as the authors
train it) nor left-padding invariant (the hidden state depends on how much padding precedes the history):
evaluation and serving always feed the full max_len window.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqrec.models.base import SequenceRecommender, require_positive
from seqrec.models.layers import Dropout, FeedForward, fft_macs

LAYER_NORM_EPS = 1e-12  # the reference's LayerNorm(eps=1e-12) everywhere


class FilterLayer(nn.Module):
    """X ← LN(X + Dropout(irfft(W ⊙ rfft(X)))) along the sequence axis, W ∈ ℂ^{(L//2+1)×d} learnable."""

    def __init__(self, max_len: int, d_model: int, dropout: float) -> None:
        super().__init__()
        self.max_len = max_len
        # (F, d, 2): real and imaginary parts (the reference's complex_weight, without its leading 1)
        self.weight = nn.Parameter(torch.randn(max_len // 2 + 1, d_model, 2) * 0.02)
        self.dropout = Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, L, d) with L = max_len -> (B, L, d)."""
        L = x.shape[1]
        spectrum = torch.fft.rfft(x.float(), dim=1, norm="ortho")  # (B, F, d) complex; FFTs need fp32
        filtered = spectrum * torch.view_as_complex(self.weight.float())  # (B, F, d)
        mixed = torch.fft.irfft(filtered, n=L, dim=1, norm="ortho").to(x.dtype)  # (B, L, d)
        return self.layer_norm(x + self.dropout(mixed))

    def macs_per_sequence(self) -> int:
        """rfft and irfft of every channel (``fft_macs``) + the complex product W ⊙ X (4 real MACs per entry)."""
        d = self.weight.shape[1]
        return 2 * d * fft_macs(self.max_len) + 4 * (self.max_len // 2 + 1) * d


class FMLPBlock(nn.Module):
    """The filter layer, then the feed-forward layer X ← LN(X + Dropout(FFN(X))), FFN = W₂ GELU(W₁ X) (d → 4d → d)."""

    def __init__(self, max_len: int, d_model: int, dropout: float) -> None:
        super().__init__()
        self.filter = FilterLayer(max_len, d_model, dropout)
        self.ffn = FeedForward(d_model, 4 * d_model, dropout=0.0, activation="gelu")  # no inner dropout (reference)
        self.dropout = Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, L, d) -> (B, L, d)."""
        x = self.filter(x)
        return self.layer_norm(x + self.dropout(self.ffn(x)))


class FMLPRec(SequenceRecommender):
    """FMLP-Rec as the authors' code computes it (module docstring): not causal, not left-padding invariant."""

    causal = False  # the filter is a circular convolution over the whole window
    left_padding_invariant = False  # padded positions carry E[0] + P[t] into the filter

    def __init__(
        self,
        num_items: int,
        max_len: int = 50,
        d_model: int = 64,
        num_layers: int = 2,
        dropout: float = 0.5,
        initializer_range: float = 0.02,
    ) -> None:
        super().__init__()
        require_positive(num_items=num_items, max_len=max_len)
        self.num_items, self.max_len, self.d_model, self.num_layers = num_items, max_len, d_model, num_layers
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.embedding_layer_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.embedding_dropout = Dropout(dropout)
        self.blocks = nn.ModuleList(FMLPBlock(max_len, d_model, dropout) for _ in range(num_layers))
        self.reset_parameters(initializer_range)

    def reset_parameters(self, std: float = 0.02) -> None:
        """The reference's init: Linear and Embedding weights N(0, std²) (the padding row included: it stays
        drawn and frozen), Linear biases 0, LayerNorms (1, 0); the filters keep their N(0, 0.02²) draw."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table."""
        return self.item_embedding.weight

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded, L <= max_len -> hidden (B, L, d), computed on the window padded to max_len."""
        B, L = items.shape
        if L > self.max_len:
            raise ValueError(f"sequence length {L} exceeds max_len={self.max_len}: FMLP-Rec's filter has a fixed "
                             "length; keep the newest max_len items or build the model with a larger max_len")
        window = F.pad(items, (self.max_len - L, 0))  # (B, max_len): the reference's left padding with item 0
        positions = torch.arange(self.max_len, device=items.device)  # (max_len,) from the window's left edge
        x = self.item_embedding(window) + self.position_embedding(positions)  # (B, max_len, d)
        x = self.embedding_dropout(self.embedding_layer_norm(x))
        for block in self.blocks:
            x = block(x)
        return x[:, self.max_len - L:]  # (B, L, d)

    def macs_per_sequence(self, seq_len: int) -> int:
        """MACs of ``forward`` on one sequence: every input runs at the padded length P = max_len.

        Per block: the filter 2·d·fft_macs(P) + 4·(P//2 + 1)·d, the feed-forward layer 2·P·d·4d; embedding
        lookups, GELU and the LayerNorms are not MACs (``seqrec.cost.flops``).
        """
        P, d = self.max_len, self.d_model
        per_block = self.blocks[0].filter.macs_per_sequence() + 2 * P * d * 4 * d if self.num_layers else 0
        return self.num_layers * per_block
