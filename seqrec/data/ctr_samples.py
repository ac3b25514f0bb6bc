"""DIN-style CTR samples over next-item sequences (positives + frozen unseen negatives) and their torch datasets.

The negatives come from ``negatives.sample_unseen`` (draw order "batched"): items the user never touched.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from seqrec.data.array_cache import load_arrays, save_arrays
from seqrec.data.ctr_rows import CTRRows
from seqrec.data.examples import left_pad
from seqrec.data.negatives import Sampler, item_distribution, sample_unseen
from seqrec.data.sequences import Sequences, user_of_offsets
from seqrec.data.splits import Split, leave_last_out

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------


@dataclass
class DINSamples:
    """DIN-style CTR samples over a ``Sequences``: offsets of positive events plus frozen negatives.

    ``negatives_by_offset[o]`` are the training negatives paired with the event at offset ``o``;
    ``valid_offsets[j]`` / ``test_offsets[j]`` are the evaluation positives (one per evaluated user) and
    ``valid_negatives[j]`` / ``test_negatives[j]`` theirs. The history of the event at offset ``o`` of
    user ``u`` is ``items[indptr[u]:o]`` (newest L kept).
    """

    split: Split
    negatives_by_offset: np.ndarray  # (nnz, K_train)
    valid_offsets: np.ndarray  # (Qv,)
    valid_negatives: np.ndarray  # (Qv, K_eval)
    test_offsets: np.ndarray  # (Qt,)
    test_negatives: np.ndarray  # (Qt, K_eval)


def din_samples(
    sequences: Sequences,
    train_negatives: int = 1,
    eval_negatives: int = 1,
    sampler: Sampler = "uniform",
    seed: int = 42,
    cache_dir: Path | None = None,
    tag: str = "",
) -> DINSamples:
    """Leave-last-out split plus frozen negatives (cached under ``cache_dir`` keyed by ``tag`` and options)."""
    split = leave_last_out(sequences)
    valid_offsets = split.valid.stop.astype(np.int64)  # the validation event's own offset
    test_offsets = split.test.stop.astype(np.int64)
    key = hashlib.sha256(
        f"din-ctr|{tag}|{sequences.summary()}|{train_negatives}|{eval_negatives}|{sampler}|{seed}".encode()
    ).hexdigest()[:20]
    directory = None if cache_dir is None else Path(cache_dir) / f"din-{key}"
    if directory is not None and directory.exists():
        try:
            arrays, _ = load_arrays(directory)
            return DINSamples(split, arrays["negatives_by_offset"], valid_offsets, arrays["valid_negatives"],
                              test_offsets, arrays["test_negatives"])
        except (ValueError, KeyError) as error:
            log.warning("%s; drawing the CTR negatives again", error)
    counts = np.bincount(sequences.items[split.train_mask()], minlength=sequences.num_items + 1)
    probabilities = None if sampler == "uniform" else item_distribution(sequences, sampler, counts)
    rng = np.random.default_rng(seed)
    arrays = {
        "negatives_by_offset": sample_unseen(sequences, user_of_offsets(sequences), train_negatives, rng, probabilities),
        "valid_negatives": sample_unseen(sequences, split.valid.user, eval_negatives, rng, probabilities),
        "test_negatives": sample_unseen(sequences, split.test.user, eval_negatives, rng, probabilities),
    }
    if directory is not None:
        save_arrays(directory, arrays, {"tag": tag, "seed": seed, "sampler": sampler})
    return DINSamples(split, arrays["negatives_by_offset"], valid_offsets, arrays["valid_negatives"],
                      test_offsets, arrays["test_negatives"])


def target_windows(start: np.ndarray, stop: np.ndarray, max_len: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Training windows of at most max_len + 1 events covering each span [start, stop) from its end.

    Window ends are stop, stop − step, stop − 2·step, ... while they leave at least 2 events; each window
    is [max(start, end − max_len − 1), end). With step = max_len (the default) every event after a span's
    first is a target exactly once (the windows overlap by the one event that is only history).
    """
    lengths = np.maximum(stop - start, 0)
    counts = np.where(lengths >= 2, -(-(lengths - 1) // step), 0)  # ⌈(n − 1) / step⌉
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    ends = np.repeat(stop, counts) - within * step
    begins = np.maximum(np.repeat(start, counts), ends - max_len - 1)
    keep = ends - begins >= 2
    return begins[keep].astype(np.int64), ends[keep].astype(np.int64)


def train_event_offsets(split: Split, min_history: int = 1, recent: int | None = None) -> np.ndarray:
    """Offsets of the training positives: positions >= min_history of each user's training part,
    only the newest ``recent`` of them per user when given."""
    start = split.train_start + min_history
    if recent is not None:
        start = np.maximum(start, split.train_stop - recent)
    lengths = np.maximum(split.train_stop - start, 0)
    within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(start, lengths) + within


# ---------------------------------------------------------------------------------------------------
# Torch datasets
# ---------------------------------------------------------------------------------------------------


class EventQueries(Dataset):
    """One sample per positive event offset: its history, the positive and its negatives as targets."""

    def __init__(
        self,
        sequences: Sequences,
        offsets: np.ndarray,
        negatives: np.ndarray,
        max_len: int,
        index_base: int = 0,
    ) -> None:
        self.items, self.max_len = sequences.items, max_len
        self.offsets, self.negatives = offsets, negatives
        self.users = user_of_offsets(sequences)[offsets]
        self.user_start = sequences.indptr[self.users]
        self.index_base = index_base

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        offset = int(self.offsets[index])
        history = self.items[max(int(self.user_start[index]), offset - self.max_len) : offset]
        targets = np.concatenate([[self.items[offset]], self.negatives[index]])
        labels = np.zeros(len(targets), dtype=np.float32)
        labels[0] = 1.0
        return {
            "history": torch.from_numpy(left_pad(history, self.max_len)),
            "targets": torch.from_numpy(targets.astype(np.int64)),
            "labels": torch.from_numpy(labels),
            "user": torch.tensor(int(self.users[index])),
            "index": torch.tensor(self.index_base + index),
        }


class WindowTargets(Dataset):
    """Training windows: ``items`` (L,) = span[:-1] pre-padded; at every position t the next event
    span[t+1] (label 1) and its frozen negatives (label 0) as ``targets``/``labels`` (L, 1+K)."""

    def __init__(self, sequences: Sequences, span_start: np.ndarray, span_stop: np.ndarray,
                 negatives_by_offset: np.ndarray, max_len: int) -> None:
        self.items, self.negatives = sequences.items, negatives_by_offset
        self.span_start, self.span_stop, self.max_len = span_start, span_stop, max_len

    def __len__(self) -> int:
        return len(self.span_start)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start, stop = int(self.span_start[index]), int(self.span_stop[index])
        n = stop - start - 1  # inputs; the targets are the events start+1 .. stop-1
        L_, K = self.max_len, self.negatives.shape[1]
        targets = np.zeros((L_, 1 + K), dtype=np.int64)
        targets[L_ - n :, 0] = self.items[start + 1 : stop]
        targets[L_ - n :, 1:] = self.negatives[start + 1 : stop]
        labels = np.zeros((L_, 1 + K), dtype=np.float32)
        labels[:, 0] = 1.0
        mask = np.zeros(L_, dtype=bool)
        mask[L_ - n :] = True
        return {
            "items": torch.from_numpy(left_pad(self.items[start : stop - 1], L_)),
            "targets": torch.from_numpy(targets),
            "labels": torch.from_numpy(labels),
            "target_mask": torch.from_numpy(mask),
        }


class RowQueries(Dataset):
    """One sample per CTR row: its history (newest L, pre-padded), target and label."""

    def __init__(self, rows: CTRRows, max_len: int, index_base: int = 0) -> None:
        self.rows, self.max_len, self.index_base = rows, max_len, index_base

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        rows = self.rows
        start, stop = int(rows.hist_indptr[index]), int(rows.hist_indptr[index + 1])
        history = rows.hist_items[max(start, stop - self.max_len) : stop]
        return {
            "history": torch.from_numpy(left_pad(history, self.max_len)),
            "targets": torch.tensor([int(rows.target[index])]),
            "labels": torch.tensor([float(rows.label[index])], dtype=torch.float32),
            "user": torch.tensor(int(rows.user[index])),
            "index": torch.tensor(self.index_base + index),
        }
