"""Cloze training examples (BERT4Rec): windows of events with some positions masked, the loss taken there only.

Masking one window of tokens t_1..t_n (the newest ``max_len`` events of a training span), as the PyTorch BERT4Rec
code does it (``BertTrainDataset``): for each position draw u ~ U[0, 1); the position is masked when u < p
(``mask_prob``) and its label is then the event, else its label is 0 (no loss). A masked position's input is,
with r = u / p (uniform on [0, 1) given u < p):

- ``replacement: bert`` (BERT's rule; the PyTorch code's): ``[mask]`` when r < 0.8, a uniform random item of
  1..N when r < 0.9, the event itself otherwise;
- ``replacement: mask``: always ``[mask]`` (the original TensorFlow scripts, ``mask_prob=1.0``).

How many positions are masked (``mask_count``):

- ``bernoulli`` (the PyTorch code's; default): each real position independently, as above, so a window of n events
  has Binomial(n, p) labels, none at all with probability (1 - p)^n (a third of Video's windows at p = 0.2);
- ``fixed`` (the original TensorFlow ``gen_data_fin.py``'s ``create_masked_lm_predictions``): exactly
  k = max(1, round(n · p)) positions, rounded half up (its Python 2 ``round``), a uniform random subset of the n
  events (the k smallest of the same L uniforms), so every window has a label. The original caps k at
  ``max_predictions_per_seq``, which equals round(max_len · p) in its ML-1M, Beauty and Steam scripts (40, 30, 20),
  so the cap never binds there and is not an option here. A masked position's replacement then draws one more
  uniform r per position (``bert``) instead of reusing u / p.

Padding is never masked. With ``mask_last_prob`` q > 0, a window is first drawn to be a *last-item* example with
probability q: its newest event alone becomes ``[mask]`` (label: that event), the training twin of a query (a
history, then ``[mask]`` in the last slot). The original TensorFlow BERT4Rec adds one such instance per window beside
``dupe_factor`` (10) randomly masked copies (``gen_data_fin.py``: ``mask_last``; Sun et al. 2019 §3.6 produce such
samples to better match next-item prediction), a share of 1/11 of its training data; q = 1/11 draws the same share
per example. q = 0 (default: the PyTorch code LRURec's baselines come from has no such examples) draws nothing
extra, so its masks are unchanged.

The draws of example i in epoch e come from ``np.random.default_rng([seed + e, i])`` alone: the sampler hands the
dataset the key ``(seed + e, i)`` (``datamodules.loaders.EpochShuffle`` with ``keyed=True``), so the masks depend on
neither the batch, the worker nor a resume (a resumed run masks exactly as an uninterrupted one), and each epoch
masks afresh, as the reference's loader does.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from seqrec.data.examples import left_pad

Replacement = Literal["bert", "mask"]
REPLACEMENTS = ("bert", "mask")
MaskCount = Literal["bernoulli", "fixed"]
MASK_COUNTS = ("bernoulli", "fixed")


def fixed_mask_count(n: int, mask_prob: float) -> int:
    """k = max(1, round(n · p)) for a window of n >= 1 events, half rounded up (``gen_data_fin.py`` runs on Python 2,
    whose ``round`` rounds half away from zero); never more than n."""
    return min(n, max(1, int(np.floor(n * mask_prob + 0.5))))


def cloze_mask(
    tokens: np.ndarray, rng: np.random.Generator, mask_prob: float, mask_token: int, num_items: int,
    replacement: Replacement = "bert", count: MaskCount = "bernoulli",
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) of one left-padded window ``tokens`` (L,) (module docstring's rule); 0 stays 0 in both.

    Draws L uniforms, then (``fixed`` with ``bert`` only) L more for the replacement, then L random items (``bert``
    only), in that order, from ``rng``. A window with no event masks nothing.
    """
    real = tokens != 0  # (L,)
    u = rng.random(tokens.shape[0])  # (L,)
    if count == "bernoulli":
        masked = real & (u < mask_prob)
    else:
        n = int(real.sum())
        masked = np.zeros_like(real)
        if n:
            chosen = np.argsort(np.where(real, u, np.inf), kind="stable")[: fixed_mask_count(n, mask_prob)]
            masked[chosen] = True
    labels = np.where(masked, tokens, 0)
    if replacement == "mask":
        return np.where(masked, mask_token, tokens), labels
    # r uniform on [0, 1) at masked positions: u / p given u < p (bernoulli), a fresh draw (fixed)
    r = u / mask_prob if count == "bernoulli" else rng.random(tokens.shape[0])  # (L,)
    random_items = rng.integers(1, num_items + 1, size=tokens.shape[0])  # (L,)
    inputs = np.where(masked & (r < 0.8), mask_token, tokens)
    inputs = np.where(masked & (r >= 0.8) & (r < 0.9), random_items, inputs)
    return inputs, labels


