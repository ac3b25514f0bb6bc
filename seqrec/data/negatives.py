"""Negative sampling: items a user never touched, uniform or ∝ popularity, and the frozen evaluation candidates.

One contract for every caller, ``sample_unseen(sequences, users, num, rng, probabilities, order)``: a
(Q, num) array with, for each query user, ``num`` distinct items drawn from ``probabilities`` (uniform
over 1..N when None), none of them in that user's **whole** sequence (history, validation and test items
alike, as SASRec, RecBole and MLP4Rec exclude them). Two draw orders consume the random stream
differently; both are kept so that every array drawn so far (cached candidates, reported metrics) stays
bit-identical for the same seed:

- ``"batched"`` (the DIN-style CTR negatives of ``ctr_samples.din_samples``): draw every cell at once,
  then redraw only the rejected cells (an item of the user, or a repeat of an earlier column of the row)
  until none is left;
- ``"per_user"`` (the frozen evaluation candidates of ``frozen_negatives``): user by user, blocks of
  2·num draws, keeping the first distinct unseen items in draw order.

``GeneratedNegatives`` is the other storage of evaluation candidates, for catalogues and candidate counts too
large to store (XLong: 10,000 per query): each query's row is drawn when read, from a generator seeded by
(seed, query index), uniformly over 1..N with replacement and without exclusion, as LRURec's XLong code draws.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np

from seqrec.data.array_cache import load_arrays, save_arrays
from seqrec.data.sequences import Sequences, user_of_offsets
from seqrec.data.splits import EvalExamples

log = logging.getLogger(__name__)

Sampler = Literal["uniform", "popularity"]
DrawOrder = Literal["batched", "per_user"]


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


def _seen_keys(sequences: Sequences) -> np.ndarray:
    """Sorted distinct keys ``user · (N + 1) + item`` of every event (the (user, item) pairs to exclude)."""
    keys = np.sort(user_of_offsets(sequences) * (sequences.num_items + 1) + sequences.items)
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys


def _check_enough_unseen(
    sequences: Sequences, keys: np.ndarray, users: np.ndarray, num: int, probabilities: np.ndarray | None
) -> None:
    """ValueError naming the first query user with fewer than ``num`` samplable items it never touched."""
    stride = sequences.num_items + 1
    key_users, key_items = keys // stride, keys % stride
    if probabilities is None:
        support, samplable = sequences.num_items, np.ones(len(keys), dtype=bool)
    else:
        support, samplable = int(np.count_nonzero(probabilities)), probabilities[key_items] > 0
    eligible = support - np.bincount(key_users[samplable], minlength=sequences.num_users)  # (U,)
    short = np.flatnonzero(eligible[users] < num)
    if len(short):
        user = int(users[short[0]])
        raise ValueError(
            f"user row {user} has only {int(eligible[user])} samplable items it never touched, fewer than the "
            f"{num} negatives requested: lower the number of negatives (eval_negatives / train_negatives)"
        )


def sample_unseen(
    sequences: Sequences,
    users: np.ndarray,
    num: int,
    rng: np.random.Generator,
    probabilities: np.ndarray | None = None,
    order: DrawOrder = "batched",
) -> np.ndarray:
    """(Q, num) items per query user ``users[q]``, distinct within a row, none in that user's whole sequence.

    ``probabilities`` (N + 1,) with a zero at 0 (``item_distribution``); None draws uniformly from 1..N.
    ``order`` picks how the stream of ``rng`` is consumed (module docstring); ValueError when a user has
    fewer than ``num`` samplable items left.
    """
    n_items = sequences.num_items
    users = np.asarray(users, dtype=np.int64)
    if probabilities is not None and len(probabilities) != n_items + 1:
        raise ValueError(f"probabilities must have num_items + 1 = {n_items + 1} entries, got {len(probabilities)}")
    if order not in ("batched", "per_user"):
        raise ValueError(f"order must be 'batched' or 'per_user', got {order!r}")
    stride = n_items + 1
    keys = _seen_keys(sequences)
    _check_enough_unseen(sequences, keys, users, num, probabilities)

    def draw(size: int) -> np.ndarray:
        """(size,) items from 1..N: ``rng.integers`` when uniform (None), else ``rng.choice`` with ``probabilities``."""
        if probabilities is None:
            return rng.integers(1, n_items + 1, size=size)
        return rng.choice(n_items + 1, size=size, p=probabilities)

    def seen(candidates: np.ndarray) -> np.ndarray:
        """True where a ``user · stride + item`` candidate key is an event of that user."""
        if not len(keys):
            return np.zeros(candidates.shape, dtype=bool)
        return keys[np.minimum(np.searchsorted(keys, candidates), len(keys) - 1)] == candidates

    if order == "per_user":
        return _per_user(users, num, stride, draw, seen)
    return _batched(users, num, stride, draw, seen)


def _per_user(
    users: np.ndarray,
    num: int,
    stride: int,
    draw: Callable[[int], np.ndarray],
    seen: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """Users in order; blocks of 2·num draws, unseen ones kept, first occurrences in draw order."""
    out = np.empty((len(users), num), dtype=np.int64)
    for j, user in enumerate(users):
        chosen: np.ndarray = np.empty(0, dtype=np.int64)
        while len(chosen) < num:
            block = draw(2 * num)
            block = block[~seen(user * stride + block)]
            merged = np.concatenate([chosen, block])
            _, first = np.unique(merged, return_index=True)
            chosen = merged[np.sort(first)]  # sampling without replacement, draw order kept
        out[j] = chosen[:num]
    return out


def _batched(
    users: np.ndarray,
    num: int,
    stride: int,
    draw: Callable[[int], np.ndarray],
    seen: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """Every cell drawn at once; only the rejected cells are redrawn, until none is left."""

    def rejected(block: np.ndarray, block_users: np.ndarray) -> np.ndarray:
        """(R, num) True where an item was touched by its user or repeats an earlier column of its row."""
        bad = seen(block_users[:, None] * stride + block)
        for j in range(1, num):
            bad[:, j] |= (block[:, j : j + 1] == block[:, :j]).any(axis=1)
        return bad

    out = draw(len(users) * num).reshape(len(users), num)
    bad = rejected(out, users)
    rows = np.flatnonzero(bad.any(axis=1))  # only rows with a rejected cell are redrawn and checked again
    bad = bad[rows]
    for _ in range(10_000):
        if not len(rows):
            return out
        block = out[rows]
        block[bad] = draw(int(bad.sum()))
        out[rows] = block
        bad = rejected(block, users[rows])
        again = bad.any(axis=1)
        rows, bad = rows[again], bad[again]
    raise RuntimeError("negative sampling did not converge: too few unseen items per user")


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
    """(Q, num_negatives) evaluation candidates drawn once, seeded, stored under ``cache_dir`` and reused.

    The entry (an ``array_cache`` directory ``negatives-<key>``) is keyed by a hash of (tag, sampler,
    count, seed, the queries, the sampling distribution), so a change to any of them draws anew; a corrupt
    entry is reported and drawn again (identically: same seed). Draw order ``"per_user"``.
    """
    probabilities = item_distribution(sequences, sampler, counts)
    digest = hashlib.sha256()
    for part in (tag, sampler, str(num_negatives), str(seed)):
        digest.update(part.encode())
    digest.update(examples.user.tobytes())
    digest.update(examples.target.tobytes())
    digest.update(probabilities.tobytes())
    directory = None if cache_dir is None else Path(cache_dir) / f"negatives-{digest.hexdigest()[:20]}"
    if directory is not None and directory.exists():
        try:
            arrays, _ = load_arrays(directory)
            negatives = arrays["negatives"]
            if negatives.shape == (len(examples), num_negatives):
                return negatives
            log.warning("negative cache %s has shape %s, expected %s: drawing again", directory, negatives.shape,
                        (len(examples), num_negatives))
        except (ValueError, KeyError) as error:
            log.warning("negative cache %s is unreadable (%s): drawing again", directory, error)
    rng = np.random.default_rng(seed)
    negatives = sample_unseen(sequences, examples.user, num_negatives, rng, probabilities, order="per_user")
    if directory is not None:
        save_arrays(directory, {"negatives": negatives}, {"tag": tag, "sampler": sampler, "seed": seed})
    return negatives


class GeneratedNegatives:
    """Per-query evaluation candidates generated on demand: row q is a pure function of (seed, q).

    LRURec's XLong protocol ranks each target against 10,000 items drawn uniformly from 1..N with replacement,
    with no exclusion (an item of the user's history, or the target itself, may be drawn; a drawn target ties
    and ties count for the target, so it never moves the rank). Stored, 69,691 queries × 10,000 int64 ids
    would take 5.6 GB; here row q is drawn from ``numpy.random.default_rng([seed, q])`` when it is read, so
    it is frozen and seeded like a stored set, identical in every process, every run and any batch or
    shard order (a query's row never depends on which other rows were read), and costs nothing to keep.
    Indexing returns a (num,) int64 row, so ``EvalQueries`` takes it wherever it takes a stored array.
    """

    def __init__(self, num_queries: int, num: int, num_items: int, seed: int) -> None:
        if num < 1 or num_items < 1:
            raise ValueError(f"need num >= 1 negatives over num_items >= 1 items, got num={num}, num_items={num_items}")
        if seed < 0:
            raise ValueError(f"the seed of generated negatives must be >= 0, got {seed}")
        self.num_queries, self.num, self.num_items, self.seed = num_queries, num, num_items, seed

    @property
    def shape(self) -> tuple[int, int]:
        """(Q, num), as a stored (Q, num) array would have."""
        return (self.num_queries, self.num)

    def __len__(self) -> int:
        return self.num_queries

    def __getitem__(self, query: int) -> np.ndarray:
        """(num,) int64 items of query ``query``, uniform over 1..N with replacement."""
        query = int(query)
        if not 0 <= query < self.num_queries:
            raise IndexError(f"query {query} out of range 0..{self.num_queries - 1}")
        rng = np.random.default_rng([self.seed, query])
        return rng.integers(1, self.num_items + 1, size=self.num, dtype=np.int64)

    def rows(self, queries: np.ndarray) -> np.ndarray:
        """(len(queries), num) rows of several queries (the same values as indexing them one by one)."""
        return np.stack([self[q] for q in np.asarray(queries).reshape(-1)]) if len(queries) else np.empty(
            (0, self.num), dtype=np.int64)
