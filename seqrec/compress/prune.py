"""Attention-score token pruning: drop the history tokens least attended, per layer.

At every layer whose history still holds more than the budget k, the attention a_j that token j
receives from the scoring query (averaged over heads) ranks the tokens; the top k survive, in their
order. The dropped tokens leave the layer's stored keys/values and every later layer (less state, and
less prefill compute after the layer where they go). Choices (options):

- ``scorer="last"``: the query of the newest history event (known before any target: the pruned state
  is stored and reused for every target). Pruning happens in the first layer, where all tokens are
  still present, and that layer's attention itself is the full one; its stored cache keeps the top k.
- ``scorer="target"``: the target's own query (DIN-style relevance). The state then depends on the
  target, so nothing can be stored: every request re-encodes the history (``cacheable = False``); the
  target at each layer attends only to the k tokens it ranks highest (top-k attention), and the
  history tokens not kept are dropped for the following layers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn

from seqrec.compress.base import CompressedCTR, keep_tokens, top_slots
from seqrec.models.base import LayerCache, LayerTrace, TokenState


class TokenPruning(CompressedCTR):
    """Keep the k history tokens most attended by the newest event ("last") or by the target ("target")."""

    method = "prune"

    def __init__(
        self,
        backbone: nn.Module | Callable[[int, int], nn.Module],
        ratio: float | None = 1.0,
        tokens: int | None = None,
        scorer: Literal["last", "target"] = "last",
        num_items: int | None = None,
        max_len: int | None = None,
    ) -> None:
        super().__init__(backbone, ratio, tokens, num_items, max_len)
        if scorer not in ("last", "target"):
            raise ValueError(f"scorer must be 'last' or 'target', got {scorer!r}")
        self.scorer = scorer
        self.cacheable = scorer == "last"
        self.method = "prune" if scorer == "last" else "prune-target"

    def compress_layer(self, layer: int, trace: LayerTrace, tokens: TokenState, cache: LayerCache, k: Tensor) -> tuple[TokenState, LayerCache]:
        """Scores = mean over heads of the newest query's attention; keep the top k (B,)."""
        scores = trace.weights[:, :, -1, :].mean(dim=1)  # (B, n): the newest real token sits at the last slot
        keep = top_slots(scores, tokens.real, k)
        return keep_tokens(tokens, cache, keep)

    def forward(self, history: Tensor, targets: Tensor) -> Tensor:
        """Logits; with ``scorer="target"`` the history is re-encoded for every target (no stored state)."""
        if self.scorer == "last":
            return super().forward(history, targets)
        squeeze = targets.dim() == 1
        targets = targets.unsqueeze(-1) if squeeze else targets
        B, C = targets.shape
        logits = self._target_aware(history.repeat_interleave(C, dim=0), targets.reshape(B * C, 1)).view(B, C)
        return logits.squeeze(-1) if squeeze else logits

    def prefill(self, history: Tensor):  # noqa: ANN201
        """The stored state ("last" only: a target-aware pruned state does not exist before the target)."""
        if self.scorer == "target":
            raise RuntimeError("TokenPruning(scorer='target') depends on the target: it has no stored state; call forward")
        return super().prefill(history)

    def _target_aware(self, history: Tensor, targets: Tensor) -> Tensor:
        """history (R, L), targets (R, 1) -> logits (R,): joint pass, pruning by the target's attention."""
        bb = self.backbone
        tokens = bb.embed_history(history)
        self._n = tokens.real.sum(dim=1)
        k = self.budget(self._n)
        t = bb.embed_targets(targets, self._n[:, None])  # (R, 1, d)
        layer_tokens, kept, extra = [], [], torch.zeros(len(history), dtype=torch.float64)
        for block in bb.blocks:
            layer_tokens.append(tokens.real.sum(dim=1))
            out_tokens, cache, _ = bb.history_layer(block, tokens)
            q, k_self, v_self = block.qkv(t)  # (R, h, 1, d/h)
            out, weights = block.attend_target(q, k_self, v_self, cache.keys, cache.values, cache.mask[:, :, None, :],
                                               bb.target_bias(block, cache, self._n))
            if bool((cache.lengths() > k).any()):
                keep = top_slots(weights.mean(dim=1)[:, 0, :], out_tokens.real, k)  # (R, n)
                extra += 2 * cache.lengths().double() * bb.d_model  # the ranking pass over every key
                out_tokens, cache = keep_tokens(out_tokens, cache, keep)
                out, _ = block.attend_target(q, k_self, v_self, cache.keys, cache.values, cache.mask[:, :, None, :],
                                             bb.target_bias(block, cache, self._n))
            t = block.finish(t, out)
            kept.append(cache.lengths())
            tokens = out_tokens
        self._record(kept, layer_tokens, extra)
        return bb.head(bb.final_layer_norm(t), bb.item_embedding(targets)).squeeze(-1)