def check_cloze_settings(mask_prob: float, replacement: str, mask_last_prob: float, mask_count: str) -> None:
    """Raise ValueError (one line) unless 0 < ``mask_prob`` <= 1, ``replacement`` and ``mask_count`` are known and
    0 <= ``mask_last_prob`` <= 1 (the examples and the datamodule, which checks them before any data is read, share
    this)."""
    if not 0.0 < mask_prob <= 1.0:
        raise ValueError(f"mask_prob must be in (0, 1], got {mask_prob}")
    if not 0.0 <= mask_last_prob <= 1.0:
        raise ValueError(f"mask_last_prob must be in [0, 1], got {mask_last_prob}")
    if replacement not in REPLACEMENTS:
        raise ValueError(f"replacement must be one of {REPLACEMENTS}, got {replacement!r}")
    if mask_count not in MASK_COUNTS:
        raise ValueError(f"mask_count must be one of {MASK_COUNTS}, got {mask_count!r}")


def mask_last(tokens: np.ndarray, mask_token: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) of one left-padded window ``tokens`` (L,) whose newest event (position L - 1) is ``[mask]``."""
    inputs, labels = tokens.copy(), np.zeros_like(tokens)
    labels[-1], inputs[-1] = tokens[-1], mask_token
    return inputs, labels


class ClozeExamples(Dataset):
    """Masked windows over spans of ``items``: ``{"items": (L,), "labels": (L,)}``, both left-padded; label 0 = no loss.

    Each span's newest ``max_len`` events are masked by ``cloze_mask`` (``mask_count``: ``bernoulli`` or ``fixed``;
    the whole span is the input: there is no shift, the masked positions are the targets). Keys are
    ``(draw_seed, index)`` pairs (the epoch's seed and the example); a plain index draws with seed 0.
    ``keyed_by_epoch`` tells the loader to hand it such keys. With ``mask_last_prob`` > 0 one uniform drawn first
    decides whether the window is a last-item example (``mask_last``).
    """

    keyed_by_epoch = True

    def __init__(
        self, items: np.ndarray, span_start: np.ndarray, span_stop: np.ndarray, max_len: int, num_items: int,
        mask_prob: float = 0.2, replacement: Replacement = "bert", mask_last_prob: float = 0.0,
        mask_count: MaskCount = "bernoulli",
    ) -> None:
        check_cloze_settings(mask_prob, replacement, mask_last_prob, mask_count)
        self.items, self.span_start, self.span_stop = items, span_start, span_stop
        self.max_len, self.num_items = max_len, num_items
        self.mask_token = num_items + 1
        self.mask_prob, self.replacement, self.mask_last_prob = mask_prob, replacement, mask_last_prob
        self.mask_count = mask_count

    def __len__(self) -> int:
        return len(self.span_start)

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, torch.Tensor]:
        draw_seed, index = (0, key) if isinstance(key, (int, np.integer)) else key
        index = int(index)
        tokens = left_pad(self.items[self.span_start[index] : self.span_stop[index]], self.max_len)  # (L,)
        rng = np.random.default_rng([int(draw_seed), index])
        if self.mask_last_prob > 0.0 and rng.random() < self.mask_last_prob:
            inputs, labels = mask_last(tokens, self.mask_token)
        else:
            inputs, labels = cloze_mask(tokens, rng, self.mask_prob, self.mask_token, self.num_items, self.replacement,
                                        self.mask_count)
        return {"items": torch.from_numpy(inputs), "labels": torch.from_numpy(labels)}
