"""Target-aware causal transformer for CTR (TransAct / DIN-style target attention) with a stored KV state.

The history is encoded by causal self-attention; the target item is one more token placed after the
history, which at every layer attends to the history's keys and values of that layer (and to itself),
like the next token of a decoder. Its final representation h, the target embedding e and h ⊙ e feed
an MLP that outputs the click logit::

    x_j = E[item_j] + P[pos_j]                          pos_j = 0..n-1 from the oldest history item
    t   = E[target] + P[n] + τ                          τ: learned "this is the candidate" vector
    per layer (pre-norm):  x ← x + Attn(LN x | causal);  x ← x + FFN(LN x)
                           t ← t + Attn(LN t | keys/values of the history at this layer, and t itself)
                           t ← t + FFN(LN t)
    attention logits: q·k/√(d/h) + b_h(bucket(pos_q − pos_k))     (learned recency bias per head)
    logit = MLP([LN t; e; LN t ⊙ e])

Because history tokens never attend to the target, a user's per-layer keys and values (the KV cache,
``KVState``) can be computed once (``prefill``) and any target scored later from it (``score_state``)
at O(layers · kept · d) cost, with exactly the result of recomputing everything (``forward_full`` is
that recomputation, kept as the reference). Positions count from the oldest history item, so the
state of a history does not depend on which target comes next, and ``forward_windows`` can score the
next event at every position of a training window in one causal pass. Recency (how far back an event
lies from the query) enters through a T5-style relative bias that depends only on position differences,
so stored entries keep their positions (``LayerCache.pos``) and the target reads them at scoring time.

Compression wrappers (``seqrec.compress``) hook into ``prefill`` after every layer: they may drop or
merge history tokens (changing what later layers see) and shrink or reweight the cache of that layer.
The state and the hook (``KVState``, ``LayerCache``, ``LayerTrace``, ``TokenState``, ``Compressor``) are
that contract, defined in ``seqrec.models.ctr.state`` and re-exported by ``seqrec.models.base``. The
attention and the feed-forward come from ``seqrec.models.layers``, the click head from ``seqrec.models.ctr.head``.

MACs count matrix products (Linear layers and attention matmuls), one fused multiply-add = 1 MAC, the
convention of ``torch.utils.flop_counter`` (flops / 2) and fvcore; elementwise work (LayerNorm, softmax,
GELU, the target's 2·d self-attention terms) is not counted. Attention over a history of n tokens is
computed densely (n × n, masked), and counted so.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from seqrec.models.base import CTRBackbone, truncated_normal_
from seqrec.models.ctr.head import CTRHead
from seqrec.models.ctr.state import Compressor, KVState, LayerCache, LayerTrace, TokenState
from seqrec.models.layers import Dropout, FeedForward, MultiHeadAttention

__all__ = ["CTRBlock", "CTRHead", "CTRTransformer", "Compressor", "KVState", "LayerCache", "LayerTrace",
           "RecencyBias", "TokenState", "causal_allowed", "recency_bucket"]


def recency_bucket(distance: Tensor, num_buckets: int, max_distance: int) -> Tensor:
    """T5-style buckets of a distance d >= 0: exact below num_buckets/2, log-spaced up to max_distance."""
    exact = max(num_buckets // 2, 1)
    d = distance.clamp_min(0)
    scale = (num_buckets - exact) / math.log(max(max_distance, exact + 1) / exact)
    far = exact + (torch.log(d.float().clamp_min(1.0) / exact) * scale).long()
    return torch.where(d < exact, d, far.clamp(max=num_buckets - 1))


class RecencyBias(nn.Module):
    """Learned per-head attention bias b_h(bucket(pos_q − pos_k)): how far back the key lies from the query.

    Depends only on distances, so it holds for a stored state (keys keep their positions), in training
    windows and when a history grows; a bias lookup costs no MACs.
    """

    def __init__(self, num_heads: int, num_buckets: int, max_distance: int) -> None:
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bias = nn.Embedding(num_buckets, num_heads)
        nn.init.zeros_(self.bias.weight)

    def forward(self, distance: Tensor) -> Tensor:
        """distance (B, nq, nk) -> bias (B, h, nq, nk)."""
        return self.bias(recency_bucket(distance, self.num_buckets, self.max_distance)).permute(0, 3, 1, 2)

    def per_head(self, distance: Tensor) -> Tensor:
        """distance (B, h or 1, K) -> bias (B, h, K), head h reading its own column."""
        weight = self.bias.weight.T  # (h, buckets)
        bucket = recency_bucket(distance, self.num_buckets, self.max_distance)
        bucket = bucket.expand(bucket.shape[0], weight.shape[0], bucket.shape[2])
        return torch.gather(weight.unsqueeze(0).expand(bucket.shape[0], -1, -1), 2, bucket)


class CTRBlock(nn.Module):
    """Pre-norm transformer block over the written-out ``MultiHeadAttention`` (compressors read its weights, keys, values).

    x ← x + Dropout(W_o Attn(LN x)); x ← x + Dropout(FFN(LN x)), FFN(z) = W₂ Dropout(GELU(W₁ z)).
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, recency_buckets: int = 0,
                 max_distance: int = 200) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.recency = RecencyBias(num_heads, recency_buckets, max_distance) if recency_buckets > 0 else None
        self.attn_layer_norm = nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn_layer_norm = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, activation="gelu")
        self.dropout = Dropout(dropout)

    def qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, n, d) -> q, k, v (B, h, n, d/h) of LN(x)."""
        return self.attention.project(self.attn_layer_norm(x))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """softmax(q kᵀ/√(d/h) + bias, masked to ``allowed``) v -> (out (B, h, nq, d/h), weights (B, h, nq, nk))."""
        return self.attention.attend(q, k, v, allowed, bias)

    def attend_target(
        self, q: Tensor, k_self: Tensor, v_self: Tensor, keys: Tensor, values: Tensor, key_mask: Tensor,
        log_size: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Target queries over stored keys plus their own key: q, k_self, v_self (B, h, C, d/h);
        keys, values (B, h, K, d/h); key_mask broadcastable to (B, h, C, K); log_size to (B, h, 1, K).
        Returns (out (B, h, C, d/h), weights over the stored keys (B, h, C, K))."""
        scale = 1.0 / math.sqrt(self.head_dim)
        logits = (q @ keys.transpose(-1, -2)) * scale  # (B, h, C, K)
        if log_size is not None:
            logits = logits + log_size
        logits = logits.masked_fill(~key_mask, float("-inf"))
        self_logit = (q * k_self).sum(-1, keepdim=True) * scale  # (B, h, C, 1): elementwise
        if self.recency is not None:  # the target sits at distance 0 from itself
            self_logit = self_logit + self.recency.bias.weight[0].view(1, -1, 1, 1)
        weights = torch.softmax(torch.cat([logits, self_logit], dim=-1), dim=-1)  # (B, h, C, K+1)
        dropped = self.attention.drop_weights(weights)
        out = dropped[..., :-1] @ values + dropped[..., -1:] * v_self  # (B, h, C, d/h)
        return out, weights[..., :-1]

    def finish(self, x: Tensor, heads: Tensor) -> Tensor:
        """x ← x + Dropout(W_o heads); x ← x + Dropout(FFN(LN x)). heads (B, h, n, d/h), x (B, n, d)."""
        x = x + self.dropout(self.attention.out_proj(self.attention.merge_heads(heads)))  # (B, n, d)
        return x + self.dropout(self.ffn(self.ffn_layer_norm(x)))

    def token_macs(self) -> int:
        """Per token: q, k, v, out projections 4d² and the FFN 2·d·f."""
        return self.attention.projection_macs() + self.ffn.macs_per_token()


