"""Length-bucketed batches under a token budget: examples of similar length batched together (little padding).

Histories are pre-padded and a task trims the columns that are padding in every row, so a batch costs about
(its longest example) × (its size) tokens. Sorting by length before cutting batches keeps that close to the
real tokens; capping it (``max_tokens``) lets one run mix short examples in large batches with long ones
(L = 1000) in small batches that still fit in memory. The batch order is then shuffled, seeded.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from torch.utils.data import Sampler


def token_budget_batches(order: np.ndarray, lengths: np.ndarray, batch_size: int, max_tokens: int) -> list[np.ndarray]:
    """Consecutive runs of ``order`` (sorted by length) of ``batch_size`` indices, each cut short where its
    longest item's length times the batch size would exceed ``max_tokens`` (never below one item)."""
    batches, i = [], 0
    while i < len(order):
        size = batch_size
        while size > 1 and lengths[order[min(i + size, len(order)) - 1]] * size > max_tokens:
            size -= 1
        batches.append(order[i : i + size])
        i += size
    return batches


def length_batches(lengths: np.ndarray, batch_size: int, max_tokens: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Indices grouped into batches of similar length (ties broken at random), batch order shuffled.

    A batch holds ``batch_size`` items, fewer where its longest item times its size would exceed
    ``max_tokens`` (``token_budget_batches``).
    """
    order = np.argsort(lengths + rng.random(len(lengths)), kind="stable")
    batches = token_budget_batches(order, lengths, batch_size, max_tokens)
    rng.shuffle(batches)
    return batches


class LengthBucketBatchSampler(Sampler[list[int]]):
    """A DataLoader ``batch_sampler``: ``length_batches`` of the examples, drawn anew every epoch.

    The batches of epoch e come from ``np.random.default_rng([seed, e])``, not from the global RNG, so a
    run's batches depend only on (seed, epoch): Lightning calls ``set_epoch`` at the start of every epoch.
    The number of batches is the same every epoch (only ties between equal lengths are drawn at random).

    Args:
        lengths: (N,) tokens of each example (e.g. the events of a training window).
        batch_size: the most examples in a batch.
        max_tokens: the most tokens in a batch, counted as its longest example's length × its size (a
            single example longer than this still forms a batch of one).
        seed: the seed of the tie-breaking and of the batch order.
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, max_tokens: int, seed: int = 0) -> None:
        if batch_size < 1 or max_tokens < 1:
            raise ValueError(f"batch_size and max_tokens must be >= 1, got {batch_size} and {max_tokens}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch_size, self.max_tokens, self.seed = batch_size, max_tokens, seed
        self.epoch = 0
        self._count = len(token_budget_batches(np.argsort(self.lengths, kind="stable"), self.lengths, batch_size, max_tokens))

    @property
    def sampler(self) -> LengthBucketBatchSampler:
        """Itself: Lightning calls ``set_epoch`` on ``loader.batch_sampler.sampler`` (not on the batch sampler)."""
        return self

    def set_epoch(self, epoch: int) -> None:
        """Draw the batches of ``epoch`` at the next iteration."""
        self.epoch = epoch

    def batches(self) -> list[np.ndarray]:
        """The batches (index arrays) of the current epoch."""
        rng = np.random.default_rng([self.seed, self.epoch])
        return length_batches(self.lengths, self.batch_size, self.max_tokens, rng)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches():
            yield batch.tolist()

    def __len__(self) -> int:
        return self._count
