"""NARM (Li et al., CIKM 2017): a GRU encoder read by a global and a local (attention) encoder, bilinear decoding.

As the reference implementation computes it (``model/narm.py`` of github Yueeeeeeee/RecSys-Extraction-Attack,
by LRURec's first author; read, written anew here), for the hidden states h_1..h_t of the GRU over the
embedded history (H = ``hidden_size``, d = ``d_model``):

    x_j = Dropout(E[i_j]);  h_j = GRU(x_j, h_{j-1}), h_0 = 0                          (bias in the GRU)
    c_global = h_t                                                                   the global encoder
    a_j = v · hardsigmoid(A₁ h_t + A₂ h_j),  α = softmax_j(a) over the real j ≤ t
    c_local = Σ_j α_j h_j                                                             the local encoder
    c = Dropout([c_global ; c_local]) ∈ R^{2H}
    s_i = c · (B E_i) = (Bᵀ c) · E_i                                                  the bilinear decoder, B: (2H × d)

so the hidden state the task scores with the tied item table is ``Bᵀ c`` (d wide): the reference computes
``c @ (E Bᵀ)ᵀ``, the same bilinear form in another order. Differences from the NARM paper that the reference
makes, and this class keeps (each an option): ``hardsigmoid`` instead of σ (``gate``) and a softmax over the
attention scores, which the paper leaves unnormalised (``normalize``); RecBole's NARM follows the paper
(``gate: sigmoid``, ``normalize: false``) and adds its own dropout placement.

Every position: the reference scores only the newest event of a prefix; ``forward`` gives position t the
output the reference gives the prefix ending at t (global h_t, attention of query h_t over h_1..h_t), so the
model is causal and can also be trained on windows labelled at every position (an O(L²·H) attention per
window); ``last_hidden`` computes the newest position alone (O(L·H)), which is what evaluation, serving and
prefix training (one label per example, as the reference trains) use.

Padding, as the reference: it right-pads and packs each sequence with its length, and masks the padding out
of the attention, so padding never reaches a real position. Here rows arrive left-padded; each is rotated so
its items start at position 0 (right padding), run through the GRU (causal: the trailing padding cannot reach
a real position) with the padded keys masked out of every softmax, and rotated back; padded positions
output 0. The model is therefore left-padding invariant (the same hidden states whatever padding precedes).

Initialisation (reference): every parameter, the GRU's and the embedding's included, drawn from N(0, 0.02²)
truncated to ±0.04 (``truncated_normal_``). The embedding has no padding row of its own (its row 0 is never
read by a real position).

Serving recomputes (no ``init_state``/``step``): the local encoder re-weights every past GRU state with a query
from the newest one through a nonlinearity, so no fixed-size state gives it exactly; an exact incremental form
would keep all L past states (O(L) per user), no cheaper than re-encoding the window.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqrec.models.base import SequenceRecommender, require_positive, truncated_normal_
from seqrec.models.layers import Dropout
from seqrec.models.next_item.gru4rec import rotate_rows

GATES = {"hardsigmoid": F.hardsigmoid, "sigmoid": torch.sigmoid}


class NARM(SequenceRecommender):
    """NARM as the reference implementation computes it (module docstring), at every position."""

    left_padding_invariant = True  # rows are rotated to right padding; padded keys never enter the attention

    def __init__(
        self,
        num_items: int,
        d_model: int = 64,
        hidden_size: int | None = None,
        embedding_dropout: float = 0.2,
        output_dropout: float = 0.2,
        gate: Literal["hardsigmoid", "sigmoid"] = "hardsigmoid",
        normalize: bool = True,
    ) -> None:
        super().__init__()
        require_positive(num_items=num_items)
        if gate not in GATES:
            raise ValueError(f"gate must be one of {sorted(GATES)}, got {gate!r}")
        hidden = hidden_size or 2 * d_model  # the reference: 2 × the embedding width
        self.num_items, self.d_model, self.hidden_size = num_items, d_model, hidden
        self.gate, self.normalize = gate, normalize
        self.item_embedding = nn.Embedding(num_items + 1, d_model)
        self.embedding_dropout = Dropout(embedding_dropout)
        self.gru = nn.GRU(d_model, hidden, num_layers=1, batch_first=True)
        self.query = nn.Linear(hidden, hidden, bias=False)  # A₁ (the reference's a_global), applied to h_t
        self.key = nn.Linear(hidden, hidden, bias=False)  # A₂ (the reference's a_local), applied to every h_j
        self.score_vector = nn.Linear(hidden, 1, bias=False)  # v
        self.output_dropout = Dropout(output_dropout)
        self.bilinear = nn.Linear(d_model, 2 * hidden, bias=False)  # B: s_i = c · (B E_i)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The reference's init: every parameter N(0, 0.02²) truncated to ±0.04."""
        for param in self.parameters():
            truncated_normal_(param)

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table."""
        return self.item_embedding.weight

    def _encode(self, items: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """GRU states of the right-aligned rows: (states (B, L, H), real (B, L) of the rotated rows, shift (B,))."""
        L = items.shape[1]
        real = items != 0  # (B, L)
        pad = L - real.sum(dim=1)  # (B,) leading padding per row
        shifted = rotate_rows(items, pad)  # (B, L): items first, padding last
        states, _ = self.gru(self.embedding_dropout(self.item_embedding(shifted)))  # (B, L, H)
        return states, rotate_rows(real, pad), pad

    def _attend(self, queries: Tensor, states: Tensor, allowed: Tensor) -> Tensor:
        """c_local for queries (B, Q, H) over states (B, L, H) where allowed (B, Q, L) -> (B, Q, H)."""
        pairs = GATES[self.gate](self.query(queries).unsqueeze(2) + self.key(states).unsqueeze(1))  # (B, Q, L, H)
        scores = self.score_vector(pairs).squeeze(-1)  # (B, Q, L)
        if self.normalize:
            weights = torch.softmax(scores.masked_fill(~allowed, torch.finfo(scores.dtype).min), dim=-1)
            weights = weights * allowed.any(dim=-1, keepdim=True)  # a query with no real key reads nothing
        else:
            weights = scores * allowed
        return weights @ states  # (B, Q, H)

    def _decode(self, global_state: Tensor, local_state: Tensor) -> Tensor:
        """Bᵀ Dropout([c_global ; c_local]): (..., H) twice -> (..., d)."""
        context = self.output_dropout(torch.cat([global_state, local_state], dim=-1))  # (..., 2H)
        return context @ self.bilinear.weight  # (..., d)

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded -> hidden (B, L, d): position t scored as the reference scores the prefix ending at t."""
        B, L = items.shape
        states, real, pad = self._encode(items)  # (B, L, H), (B, L)
        causal = torch.ones(L, L, dtype=torch.bool, device=items.device).tril()  # (L, L): key j <= query t
        allowed = causal.unsqueeze(0) & real.unsqueeze(1)  # (B, L, L)
        out = self._decode(states, self._attend(states, states, allowed))  # (B, L, d)
        out = rotate_rows(out, (L - pad) % L)  # back to left padding
        return out * (items != 0).unsqueeze(-1).to(out.dtype)

    def last_hidden(self, items: Tensor) -> Tensor:
        """forward(items)[:, -1] computing the newest position only: (B, L) -> (B, d); 0 for an all-padding row."""
        states, real, _ = self._encode(items)  # (B, L, H)
        lengths = real.sum(dim=1)  # (B,)
        last = (lengths - 1).clamp_min(0)  # (B,) the newest event's column in the rotated rows
        h_t = states[torch.arange(items.shape[0], device=items.device), last]  # (B, H) = c_global
        local = self._attend(h_t.unsqueeze(1), states, real.unsqueeze(1)).squeeze(1)  # (B, H)
        return self._decode(h_t, local) * (lengths > 0).unsqueeze(-1).to(states.dtype)

    def macs_per_sequence(self, seq_len: int) -> int:
        """MACs of ``forward`` on one sequence of L items (every position, dense over the L × L attention pairs).

        GRU 3·L·(d·H + H²); A₁ and A₂ 2·L·H²; v over the pairs L²·H; α·h L²·H; the decoder Bᵀ c 2·L·H·d.
        """
        L, d, H = seq_len, self.d_model, self.hidden_size
        return 3 * L * (d * H + H * H) + 2 * L * H * H + 2 * L * L * H + 2 * L * H * d
