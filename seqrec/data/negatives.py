"""Negative samplers: uniform or popularity-proportional, excluding a user's items; frozen evaluation candidates."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np

from seqrec.data.sequences import Sequences
from seqrec.data.splits import EvalExamples

log = logging.getLogger(__name__)

Sampler = Literal["uniform", "popularity"]


def item_distribution(sequences: Sequences, sampler: Sampler, counts: np.ndarray | None = None) -> np.ndarray:
    """(num_items + 1,) sampling probabilities: uniform over 1..N, or ∝ item counts (index 0 gets 0)."""
    n = sequences.num_items
    if sampler == "uniform":
        weights = np.ones(n + 1)
    elif sampler == "popularity":
        weights = (sequences.item_counts() if counts is None else counts).astype(np.float64)
    else:
        raise ValueError(f"negative sampler must be 'uniform' or 'popularity', got {sampler!r}")
    weights[0] = 0.0
    if weights.sum() <= 0:
        raise ValueError("cannot sample negatives: every item has zero weight")
    return weights / weights.sum()


def sample_negatives(
    sequences: Sequences,
    examples: EvalExamples,
    num_negatives: int,
    probabilities: np.ndarray,
    seed: int,
) -> np.ndarray:
    """(Q, num_negatives) distinct items per query, drawn from ``probabilities``, none in the user's sequence.

    The user's *whole* sequence is excluded (history, validation and test items alike), as SASRec,
    RecBole and MLP4Rec do. Raises ValueError when a user has fewer eligible items than requested.
    """
    rng = np.random.default_rng(seed)
    out = np.empty((len(examples), num_negatives), dtype=np.int64)
    support = int(np.count_nonzero(probabilities))
    for j, user in enumerate(examples.user):
        seen = np.unique(sequences.sequence(int(user)))
        eligible = support - int(np.count_nonzero(probabilities[seen]))
        if eligible < num_negatives:
            raise ValueError(
                f"user row {user} has only {eligible} items left to sample from but {num_negatives} "
                "negatives were requested: lower eval_negatives"
            )
        chosen: np.ndarray = np.empty(0, dtype=np.int64)
        while len(chosen) < num_negatives:
            draw = rng.choice(len(probabilities), size=2 * num_negatives, p=probabilities)
            draw = draw[~np.isin(draw, seen)]
            # keep first occurrences only, preserving draw order (sampling without replacement)
            merged = np.concatenate([chosen, draw])
            _, first = np.unique(merged, return_index=True)
            chosen = merged[np.sort(first)]
        out[j] = chosen[:num_negatives]
    return out


def frozen_negatives(
    sequences: Sequences,
    examples: EvalExamples,
    num_negatives: int,
    sampler: Sampler,
    seed: int,
    cache_dir: Path | None,
    tag: str,
    counts: np.ndarray | None = None,
) -> np.ndarray:
    """Evaluation candidates drawn once, seeded, stored under ``cache_dir`` and reused by every run and rank.

    The file name hashes (tag, sampler, count, seed, the queries) so a change to any of them draws anew.
    """
    probabilities = item_distribution(sequences, sampler, counts)
    digest = hashlib.sha256()
    for part in (tag, sampler, str(num_negatives), str(seed)):
        digest.update(part.encode())
    digest.update(examples.user.tobytes())
    digest.update(examples.target.tobytes())
    digest.update(probabilities.tobytes())
    path = None if cache_dir is None else Path(cache_dir) / f"negatives-{digest.hexdigest()[:20]}.npy"
    if path is not None and path.exists():
        try:
            negatives = np.load(path, allow_pickle=False)
            if negatives.shape == (len(examples), num_negatives):
                return negatives
        except (ValueError, OSError):
            pass
        log.warning("negative cache %s is unreadable or has the wrong shape: drawing again", path)
    negatives = sample_negatives(sequences, examples, num_negatives, probabilities, seed)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".negatives-", suffix=".npy", dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, negatives, allow_pickle=False)
        os.replace(tmp, path)
    return negatives
