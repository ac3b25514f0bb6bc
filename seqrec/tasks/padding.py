"""Two kinds of padding a task removes: flagged duplicate queries of multi-process evaluation, and leading
padding columns of left-padded batches."""

from __future__ import annotations

import torch
from torch import Tensor


def drop_padding(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The batch without its padding copies: every per-example tensor keeps the rows where ``valid`` is True.

    Without a ``valid`` key (one process) the batch is returned unchanged.
    """
    valid = batch.get("valid")
    if valid is None:
        return batch
    rows = valid.shape[0]
    return {k: v[valid] if isinstance(v, Tensor) and v.dim() and v.shape[0] == rows else v
            for k, v in batch.items() if k != "valid"}


def leading_padding(items: Tensor) -> int:
    """Number of leading columns of items (B, L) that are padding (0) in every row (L when all are)."""
    real = (items > 0).any(dim=0)  # (L,)
    if not bool(real.any()):
        return items.shape[1]
    return int(real.to(torch.int8).argmax())
