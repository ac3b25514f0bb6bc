"""Compression wrappers around the CTR transformer: token pruning, token merging, KV-cache eviction.

Each wrapper is configurable in YAML (``class_path`` + ``init_args: {backbone: ..., ratio: 0.25}``), keeps a
budget of entries per layer and reports what it kept (``kept_lengths``, ``costs``). ``build(method, backbone,
ratio)`` makes one by name; ``METHODS`` lists the names.
"""

from __future__ import annotations

from torch import nn

from seqrec.compress.base import CompressedCTR, Uncompressed, kept_budget
from seqrec.compress.kv_cache import H2O, SnapKV, StreamingLLM
from seqrec.compress.merge import TokenMerging
from seqrec.compress.prune import TokenPruning

METHODS = ("uncompressed", "prune", "prune-target", "tome", "streaming", "h2o", "snapkv")

__all__ = ["H2O", "METHODS", "CompressedCTR", "SnapKV", "StreamingLLM", "TokenMerging", "TokenPruning",
           "Uncompressed", "build", "kept_budget"]


def build(method: str, backbone: nn.Module, ratio: float | None = 1.0, tokens: int | None = None) -> CompressedCTR:
    """The wrapper named ``method`` (one of ``METHODS``) around ``backbone`` with the given budget."""
    if method == "uncompressed":
        return Uncompressed(backbone)
    if method in ("prune", "prune-target"):
        return TokenPruning(backbone, ratio, tokens, scorer="last" if method == "prune" else "target")
    classes = {"tome": TokenMerging, "streaming": StreamingLLM, "h2o": H2O, "snapkv": SnapKV}
    if method not in classes:
        raise ValueError(f"unknown compression method {method!r}; known: {METHODS}")
    return classes[method](backbone, ratio, tokens)
