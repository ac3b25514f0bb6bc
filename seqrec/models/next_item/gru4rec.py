"""GRU4Rec (Hidasi et al., ICLR 2016), in the form sequential benchmarks use (RecBole's GRU4Rec): a GRU over item embeddings.

e_t = Dropout(E[i_t]); h_t = GRU(e_t, h_{t-1}) (``num_layers`` stacked, h_0 = 0); o_t = W h_t + b (hidden → d);
scores s_i = o_t · E_i (tied item embedding, no bias).

Padding: inputs are left-padded (newest item at L - 1), but a GRU run over the padded slots would
start the real items from a state the padding produced. Each row is therefore rotated so its real items
start at position 0 (right padding), run through the GRU — causal, so the trailing padding cannot reach
any real position — and rotated back; the output at padded positions is zero. Hence a sequence's
hidden states do not depend on how much padding precedes it.
Initialisation (RecBole): Xavier-normal item embedding, Xavier-uniform GRU weights, PyTorch defaults elsewhere.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqrec.models.base import SequenceRecommender
from seqrec.models.layers import Dropout


def rotate_rows(x: Tensor, shift: Tensor) -> Tensor:
    """out[b, j] = x[b, (j + shift[b]) mod L] for x (B, L, ...) and shift (B,): a per-row roll to the left."""
    B, L = x.shape[:2]
    index = (torch.arange(L, device=x.device).unsqueeze(0) + shift.unsqueeze(1)) % L  # (B, L)
    index = index.view(B, L, *([1] * (x.dim() - 2))).expand_as(x)
    return torch.gather(x, 1, index)


class GRU4Rec(SequenceRecommender):
    """GRU4Rec: embedding → dropout → GRU → Linear(hidden → d), tied scores (module docstring)."""

    def __init__(
        self,
        num_items: int,
        d_model: int = 64,
        hidden_size: int = 128,
        num_layers: int = 1,
        dropout: float = 0.3,
    ) -> None:
        super().__init__()
        if num_items < 1:
            raise ValueError(f"num_items must be >= 1, got {num_items}")
        self.num_items, self.d_model, self.hidden_size, self.num_layers = num_items, d_model, hidden_size, num_layers
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.embedding_dropout = Dropout(dropout)
        self.gru = nn.GRU(d_model, hidden_size, num_layers=num_layers, bias=False, batch_first=True)
        self.dense = nn.Linear(hidden_size, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """RecBole's init: Xavier-normal embedding (padding row zeroed), Xavier-uniform GRU weights."""
        nn.init.xavier_normal_(self.item_embedding.weight)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()
        for name, param in self.gru.named_parameters():
            if name.startswith("weight"):
                nn.init.xavier_uniform_(param)

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table."""
        return self.item_embedding.weight

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded -> hidden (B, L, d); zero at padded positions."""
        B, L = items.shape
        real = items != 0  # (B, L)
        pad = L - real.sum(dim=1)  # (B,) leading padding per row
        shifted = rotate_rows(items, pad)  # (B, L): real items first, padding last
        x = self.embedding_dropout(self.item_embedding(shifted))  # (B, L, d)
        out, _ = self.gru(x)  # (B, L, H)
        out = self.dense(out)  # (B, L, d)
        out = rotate_rows(out, (L - pad) % L)  # back to left padding
        return out * real.unsqueeze(-1).to(out.dtype)
