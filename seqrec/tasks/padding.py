"""Multi-process evaluation pads shards with flagged copies (``valid=False``); tasks drop them before metrics."""

from __future__ import annotations

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
