"""LRU as a fixed-state CTR backbone: LRURec's recurrent blocks encode the history into O(1) state.

Built from ``seqrec.models.next_item.lru`` (``LRUBlock``: LRU layer + PFFN, the LRURec layer stack)::

    x = LayerNorm(Dropout(E[items]));  x = num_layers × LRUBlock(x)      # h_t = λ ⊙ h_{t-1} + γ ⊙ (B x_t + b)
    u = x at the newest history event
    logit = MLP([u; e; u ⊙ e]),  e = E[target]                              # same head as CTRTransformer

The stored per-user state (``LRUCTRState``) is the recurrent state of every layer (complex64, H = 2d
each) plus u (d floats): u scores any target at the cost of the head alone, and the recurrent states
extend the user with a new event in O(1) (``step``) without revisiting the history. Its size does not
depend on the history length: the compression-free reference of the benchmark.

MACs (one fused multiply-add = 1, a complex MAC = 4 real): per event and layer the input projection
2·H·d (complex weights applied to a real input), the recurrence 4·H (elementwise, uncounted by
``torch.utils.flop_counter``), the real part of the output projection 2·H·d, the PFFN 8·d². The
sequential recurrence is counted; the parallel scan used in training does O(log L) more elementwise work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqrec.models.base import CTRBackbone, truncated_normal_
from seqrec.models.ctr.head import CTRHead
from seqrec.models.layers import Dropout
from seqrec.models.next_item.lru import LRUBlock


@dataclass
class LRUCTRState:
    """A user's fixed-size state: recurrent state per layer (B, H) complex64, and the newest output u (B, d)."""

    recurrent: tuple[Tensor, ...]
    hidden: Tensor


class CTRLRU(CTRBackbone):
    """LRURec's recurrent stack as a CTR backbone with a fixed-size stored state (see module doc).

    ``max_len`` is None: a recurrent state takes histories of any length.
    """

    max_len: int | None = None

    def __init__(
        self,
        num_items: int,
        d_model: int = 64,
        num_layers: int = 2,
        dropout: float = 0.1,
        state_multiplier: int = 2,
        r_min: float = 0.8,
        r_max: float = 0.99,
        scan: str = "parallel",
        head_hidden: int | None = None,
    ) -> None:
        super().__init__()
        if num_items < 1:
            raise ValueError(f"num_items must be >= 1, got {num_items}")
        self.num_items, self.d_model = num_items, d_model
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.embedding_dropout = Dropout(dropout)
        self.embedding_layer_norm = nn.LayerNorm(d_model)
        self.blocks = nn.ModuleList(
            LRUBlock(d_model, dropout, dropout, state_multiplier, r_min, r_max, scan) for _ in range(num_layers)
        )
        self.head = CTRHead(d_model, head_hidden or d_model, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """LRURec's init: truncated normal (std 0.02, ±0.04) except LayerNorms and ``params_log``."""
        for name, p in self.named_parameters():
            if "layer_norm" not in name and "params_log" not in name:
                truncated_normal_(p)

    def embed(self, items: Tensor) -> Tensor:
        """items (...) -> LayerNorm(Dropout(E[items])) (..., d)."""
        return self.embedding_layer_norm(self.embedding_dropout(self.item_embedding(items)))

    def hidden(self, items: Tensor) -> Tensor:
        """items (B, L) pre-padded -> outputs (B, L, d) at every position."""
        mask = items > 0
        x = self.embed(items)
        for block in self.blocks:
            x = block(x, mask)
        return x

    def prefill(self, history: Tensor) -> LRUCTRState:
        """Encode a history (B, L) once -> recurrent states after the newest event and its output."""
        mask = history > 0
        x = self.embed(history)
        states = []
        for block in self.blocks:
            h = block.lru_layer.states(x, mask)  # (B, L, H)
            x = block.feed_forward(block.lru_layer.readout(h, x))
            states.append(h[:, -1])
        return LRUCTRState(recurrent=tuple(states), hidden=x[:, -1])

    def step(self, state: LRUCTRState, item: Tensor) -> LRUCTRState:
        """Extend every user by one event item (B,) in O(1); item 0 leaves the state unchanged."""
        mask = item > 0
        x = self.embed(item)  # (B, d)
        states = []
        for block, h in zip(self.blocks, state.recurrent, strict=True):
            h, x = block.lru_layer.step(h, x, mask)
            x = block.feed_forward(x)
            states.append(h)
        hidden = torch.where(mask.unsqueeze(-1), x, state.hidden)
        return LRUCTRState(recurrent=tuple(states), hidden=hidden)

    def score_state(self, state: LRUCTRState, targets: Tensor) -> Tensor:
        """Logits of targets (B, C) or (B,) from a stored state (the head only)."""
        u = state.hidden if targets.dim() == 1 else state.hidden.unsqueeze(1)
        return self.head(u.expand(*targets.shape, -1), self.item_embedding(targets))

    def forward_windows(self, items: Tensor, targets: Tensor) -> Tensor:
        """items (B, L), targets (B, L, C) -> logits (B, L, C); position t sees items[:, :t+1]."""
        u = self.hidden(items).unsqueeze(2)  # (B, L, 1, d)
        return self.head(u.expand(*targets.shape, -1), self.item_embedding(targets))

    # --- cost accounting --------------------------------------------------------------------------
    def event_macs(self, include_recurrence: bool = True) -> float:
        """MACs to fold one event into the state: Σ_layers (4·H·d + 8·d² [+ 4·H recurrence])."""
        total = 0
        for block in self.blocks:
            H, d = block.lru_layer.state_size, self.d_model
            ffn = block.feed_forward.w_1.out_features
            total += 4 * H * d + 2 * d * ffn + (4 * H if include_recurrence else 0)
        return float(total)

    def macs_per_request(self, L: int | None = None) -> float:
        """MACs to score one target from the stored state: the head only (independent of L)."""
        return float(self.head.macs())

    def macs_per_user_prefill(self, L: int | None = None) -> float:
        """MACs to build the state from L events (sequential recurrence counted)."""
        return float(L or 0) * self.event_macs()

    def state_bytes_per_user(self, L: int | None = None) -> float:
        """Σ_layers H · 8 bytes (complex64 recurrent state) + d · itemsize (the newest output u)."""
        itemsize = self.item_embedding.weight.element_size()
        return float(sum(b.lru_layer.state_size * 8 for b in self.blocks) + self.d_model * itemsize)

    def macs_per_sequence(self, seq_len: int) -> int:
        """``DeclaresMACs``: MACs to encode one history of seq_len items (sequential recurrence)."""
        return int(seq_len * self.event_macs())

    def kept_lengths(self, L: int | None = None) -> list[int]:
        """A fixed state keeps no tokens: 0 per layer."""
        return [0] * len(self.blocks)
