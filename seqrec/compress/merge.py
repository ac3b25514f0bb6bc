"""ToMe token merging (Bolya et al., ICLR 2023): bipartite soft matching, size-weighted averages,
proportional attention.

At a layer whose history holds more than the budget k, tokens are split alternately into sets A and B
(counted from the newest, so the newest event is always in B and never merged away). Each A token
finds its most similar B token by the cosine similarity of this layer's keys (averaged over heads, as
ToMe's metric); the r A tokens with the most similar matches are merged into their B partners:

    x_b ← (s_b x_b + Σ_a s_a x_a) / (s_b + Σ_a s_a),   s_b ← s_b + Σ_a s_a

for the layer output x (what the next layer sees) and for this layer's keys and values (the stored
cache); s counts the original tokens in each merged token. Proportional attention adds log s_j to every
attention logit toward token j (later history layers and the target). One matching round removes at
most |A| ≈ n/2 tokens, so rounds repeat until k remain (with r = n − k, capped at |A|, each round).

Choices (ToMe is defined for ViTs, not causal sequences): a merged token takes the position of its
newest member (so no token ever sees a merged token holding a later event); merging happens after
the whole block (ToMe merges between attention and MLP), so the layer's output and its cache are merged
with one assignment; all merging needed for the budget happens in the first layer whose history exceeds
k, so every layer stores at most k entries.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqrec.compress.base import CompressedCTR, compact_order, gather_slots, top_slots
from seqrec.models.base import LayerCache, LayerTrace, TokenState


def bipartite_matching(metric: Tensor, real: Tensor, r: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One round of bipartite soft matching on left-padded rows.

    metric (B, n, c) L2-normalised, real (B, n), r (B,) tokens to remove per row. Returns
    (dest (B, n): every slot's destination slot (itself unless merged), removed (B, n) bool,
    similarity MACs per row (B,) = |A_real|·|B_real|·c).
    """
    B, n, c = metric.shape
    from_end = torch.arange(n - 1, -1, -1, device=metric.device)
    in_b = from_end % 2 == 0  # the newest slot (n - 1) is a destination
    a_idx, b_idx = torch.nonzero(~in_b).squeeze(1), torch.nonzero(in_b).squeeze(1)
    a_real, b_real = real[:, a_idx], real[:, b_idx]
    sim = metric[:, a_idx] @ metric[:, b_idx].transpose(-1, -2)  # (B, nA, nB)
    sim = sim.masked_fill(~b_real[:, None, :], float("-inf"))
    best, match = sim.max(dim=-1)  # (B, nA)
    merged = top_slots(best, a_real, torch.minimum(r, a_real.sum(dim=1)))  # (B, nA)
    dest = torch.arange(n, device=metric.device).repeat(B, 1)
    dest[:, a_idx] = torch.where(merged, b_idx[match], a_idx[None, :].expand(B, -1))
    removed = torch.zeros_like(real)
    removed[:, a_idx] = merged
    macs = a_real.sum(dim=1).double() * b_real.sum(dim=1).double() * c
    return dest, removed, macs


def merge_weighted(values: Tensor, sizes: Tensor, dest: Tensor) -> Tensor:
    """Size-weighted means at the destinations: values (B, n, F), sizes (B, n), dest (B, n) -> (B, n, F)."""
    index = dest.unsqueeze(-1).expand_as(values)
    acc = torch.zeros_like(values).scatter_add_(1, index, values * sizes.unsqueeze(-1))
    total = torch.zeros_like(sizes).scatter_add_(1, dest, sizes)
    return acc / total.clamp_min(torch.finfo(total.dtype).tiny).unsqueeze(-1)


class TokenMerging(CompressedCTR):
    """ToMe over the history tokens: merge the most similar tokens until k remain (see module doc)."""

    method = "tome"

    def entry_extra_bytes(self) -> int:
        """Each stored entry also keeps its size (for proportional attention)."""
        return self.backbone.item_embedding.weight.element_size()

    def compress_layer(self, layer: int, trace: LayerTrace, tokens: TokenState, cache: LayerCache, k: Tensor) -> tuple[TokenState, LayerCache]:
        """Merge rounds until every row holds k (B,) tokens; merge outputs, keys and values alike."""
        B, h, n, dh = cache.keys.shape
        real, pos, x = tokens.real, tokens.pos, tokens.x
        sizes = real.to(x.dtype) if tokens.log_size is None else torch.exp(tokens.log_size) * real
        keys = cache.keys.transpose(1, 2).reshape(B, n, h * dh)
        values = cache.values.transpose(1, 2).reshape(B, n, h * dh)
        while True:
            r = torch.clamp(real.sum(dim=1) - k, min=0)
            if int(r.max()) == 0:
                break
            metric = keys.view(B, -1, h, dh).mean(dim=2)
            metric = metric / metric.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            dest, removed, macs = bipartite_matching(metric, real, r)
            self._extra += macs.cpu()
            x, keys, values = (merge_weighted(t, sizes, dest) for t in (x, keys, values))
            pos = pos.scatter_reduce(1, dest, pos, reduce="amax", include_self=True)
            sizes = torch.zeros_like(sizes).scatter_add_(1, dest, sizes)
            order, real = compact_order(real & ~removed)
            x, keys, values, sizes, pos = (gather_slots(t, order) for t in (x, keys, values, sizes, pos))
        x = x * real.unsqueeze(-1)
        pos = pos.masked_fill(~real, -1)
        log_size = torch.log(sizes.clamp_min(1.0)).masked_fill(~real, 0.0)
        width = real.shape[1]
        new_cache = LayerCache(
            keys=keys.view(B, width, h, dh).transpose(1, 2), values=values.view(B, width, h, dh).transpose(1, 2),
            mask=real[:, None, :], pos=pos[:, None, :], log_size=log_size[:, None, :],
        )
        return TokenState(x=x, real=real, pos=pos, log_size=log_size), new_cache
