"""Torch datasets of training windows and evaluation queries, left-padded to ``max_len`` (0 = padding)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from seqrec.data.negatives import GeneratedNegatives
from seqrec.data.splits import EvalExamples, Split


def left_pad(values: np.ndarray, length: int) -> np.ndarray:
    """The last ``length`` values, left-padded with zeros to exactly ``length``."""
    out = np.zeros(length, dtype=np.int64)
    values = values[-length:] if length else values[:0]
    if len(values):
        out[length - len(values) :] = values
    return out


def lrurec_windows(
    start: np.ndarray, stop: np.ndarray, max_len: int, step: int, min_length: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """Training spans as LRURec cuts them (its ``sliding_window_size`` = step / max_len).

    A sequence of length n < max_len + step is one span (the whole sequence); a longer one is cut into
    spans of max_len counted back from the end, ``[n-max_len, n), [n-max_len-step, n-step), ...`` while
    the start stays >= 0 (a leftover head shorter than a window is dropped, as in the official code).
    Spans shorter than ``min_length`` are skipped: 2 for shifted windows (a shorter one holds no (input, label)
    pair), 1 for cloze windows (one event can be masked and predicted, as the PyTorch BERT4Rec loader keeps it).
    """
    starts, stops = [], []
    lengths = stop - start
    short = (lengths < max_len + step) & (lengths >= min_length)
    starts.append(start[short])
    stops.append(stop[short])
    for s, e in zip(start[lengths >= max_len + step], stop[lengths >= max_len + step]):
        window_starts = np.arange(e - max_len, s - 1, -step)
        starts.append(window_starts)
        stops.append(window_starts + max_len)
    return np.concatenate(starts).astype(np.int64), np.concatenate(stops).astype(np.int64)


def prefixes(start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every prefix as one example: span ``[start, t+1)`` for each t in ``start+1 .. stop-1``.

    The last item of the span is the single label (prefix augmentation, as RecBole / MLP4Rec train).
    """
    lengths = np.maximum(stop - start - 1, 0)
    span_start = np.repeat(start, lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    span_stop = span_start + offsets + 2
    return span_start.astype(np.int64), span_stop.astype(np.int64)


class TrainExamples(Dataset):
    """Training examples over spans of ``items``: input = span[:-1], labels = span[1:] aligned, both left-padded.

    mode "windows": labels at every position (LRURec / SASRec style). The label at the first position of
    a span shorter than max_len+1 faces a padding input, exactly as LRURec's loader does (its
    ``labels = seq[-L:]; tokens = seq[:-1][-L:]``); ``label_first=False`` drops that label.
    mode "prefix": only the last position is labelled.
    Each item: ``{"items": (L,), "labels": (L,)}`` long tensors; label 0 = no loss.
    """

    def __init__(
        self,
        items: np.ndarray,
        span_start: np.ndarray,
        span_stop: np.ndarray,
        max_len: int,
        mode: Literal["windows", "prefix"],
        label_first: bool = True,
    ) -> None:
        self.items, self.span_start, self.span_stop = items, span_start, span_stop
        self.max_len, self.mode, self.label_first = max_len, mode, label_first

    def __len__(self) -> int:
        return len(self.span_start)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        span = self.items[self.span_start[index] : self.span_stop[index]]
        tokens = left_pad(span[:-1], self.max_len)  # (L,)
        if self.mode == "prefix":
            labels = np.zeros(self.max_len, dtype=np.int64)
            labels[-1] = span[-1]
        else:
            # labels = span[-L:] and tokens = span[:-1][-L:], both left-padded, as LRURec's loader builds them
            labels = left_pad(span if self.label_first else span[1:], self.max_len)  # (L,)
        return {"items": torch.from_numpy(tokens), "labels": torch.from_numpy(labels)}


class EvalQueries(Dataset):
    """One query per user: ``{"items": (L,), "target": (), "candidates": (C,)?, "index": ()}``.

    ``candidates`` (when frozen negatives are given) are the sampled negatives; the target is scored
    separately, so candidate column order carries no information. ``negatives`` is a stored (Q, C) array
    or a ``GeneratedNegatives`` whose row q is drawn when read; either way row q belongs to query q. ``index`` is the query's position in
    ``examples``. With ``longest_first`` the dataset yields the queries in order of decreasing history
    length (ties by index), so a batch holds histories of similar length and a model that ignores leading
    padding computes little of it; metrics are sums over queries, so the order changes no value.
    """

    def __init__(
        self, items: np.ndarray, examples: EvalExamples, max_len: int,
        negatives: np.ndarray | GeneratedNegatives | None = None, longest_first: bool = False,
    ) -> None:
        self.items, self.examples, self.max_len, self.negatives = items, examples, max_len, negatives
        self.order: np.ndarray | None = None
        if longest_first:
            lengths = np.minimum(examples.stop - examples.start, max_len)
            self.order = np.lexsort((np.arange(len(lengths)), -lengths))  # (Q,) longest first, stable

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, position: int) -> dict[str, torch.Tensor]:
        index = int(self.order[position]) if self.order is not None else position
        ex = self.examples
        history = self.items[max(ex.start[index], ex.stop[index] - self.max_len) : ex.stop[index]]
        out = {
            "items": torch.from_numpy(left_pad(history, self.max_len)),
            "target": torch.tensor(int(ex.target[index])),
            "index": torch.tensor(index),
        }
        if self.negatives is not None:
            out["candidates"] = torch.from_numpy(self.negatives[index])
        return out


def training_spans(split: Split, max_len: int, mode: str, window_step: int) -> tuple[np.ndarray, np.ndarray]:
    """Spans of the training part of every user, cut by ``mode`` ("cloze": LRURec's windows, one event kept)."""
    if mode == "windows":
        return lrurec_windows(split.train_start, split.train_stop, max_len, window_step)
    if mode == "cloze":
        return lrurec_windows(split.train_start, split.train_stop, max_len, window_step, min_length=1)
    if mode == "prefix":
        return prefixes(split.train_start, split.train_stop)
    raise ValueError(f"train_mode must be 'windows', 'prefix' or 'cloze', got {mode!r}")
