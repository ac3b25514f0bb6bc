"""The optimiser every task builds: Adam or AdamW with decay / no-decay parameter groups."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


def build_optimizer(
    named_parameters: Iterable[tuple[str, nn.Parameter]],
    optimizer: str,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    no_decay: list[str] | None,
) -> torch.optim.Optimizer | None:
    """Adam/AdamW; parameters whose names contain any of ``no_decay`` (default "bias", "layer_norm",
    LRURec's rule) get no weight decay. None when nothing is trainable (e.g. the popularity model)."""
    params = [(n, p) for n, p in named_parameters if p.requires_grad]
    if not params:
        return None
    no_decay = no_decay if no_decay is not None else ["bias", "layer_norm"]
    groups = [
        {"params": [p for n, p in params if not any(s in n for s in no_decay)], "weight_decay": weight_decay},
        {"params": [p for n, p in params if any(s in n for s in no_decay)], "weight_decay": 0.0},
    ]
    cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    return cls([g for g in groups if g["params"]], lr=lr, betas=tuple(betas), eps=eps)
