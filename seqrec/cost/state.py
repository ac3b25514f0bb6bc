"""Bytes of per-user state a served model keeps between requests (KV cache, recurrent state, stored hidden states).

Resolution, most specific first:

1. ``model.state_bytes(batch_size=1, seq_len=L)`` when the model is a ``DeclaresStateBytes``
   (``seqrec.models.base``): the model says it (LRURec: Σ_layers H · 8 bytes of complex64 state; a model
   that stores hidden states: what it stores).
2. Otherwise the layers are recognised:
   - attention layers keep a KV cache: kept_tokens · (d_k + d_v) · bytes per layer, for modules with
     ``k_proj`` and ``v_proj`` ``nn.Linear`` children (``seqrec.models.layers.MultiHeadAttention``) and for
     ``nn.MultiheadAttention`` (kdim + vdim). kept_tokens = ``model.kept_lengths()[i]`` when the model
     (or its compression wrapper) is a ``DeclaresKeptLengths``, reporting the tokens each attention layer
     keeps, else the sequence length;
   - ``nn.RNN/GRU/LSTM`` keep layers · directions · hidden (LSTM: + the cell state) values.
3. Nothing recognised: 0 bytes (the model must recompute from the history; define ``state_bytes`` if it
   keeps something).

Bytes per value: ``dtype`` when given (e.g. torch.bfloat16 for a bf16 cache), else the layer's weight dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from seqrec.models.base import DeclaresKeptLengths, DeclaresStateBytes


@dataclass
class StateBytes:
    """Per-user state bytes and where the number came from ("declared", "kv_cache", "recurrent", "none")."""

    per_user: int
    source: str
    detail: str = ""


def attention_layers(model: nn.Module) -> list[tuple[nn.Module, int]]:
    """Attention modules in forward order, with the values per kept token they cache (d_k + d_v)."""
    layers: list[tuple[nn.Module, int]] = []
    for module in model.modules():
        if isinstance(module, nn.MultiheadAttention):
            layers.append((module, module.kdim + module.vdim))
        else:
            k, v = getattr(module, "k_proj", None), getattr(module, "v_proj", None)
            if isinstance(k, nn.Linear) and isinstance(v, nn.Linear):
                layers.append((module, k.out_features + v.out_features))
    return layers


def _element_size(module: nn.Module, dtype: torch.dtype | None) -> int:
    if dtype is not None:
        return torch.empty((), dtype=dtype).element_size()
    for p in module.parameters():
        if p.is_floating_point():
            return p.element_size()
    return 4


def kept_lengths(model: nn.Module) -> list[int] | None:
    """``model.kept_lengths()`` (tokens kept per attention layer) for a ``DeclaresKeptLengths``, else None."""
    return [int(n) for n in model.kept_lengths()] if isinstance(model, DeclaresKeptLengths) else None


def state_bytes_per_user(model: nn.Module, seq_len: int, dtype: torch.dtype | None = None) -> StateBytes:
    """Bytes of state one user's served model keeps after a history of ``seq_len`` events (see module doc)."""
    if isinstance(model, DeclaresStateBytes):
        declared = model.state_bytes(batch_size=1, seq_len=seq_len)
        return StateBytes(int(declared), "declared", f"{type(model).__name__}.state_bytes()")
    total, parts = 0, []
    layers = attention_layers(model)
    if layers:
        kept = kept_lengths(model)
        if kept is not None and len(kept) != len(layers):
            raise ValueError(
                f"{type(model).__name__}.kept_lengths() returned {len(kept)} lengths but the model has "
                f"{len(layers)} attention layers: return one kept-token count per attention layer, in forward order"
            )
        for i, (module, width) in enumerate(layers):
            tokens = seq_len if kept is None else kept[i]
            total += tokens * width * _element_size(module, dtype)
        parts.append(f"KV cache of {len(layers)} attention layers")
    for module in model.modules():
        if isinstance(module, nn.RNNBase):
            directions = 2 if module.bidirectional else 1
            width = module.proj_size if getattr(module, "proj_size", 0) else module.hidden_size
            values = module.num_layers * directions * width
            if isinstance(module, nn.LSTM):
                values += module.num_layers * directions * module.hidden_size  # cell state
            total += values * _element_size(module, dtype)
            parts.append(f"{type(module).__name__} state")
    if not parts:
        return StateBytes(0, "none", "no attention or recurrent layer recognised and no state_bytes() declared")
    source = "kv_cache" if layers and len(parts) == 1 else "recurrent" if not layers else "mixed"
    return StateBytes(total, source, ", ".join(parts))
