"""The compressor contract of attention CTR backbones: the stored state and the per-layer hook.

``CTRTransformer.prefill`` encodes a history layer by layer; after every layer it hands a compressor
(``seqrec.compress``) what that layer saw (``LayerTrace``), the tokens the next layer would see
(``TokenState``) and the keys and values stored for the target (``LayerCache``). The compressor returns
the tokens and the cache to keep. The stored state of a user is one ``LayerCache`` per layer (``KVState``).
Defined once here and re-exported by ``seqrec.models.base``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch import Tensor


@dataclass
class TokenState:
    """History tokens flowing through the layers (left-padded)."""

    x: Tensor  # (B, n, d)
    real: Tensor  # (B, n) bool, False at padding (and at dropped / merged-away tokens)
    pos: Tensor  # (B, n) long, position from the oldest history item (a merged token: its newest member)
    log_size: Tensor | None = None  # (B, n) log of the number of original tokens merged into each (ToMe)


@dataclass
class LayerCache:
    """The stored keys and values of one layer that the target attends to."""

    keys: Tensor  # (B, h, K, d/h)
    values: Tensor  # (B, h, K, d/h)
    mask: Tensor  # (B, 1 or h, K) bool, True at a stored entry
    pos: Tensor | None = None  # (B, 1 or h, K) long: the entry's position (recency bias of the target)
    log_size: Tensor | None = None  # (B, 1 or h, K): proportional attention adds log(size)

    def lengths(self) -> Tensor:
        """(B,) stored entries per head (the same for every head)."""
        return self.mask.sum(-1).max(dim=1).values


@dataclass
class KVState:
    """A user's stored state: one ``LayerCache`` per layer and the target's position (= history length)."""

    layers: list[LayerCache]
    target_position: Tensor  # (B,) long

    def kept_lengths(self) -> list[Tensor]:
        """Per layer, (B,) stored entries per head."""
        return [layer.lengths() for layer in self.layers]


@dataclass
class LayerTrace:
    """What a compressor may read about one layer of ``prefill``: its input tokens and attention."""

    tokens: TokenState  # the layer's input
    queries: Tensor  # (B, h, n, d/h)
    weights: Tensor  # (B, h, n, n) attention probabilities (before dropout)


@runtime_checkable
class Compressor(Protocol):
    """The hook ``prefill`` calls after every layer (``seqrec.compress.CompressedCTR`` implements it)."""

    def compress(
        self, layer: int, trace: LayerTrace, tokens: TokenState, cache: LayerCache
    ) -> tuple[TokenState, LayerCache]:
        """Return the tokens the next layer sees and the cache stored for this layer."""
        ...
