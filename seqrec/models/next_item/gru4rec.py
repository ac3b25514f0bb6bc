"""GRU4Rec (Hidasi et al., ICLR 2016), in the form sequential benchmarks use (RecBole's GRU4Rec): a GRU over item embeddings.

e_t = Dropout_p(E[i_t]); h_t = GRU(e_t, h_{t-1}) (``num_layers`` stacked, h_0 = 0); o_t = W Dropout_q(h_t) + b
(hidden → d); scores s_i = o_t · E_i (+ c_i with ``output_bias``) (tied item embedding). p is ``dropout``, q is
``hidden_dropout``.

``hidden_dropout`` (q, default 0: RecBole's form, which has none) is the original GRU4Rec's ``dropout_p_hidden``
(Hidasi's code drops each GRU layer's output before the next layer and the output layer). Hidasi's code also
carries the dropped state into the next time step; ``nn.GRU`` cannot, so here only the top layer's output to the
dense map is dropped and the recurrence sees the clean state (a choice: it keeps ``nn.GRU``'s fused sequence
kernel; a per-step cell loop that feeds the dropped state back is not implemented). Between stacked layers, ``nn.GRU``'s own inter-layer dropout is not used.

Two more of the original's parts, off by default (RecBole's GRU has neither): ``gate_bias`` gives the GRU's
gates and candidate their biases (``nn.GRU(bias=True)``; the original's ``Bh``), ``output_bias`` a per-item
score bias c (the original's ``By``); both start at zero, as the original initialises them.

Padding: inputs are left-padded (newest item at L - 1), but a GRU run over the padded slots would
start the real items from a state the padding produced. Each row is therefore rotated so its real items
start at position 0 (right padding), run through the GRU — causal, so the trailing padding cannot reach
any real position — and rotated back; the output at padded positions is zero. Hence a sequence's
hidden states do not depend on how much padding precedes it.
Initialisation (RecBole): Xavier-normal item embedding, Xavier-uniform GRU weights, PyTorch defaults elsewhere.

Recurrent serving (``RecurrentRecommender``): the state of a user is the GRU's hidden state of every layer
after the newest real event (``num_layers`` tensors (B, hidden_size)); ``step`` folds one event in with the
same GRU weights (one time step of ``nn.GRU`` from that state), ``prefill`` runs a left-padded history at once
(packed, so trailing padding never moves the state). Fed event by event from ``init_state``, the output equals
``forward(items)[:, -1]`` in eval mode (tests/serve/test_recurrent_gru4rec.py).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

from seqrec.models.base import RecurrentState, SequenceRecommender
from seqrec.models.layers import Dropout


def rotate_rows(x: Tensor, shift: Tensor) -> Tensor:
    """out[b, j] = x[b, (j + shift[b]) mod L] for x (B, L, ...) and shift (B,): a per-row roll to the left."""
    B, L = x.shape[:2]
    index = (torch.arange(L, device=x.device).unsqueeze(0) + shift.unsqueeze(1)) % L  # (B, L)
    index = index.view(B, L, *([1] * (x.dim() - 2))).expand_as(x)
    return torch.gather(x, 1, index)


class GRU4Rec(SequenceRecommender):
    """GRU4Rec: embedding → dropout → GRU → dropout (none by default) → Linear(hidden → d), tied scores."""

    def __init__(
        self,
        num_items: int,
        d_model: int = 64,
        hidden_size: int = 128,
        num_layers: int = 1,
        dropout: float = 0.3,
        hidden_dropout: float = 0.0,
        gate_bias: bool = False,
        output_bias: bool = False,
    ) -> None:
        super().__init__()
        if num_items < 1:
            raise ValueError(f"num_items must be >= 1, got {num_items}")
        self.num_items, self.d_model, self.hidden_size, self.num_layers = num_items, d_model, hidden_size, num_layers
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.embedding_dropout = Dropout(dropout)
        self.gru = nn.GRU(d_model, hidden_size, num_layers=num_layers, bias=gate_bias, batch_first=True)
        self.hidden_dropout = Dropout(hidden_dropout)
        self.dense = nn.Linear(hidden_size, d_model)
        # (N + 1,) per-item score bias c (index 0, padding, is never a label); absent in RecBole's form
        self.output_bias = nn.Parameter(torch.zeros(num_items + 1)) if output_bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """RecBole's init: Xavier-normal embedding (padding row zeroed), Xavier-uniform GRU weights; the optional
        gate and output biases zero (the original GRU4Rec's)."""
        nn.init.xavier_normal_(self.item_embedding.weight)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()
        for name, param in self.gru.named_parameters():
            if name.startswith("weight"):
                nn.init.xavier_uniform_(param)
            else:
                nn.init.zeros_(param)
        if self.output_bias is not None:
            nn.init.zeros_(self.output_bias)

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table."""
        return self.item_embedding.weight

    def item_bias(self) -> Tensor | None:
        """(N + 1,) per-item score bias c with ``output_bias``, else None (RecBole's form)."""
        return self.output_bias

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded -> hidden (B, L, d); zero at padded positions."""
        B, L = items.shape
        real = items != 0  # (B, L)
        pad = L - real.sum(dim=1)  # (B,) leading padding per row
        shifted = rotate_rows(items, pad)  # (B, L): real items first, padding last
        x = self.embedding_dropout(self.item_embedding(shifted))  # (B, L, d)
        out, _ = self.gru(x)  # (B, L, H)
        out = self.dense(self.hidden_dropout(out))  # (B, L, d)
        out = rotate_rows(out, (L - pad) % L)  # back to left padding
        return out * real.unsqueeze(-1).to(out.dtype)

    # ---- recurrent inference: O(1) state and work per event -------------------------------------

    def init_state(self, batch_size: int) -> RecurrentState:
        """Empty state for ``batch_size`` users: one zero (B, hidden_size) tensor per GRU layer (h_0 = 0)."""
        weight = self.dense.weight
        return tuple(weight.new_zeros(batch_size, self.hidden_size) for _ in range(self.num_layers))

    def step(self, state: RecurrentState, item: Tensor) -> tuple[RecurrentState, Tensor]:
        """Feed one event per user: item (B,) -> (new state, hidden (B, d)) = o_t = W h_t + b of the top layer.

        Item 0 (padding) leaves that row's state unchanged and outputs 0, as ``forward`` does at padding.
        """
        real = item > 0  # (B,)
        h = torch.stack(state, dim=0)  # (layers, B, H)
        x = self.embedding_dropout(self.item_embedding(item)).unsqueeze(1)  # (B, 1, d)
        _, h_next = self.gru(x, h.contiguous())  # (layers, B, H)
        h_next = torch.where(real.view(1, -1, 1), h_next, h)
        out = self.dense(self.hidden_dropout(h_next[-1])) * real.unsqueeze(-1).to(h_next.dtype)  # (B, d)
        return tuple(h_next.unbind(0)), out

    def prefill(self, items: Tensor) -> tuple[RecurrentState, Tensor]:
        """A left-padded history (B, L) at once -> (state after its newest real event, hidden (B, L, d)).

        Rows are rotated to right padding and packed with their lengths, so the GRU stops at each row's
        last real event; an all-padding row keeps the empty state.
        """
        B, L = items.shape
        real = items != 0  # (B, L)
        lengths = real.sum(dim=1)  # (B,)
        pad = L - lengths
        shifted = rotate_rows(items, pad)  # (B, L): real items first
        x = self.embedding_dropout(self.item_embedding(shifted))  # (B, L, d)
        packed = pack_padded_sequence(x, lengths.clamp_min(1).cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)  # (layers, B, H) at each row's last packed step
        h_n = h_n * (lengths > 0).view(1, -1, 1).to(h_n.dtype)  # all-padding rows: the empty state
        return tuple(h_n.unbind(0)), self(items)