def causal_allowed(tokens: TokenState) -> Tensor:
    """(B, 1, n, n) key j visible to query i: j real and pos_j <= pos_i; a padded query sees itself only."""
    real, pos = tokens.real, tokens.pos
    allowed = real[:, None, :] & (pos[:, None, :] <= pos[:, :, None])  # (B, n, n)
    eye = torch.eye(real.shape[1], dtype=torch.bool, device=real.device)
    allowed = allowed | (eye & ~real[:, :, None])
    return allowed.unsqueeze(1)


class CTRTransformer(CTRBackbone):
    """Causal transformer over the history with target attention; scores click logits (see module doc).

    Args:
        num_items: catalogue size N (ids 1..N; 0 = padding); linked from the data.
        max_len: longest history L (the position table has L + 1 rows: the target sits at n <= L).
        d_model, num_layers, num_heads, ffn_dim (default 4·d_model), dropout: the usual.
        head_hidden: hidden width of the output MLP (default d_model).
        recency_buckets: buckets of the learned per-head recency bias (T5-style relative positions, log-spaced
            up to max_len; 0 disables it). Absolute positions count from the oldest item, so without it the
            target must learn "the newest event" separately for every history length.
    """

    def __init__(
        self,
        num_items: int,
        max_len: int = 200,
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 2,
        ffn_dim: int | None = None,
        dropout: float = 0.1,
        head_hidden: int | None = None,
        recency_buckets: int = 32,
    ) -> None:
        super().__init__()
        if num_items < 1:
            raise ValueError(f"num_items must be >= 1, got {num_items}")
        self.num_items, self.max_len, self.d_model = num_items, max_len, d_model
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.position_embedding = nn.Embedding(max_len + 1, d_model)
        self.target_marker = nn.Parameter(torch.zeros(d_model))
        self.embedding_dropout = Dropout(dropout)
        self.blocks = nn.ModuleList(
            CTRBlock(d_model, num_heads, ffn_dim or 4 * d_model, dropout, recency_buckets, max_len) for _ in range(num_layers)
        )
        self.final_layer_norm = nn.LayerNorm(d_model)
        self.head = CTRHead(d_model, head_hidden or d_model, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated normal (std 0.02, ±0.04) weights, zero biases, unit LayerNorms; padding row zero."""
        for name, p in self.named_parameters():
            if "layer_norm" in name:
                continue
            if "recency" in name:
                continue  # zero: attention starts position-neutral
            if p.dim() > 1 or name == "target_marker":
                truncated_normal_(p)
            else:
                nn.init.zeros_(p)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()

    # --- embeddings -----------------------------------------------------------------------------
    def embed_history(self, history: Tensor) -> TokenState:
        """history (B, n) pre-padded ids -> tokens with positions 0..len-1 from the oldest real item."""
        if history.shape[1] > self.max_len:
            raise ValueError(f"history length {history.shape[1]} exceeds max_len={self.max_len}; set the model's max_len to the data's")
        real = history > 0  # (B, n)
        pos = torch.cumsum(real.long(), dim=1) - 1  # (B, n): -1 at leading padding
        x = self.item_embedding(history) + self.position_embedding(pos.clamp_min(0))
        x = self.embedding_dropout(x) * real.unsqueeze(-1)
        return TokenState(x=x, real=real, pos=pos)

    def embed_targets(self, targets: Tensor, position: Tensor) -> Tensor:
        """targets (B, ...) ids, position broadcastable -> E[t] + P[position] + τ (B, ..., d)."""
        return self.embedding_dropout(self.item_embedding(targets) + self.position_embedding(position) + self.target_marker)

    # --- history encoding with a stored state -----------------------------------------------------
    @staticmethod
    def history_bias(block: CTRBlock, tokens: TokenState) -> Tensor | None:
        """Additive logits of history attention (B, h | 1, n, n): recency bias and ToMe's log(size), or None."""
        bias = None
        if block.recency is not None:
            bias = block.recency(tokens.pos[:, :, None] - tokens.pos[:, None, :])
        if tokens.log_size is not None:
            size = tokens.log_size[:, None, None, :]
            bias = size if bias is None else bias + size
        return bias

    def history_layer(self, block: CTRBlock, tokens: TokenState) -> tuple[TokenState, LayerCache, LayerTrace]:
        """One layer over the history tokens -> (output tokens, this layer's cache, trace for compressors)."""
        q, k, v = block.qkv(tokens.x)  # (B, h, n, d/h)
        bias = self.history_bias(block, tokens)
        out, weights = block.attend(q, k, v, causal_allowed(tokens), bias)
        x = block.finish(tokens.x, out) * tokens.real.unsqueeze(-1)
        log_size = None if tokens.log_size is None else tokens.log_size[:, None, :]
        cache = LayerCache(keys=k, values=v, mask=tokens.real[:, None, :], pos=tokens.pos[:, None, :], log_size=log_size)
        out_tokens = TokenState(x=x, real=tokens.real, pos=tokens.pos, log_size=tokens.log_size)
        return out_tokens, cache, LayerTrace(tokens=tokens, queries=q, weights=weights)

    def prefill(self, history: Tensor, compressor: Compressor | None = None) -> KVState:
        """Encode a history (B, n) once -> the stored state (per-layer keys/values, target position)."""
        tokens = self.embed_history(history)
        position = tokens.real.sum(dim=1)  # (B,): the target's position n
        layers = []
        for i, block in enumerate(self.blocks):
            out_tokens, cache, trace = self.history_layer(block, tokens)
            if compressor is not None:
                out_tokens, cache = compressor.compress(i, trace, out_tokens, cache)
            layers.append(cache)
            tokens = out_tokens
        return KVState(layers=layers, target_position=position)

    def prefill_layers(self, history: Tensor) -> tuple[list[tuple[TokenState, LayerCache, LayerTrace]], Tensor]:
        """The uncompressed prefill, keeping every layer's (output tokens, cache, trace) and the target position.

        Compression wrappers resume from it (``CompressedCTR.prefill_from``) so that several methods
        evaluated on one batch share the layers where their inputs are still identical.
        """
        tokens = self.embed_history(history)
        position = tokens.real.sum(dim=1)
        layers = []
        for block in self.blocks:
            out_tokens, cache, trace = self.history_layer(block, tokens)
            layers.append((out_tokens, cache, trace))
            tokens = out_tokens
        return layers, position

    def target_layer(self, block: CTRBlock, t: Tensor, cache: LayerCache, position: Tensor) -> tuple[Tensor, Tensor]:
        """One layer for target tokens t (B, C, d) at ``position`` (B,) against a stored layer -> (t', weights (B, h, C, K))."""
        q, k, v = block.qkv(t)  # (B, h, C, d/h)
        out, weights = block.attend_target(q, k, v, cache.keys, cache.values, cache.mask[:, :, None, :],
                                           self.target_bias(block, cache, position))
        return block.finish(t, out), weights

    @staticmethod
    def target_bias(block: CTRBlock, cache: LayerCache, position: Tensor) -> Tensor | None:
        """Additive logits of the target over a stored layer (B, h | 1, 1, K): recency from the target
        at ``position`` (B,) and ToMe's log(size), or None."""
        bias = None
        if block.recency is not None:
            bias = block.recency.per_head(position[:, None, None] - cache.pos)[:, :, None, :]
        if cache.log_size is not None:
            size = cache.log_size[:, :, None, :]
            bias = size if bias is None else bias + size
        return bias

    def score_state(self, state: KVState, targets: Tensor) -> Tensor:
        """Logits of targets (B, C) (or (B,)) against a stored state, without touching the history."""
        squeeze = targets.dim() == 1
        targets = targets.unsqueeze(-1) if squeeze else targets  # (B, C)
        t = self.embed_targets(targets, state.target_position.unsqueeze(-1))  # (B, C, d)
        for block, cache in zip(self.blocks, state.layers, strict=True):
            t, _ = self.target_layer(block, t, cache, state.target_position)
        logits = self.head(self.final_layer_norm(t), self.item_embedding(targets))  # (B, C)
        return logits.squeeze(-1) if squeeze else logits

    # --- training: every position of a window at once --------------------------------------------
    def forward_windows(self, items: Tensor, targets: Tensor) -> Tensor:
        """items (B, L) pre-padded window, targets (B, L, C): targets[:, t] scored against items[:, :t+1].

        Equals ``forward(history=items[:, :t+1] pre-padded, targets[:, t])`` at every position t, in one
        causal pass (the target tokens attend to the history keys up to their own position).
        """
        B, L_, C = targets.shape
        tokens = self.embed_history(items)
        position = (tokens.pos + 1).clamp_min(0)  # (B, L): the history length up to t
        t = self.embed_targets(targets, position.unsqueeze(-1)).reshape(B, L_ * C, -1)  # (B, L·C, d)
        key_slot = torch.arange(L_, device=items.device)
        visible = tokens.real[:, None, :] & (key_slot[None, None, :] <= key_slot[None, :, None])  # (B, L, L)
        visible = visible.repeat_interleave(C, dim=1).unsqueeze(1)  # (B, 1, L·C, L)
        distance = (position[:, :, None] - tokens.pos[:, None, :]).repeat_interleave(C, dim=1)  # (B, L·C, L)
        for block in self.blocks:
            q, k, v = block.qkv(t)  # (B, h, L·C, d/h)
            hq, hk, hv = block.qkv(tokens.x)  # (B, h, L, d/h)
            target_bias = None if block.recency is None else block.recency(distance)
            out_t, _ = block.attend_target(q, k, v, hk, hv, visible, target_bias)
            out_h, _ = block.attend(hq, hk, hv, causal_allowed(tokens), self.history_bias(block, tokens))
            t = block.finish(t, out_t)
            tokens = TokenState(x=block.finish(tokens.x, out_h) * tokens.real.unsqueeze(-1), real=tokens.real, pos=tokens.pos)
        logits = self.head(self.final_layer_norm(t), self.item_embedding(targets).reshape(B, L_ * C, -1))
        return logits.view(B, L_, C)

    # --- reference: recompute everything as one causal sequence --------------------------------------
    def forward_full(self, history: Tensor, target: Tensor) -> Tensor:
        """Reference logits (B,): the sequence [history; target] through the blocks with one causal mask."""
        tokens = self.embed_history(history)
        n = tokens.real.sum(dim=1)
        t = self.embed_targets(target, n)  # (B, d)
        x = torch.cat([tokens.x, t.unsqueeze(1)], dim=1)  # (B, L+1, d)
        seq = TokenState(x=x, real=torch.cat([tokens.real, torch.ones_like(tokens.real[:, :1])], dim=1),
                         pos=torch.cat([tokens.pos, n.unsqueeze(1)], dim=1))
        allowed = causal_allowed(seq)
        for block in self.blocks:
            q, k, v = block.qkv(seq.x)
            out, _ = block.attend(q, k, v, allowed, self.history_bias(block, seq))
            seq = TokenState(x=block.finish(seq.x, out) * seq.real.unsqueeze(-1), real=seq.real, pos=seq.pos)
        return self.head(self.final_layer_norm(seq.x[:, -1]), self.item_embedding(target))

    # --- cost accounting (hand formulas; cross-checked against FlopCounterMode in the tests) -----------
    def prefill_macs(self, tokens_per_layer: list[float] | float) -> float:
        """MACs to encode a history: Σ_l [n_l·(4d² + 2df) + 2·n_l²·d] for n_l tokens entering layer l."""
        if not isinstance(tokens_per_layer, list):
            tokens_per_layer = [float(tokens_per_layer)] * len(self.blocks)
        return float(sum(n * b.token_macs() + 2 * n * n * self.d_model for n, b in zip(tokens_per_layer, self.blocks)))

    def score_macs(self, kept_per_layer: list[float] | float, num_targets: int = 1) -> float:
        """MACs to score targets from a state: C·[Σ_l (4d² + 2df + 2·K_l·d) + head]."""
        if not isinstance(kept_per_layer, list):
            kept_per_layer = [float(kept_per_layer)] * len(self.blocks)
        per = sum(b.token_macs() + 2 * k * self.d_model for k, b in zip(kept_per_layer, self.blocks))
        return float(num_targets * (per + self.head.macs()))

    def state_bytes_for(self, kept_per_layer: list[float] | float, extra_per_entry: int = 0) -> float:
        """Bytes of a stored state: Σ_l K_l · (2·d·itemsize + extra) (keys and values of kept entries)."""
        if not isinstance(kept_per_layer, list):
            kept_per_layer = [float(kept_per_layer)] * len(self.blocks)
        itemsize = self.item_embedding.weight.element_size()
        return float(sum(k * (2 * self.d_model * itemsize + extra_per_entry) for k in kept_per_layer))

    def macs_per_request(self, L: int | None = None) -> float:
        """MACs to score one target from the stored state of a user with L history items (default max_len)."""
        return self.score_macs(float(L or self.max_len))

    def macs_per_user_prefill(self, L: int | None = None) -> float:
        """MACs to build the stored state from L history items (default max_len)."""
        return self.prefill_macs(float(L or self.max_len))

    def state_bytes_per_user(self, L: int | None = None) -> float:
        """Bytes of the KV cache for L history items: 2·layers·L·d·itemsize."""
        return self.state_bytes_for(float(L or self.max_len))

    def macs_per_sequence(self, seq_len: int) -> int:
        """``DeclaresMACs``: MACs to encode one history of seq_len items (the prefill)."""
        return int(self.prefill_macs(float(seq_len)))

    def kept_lengths(self, L: int | None = None) -> list[int]:
        """Stored entries per layer for L history items (uncompressed: L everywhere)."""
        return [int(L or self.max_len)] * len(self.blocks)
