"""KV-cache compression of the stored user state: StreamingLLM, H2O, SnapKV.

The history is encoded in full (every layer sees every token, as in an LLM's prefill); afterwards each
layer's stored keys/values keep k entries per head, chosen per method. The target then attends only to
what was kept. Selections are made per layer and, for H2O and SnapKV, per head (as in their papers).

- StreamingLLM (Xiao et al., ICLR 2024): the oldest ``num_sinks`` events (attention sinks) plus the
  newest k − sinks; sinks = min(num_sinks, ⌊k/2⌋) so the recent window never vanishes at small budgets.
- H2O (Zhang et al., NeurIPS 2023): the newest ⌈(1 − heavy_fraction)·k⌉ entries plus the heavy hitters,
  the remaining entries with the largest attention accumulated over all (causal) queries of the prefill.
  The one-shot prompt variant: scores accumulated over the whole prefill, then one eviction.
- SnapKV (Li et al., 2024): the attention of the last ``window`` queries (observation window) is summed
  per key, pooled along the sequence (``pooling`` "avg" or "max", ``kernel_size``, stride 1, same
  padding), and the top k − w keys outside the window are kept with the newest w = min(window, ⌊k/2⌋).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqrec.compress.base import CompressedCTR, newest_slots, select_per_head, top_slots
from seqrec.models.base import LayerCache, LayerTrace, TokenState


class StreamingLLM(CompressedCTR):
    """Attention sinks (the oldest events) plus a recent window."""

    method = "streaming"

    def __init__(
        self,
        backbone: nn.Module | Callable[[int, int], nn.Module],
        ratio: float | None = 1.0,
        tokens: int | None = None,
        num_sinks: int = 4,
        num_items: int | None = None,
        max_len: int | None = None,
    ) -> None:
        super().__init__(backbone, ratio, tokens, num_items, max_len)
        if num_sinks < 0:
            raise ValueError(f"num_sinks must be >= 0, got {num_sinks}")
        self.num_sinks = num_sinks

    def compress_layer(self, layer: int, trace: LayerTrace, tokens: TokenState, cache: LayerCache, k: Tensor) -> tuple[TokenState, LayerCache]:
        """Keep sinks + recent, the same slots in every head."""
        real = tokens.real
        n = real.shape[1]
        sinks = torch.minimum(torch.full_like(k, self.num_sinks), k // 2)
        from_start = torch.arange(n, device=real.device)[None, :] - (n - real.sum(dim=1))[:, None]  # 0 = oldest
        keep = newest_slots(real, k - sinks) | (real & (from_start < sinks[:, None]))
        h = cache.keys.shape[1]
        return tokens, select_per_head(cache, keep[:, None, :].expand(-1, h, -1))


class H2O(CompressedCTR):
    """Heavy hitters by accumulated attention plus a recent window, per head."""

    method = "h2o"

    def __init__(
        self,
        backbone: nn.Module | Callable[[int, int], nn.Module],
        ratio: float | None = 1.0,
        tokens: int | None = None,
        heavy_fraction: float = 0.5,
        num_items: int | None = None,
        max_len: int | None = None,
    ) -> None:
        super().__init__(backbone, ratio, tokens, num_items, max_len)
        if not 0.0 <= heavy_fraction <= 1.0:
            raise ValueError(f"heavy_fraction must lie in [0, 1], got {heavy_fraction}")
        self.heavy_fraction = heavy_fraction

    def compress_layer(self, layer: int, trace: LayerTrace, tokens: TokenState, cache: LayerCache, k: Tensor) -> tuple[TokenState, LayerCache]:
        """Recent ⌈(1−f)k⌉ + top ⌊f·k⌋ by Σ_queries attention, per head."""
        real = tokens.real
        queries = real[:, None, :, None].to(trace.weights.dtype)  # padded queries do not vote
        accumulated = (trace.weights * queries).sum(dim=2)  # (B, h, n)
        h = accumulated.shape[1]
        heavy = torch.floor(k.double() * self.heavy_fraction).long()
        recent = newest_slots(real, k - heavy)  # (B, n)
        recent_h = recent[:, None, :].expand(-1, h, -1)
        candidates = real[:, None, :] & ~recent_h
        keep = recent_h | top_slots(accumulated, candidates, heavy[:, None].expand(-1, h))
        return tokens, select_per_head(cache, keep)


class SnapKV(CompressedCTR):
    """Observation-window votes, pooled, per head, plus the window itself."""

    method = "snapkv"

    def __init__(
        self,
        backbone: nn.Module | Callable[[int, int], nn.Module],
        ratio: float | None = 1.0,
        tokens: int | None = None,
        window: int = 16,
        kernel_size: int = 5,
        pooling: Literal["avg", "max"] = "avg",
        num_items: int | None = None,
        max_len: int | None = None,
    ) -> None:
        super().__init__(backbone, ratio, tokens, num_items, max_len)
        if window < 1 or kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"need window >= 1 and an odd kernel_size >= 1, got {window}, {kernel_size}")
        if pooling not in ("avg", "max"):
            raise ValueError(f"pooling must be 'avg' or 'max', got {pooling!r}")
        self.window, self.kernel_size, self.pooling = window, kernel_size, pooling

    def compress_layer(self, layer: int, trace: LayerTrace, tokens: TokenState, cache: LayerCache, k: Tensor) -> tuple[TokenState, LayerCache]:
        """Votes of the last ``window`` real queries, pooled; keep the window's newest w plus the top k − w."""
        real = tokens.real
        B, h, n, _ = trace.weights.shape
        observers = newest_slots(real, torch.full_like(k, self.window))  # (B, n) the observation window
        votes = (trace.weights * observers[:, None, :, None].to(trace.weights.dtype)).sum(dim=2)  # (B, h, n)
        flat = votes.reshape(B * h, 1, n)
        pad = self.kernel_size // 2
        if self.pooling == "avg":
            pooled = F.avg_pool1d(flat, self.kernel_size, stride=1, padding=pad)
        else:
            pooled = F.max_pool1d(flat, self.kernel_size, stride=1, padding=pad)
        pooled = pooled.view(B, h, n)
        w = torch.minimum(torch.full_like(k, self.window), k // 2)
        kept_window = newest_slots(real, w)[:, None, :].expand(-1, h, -1)
        candidates = real[:, None, :] & ~kept_window
        keep = kept_window | top_slots(pooled, candidates, (k - w)[:, None].expand(-1, h))
        return tokens, select_per_head(cache, keep)
