"""CTR data: (user, target item, history of up to L items pre-padded, label) samples, and their DataModule.

Two ways in:

- **From any next-item dataset (DIN-style construction).** Every real event of a user's time-ordered
  sequence is a positive (target = the event's item, history = the events before it, newest L kept);
  each positive is paired with ``train_negatives`` (training) or ``eval_negatives`` (validation, test)
  items drawn from the items the user **never** touched in their whole sequence, sharing the
  positive's history. Split by user position (leave-last-out, like DIN's Amazon set): the last event
  is the test positive, the one before it the validation positive, earlier events are training
  positives; users with fewer than 3 events only train. Nothing is materialised per user: samples are
  offsets into the ``Sequences`` CSR arrays; the random part (the negatives) is drawn once, seeded,
  vectorised, and cached atomically as ``.npy`` files next to the sequence cache.
- **From CTR row files** (``CTRRowSource``, e.g. the BARS/FuxiCTR csv files of
  ``seqrec.data.sources.bars``): each row already holds (user, target, label, history). ``bars_mode``
  "clean" holds out a time-ordered tail of train for validation; "bars_compatible" validates on the
  test file as BARS does (then model selection sees the test set; every log line says so).

Batches: ``history`` (B, L) pre-padded ids (0 = padding), ``targets`` (B, C), ``labels`` (B, C) float,
``user`` (B,), ``index`` (B,) a unique sample id (lets metrics drop a distributed sampler's padding).
``train_mode="windows"`` (next-item sources only) instead yields ``items`` (B, L) windows with
``targets``/``labels`` (B, L, C) for every position and a ``target_mask`` (B, L): one causal pass
scores the next event (and its negatives) at every position, as SASRec-style training does. The
history of the target at window position t is then the window's events up to t (at most L).
"""

from __future__ import annotations

import hashlib
import logging
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import Dataset

from seqrec.data.array_cache import load_arrays, save_arrays
from seqrec.data.datamodules import load_sequences
from seqrec.data.examples import left_pad
from seqrec.data.loaders import SplitLoaders
from seqrec.data.negatives import Sampler, item_distribution
from seqrec.data.preprocess import Preprocessing
from seqrec.data.sequences import Sequences
from seqrec.data.sources.base import Source, resolve_cache_dir
from seqrec.data.splits import Split, leave_last_out

log = logging.getLogger(__name__)

NO_FILTERS = Preprocessing()


# ---------------------------------------------------------------------------------------------------
# Row-format CTR data (BARS / FuxiCTR files)
# ---------------------------------------------------------------------------------------------------


@dataclass
class CTRRows:
    """Row-wise CTR samples with CSR histories: row r has history ``hist_items[hist_indptr[r]:hist_indptr[r+1]]``.

    Histories are oldest first (newest last). ``time`` orders rows (a timestamp, or the row's position
    in its file where the format has none). Ids: items 1..N (0 = padding), users 0..U-1.
    """

    user: np.ndarray  # (R,) int64
    target: np.ndarray  # (R,) int64
    label: np.ndarray  # (R,) float32, 0 or 1
    hist_indptr: np.ndarray  # (R + 1,) int64
    hist_items: np.ndarray  # (nnz,) int64
    time: np.ndarray  # (R,) float64

    def __len__(self) -> int:
        return len(self.user)

    def take(self, rows: np.ndarray) -> CTRRows:
        """The rows ``rows`` (sorted integer index or boolean mask), histories re-packed."""
        rows = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows, dtype=np.int64)
        starts, stops = self.hist_indptr[rows], self.hist_indptr[rows + 1]
        lengths = stops - starts
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        flat = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        return CTRRows(self.user[rows], self.target[rows], self.label[rows], indptr, self.hist_items[flat], self.time[rows])

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The columns as ``{prefix + name: array}`` for ``save_arrays``."""
        return {f"{prefix}{name}": getattr(self, name) for name in ("user", "target", "label", "hist_indptr", "hist_items", "time")}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str) -> CTRRows:
        """Inverse of ``arrays``."""
        return cls(**{name: arrays[f"{prefix}{name}"] for name in ("user", "target", "label", "hist_indptr", "hist_items", "time")})


class CTRRowSource(Source):
    """A source of ready-made CTR rows: ``load_rows()`` -> ``{"train": CTRRows, "test": ..., ["valid": ...]}``."""

    num_items: int

    @abstractmethod
    def load_rows(self) -> dict[str, CTRRows]:
        """Parse (or read from the cache) the split files; sets ``num_items``."""

    def load(self):  # noqa: ANN201 (Source API)
        """CTR row files hold no interaction log; use ``load_rows``."""
        raise TypeError(f"{type(self).__name__} holds CTR rows, not interactions: use it with CTRDataModule")


def clean_validation(train: CTRRows, fraction: float, split: Literal["user_tail", "global_tail"]) -> np.ndarray:
    """Boolean mask over train rows for the clean validation split (the time-ordered tail of train).

    "user_tail": each user's last ⌈fraction·n_u⌉ rows by (time, file order), for users with >= 2 rows;
    "global_tail": the last ⌈fraction·R⌉ rows of train by (time, file order).
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"valid_fraction must lie in (0, 1), got {fraction}")
    rows = np.arange(len(train))
    if split == "global_tail":
        order = np.lexsort((rows, train.time))
        mask = np.zeros(len(train), dtype=bool)
        mask[order[len(train) - int(np.ceil(fraction * len(train))) :]] = True
        return mask
    if split != "user_tail":
        raise ValueError(f"valid_split must be 'user_tail' or 'global_tail', got {split!r}")
    order = np.lexsort((rows, train.time, train.user))
    users = train.user[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = users[1:] != users[:-1]
    start = np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))
    counts = np.bincount(users, minlength=int(users.max()) + 1 if len(users) else 0)[users]
    position = np.arange(len(order)) - start
    held = np.where(counts >= 2, np.ceil(fraction * counts).astype(np.int64), 0)
    mask = np.zeros(len(train), dtype=bool)
    mask[order[position >= counts - held]] = True
    return mask


# ---------------------------------------------------------------------------------------------------
# DIN-style samples from next-item sequences
# ---------------------------------------------------------------------------------------------------


def user_of_offsets(sequences: Sequences) -> np.ndarray:
    """(nnz,) the user row of every event offset."""
    return np.repeat(np.arange(sequences.num_users, dtype=np.int64), sequences.lengths())


def sample_unseen(
    sequences: Sequences,
    users: np.ndarray,
    num: int,
    rng: np.random.Generator,
    probabilities: np.ndarray | None = None,
) -> np.ndarray:
    """(Q, num) items per query user, distinct within a row, none in that user's **whole** sequence.

    Vectorised rejection sampling: draw all, test membership against the sorted (user, item) keys of
    every event with ``searchsorted``, redraw only the rejected cells. ``probabilities`` (N+1,) with a
    zero at 0 (e.g. ``negatives.item_distribution``); None draws uniformly from 1..N.
    """
    n_items = sequences.num_items
    users = np.asarray(users, dtype=np.int64)
    stride = n_items + 1
    keys = np.sort(user_of_offsets(sequences) * stride + sequences.items)  # sorted (user, item) pairs
    keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
    seen = np.diff(np.searchsorted(keys, np.arange(sequences.num_users + 1) * stride))  # distinct items per user
    support = n_items if probabilities is None else int(np.count_nonzero(probabilities))
    short = np.flatnonzero(support - seen[users] < num)
    if len(short):
        user = int(users[short[0]])
        raise ValueError(
            f"user row {user} has touched {int(seen[user])} of {support} samplable items, leaving fewer than "
            f"the {num} negatives requested: lower the number of negatives"
        )

    def draw(size: int) -> np.ndarray:
        if probabilities is None:
            return rng.integers(1, n_items + 1, size=size)
        return rng.choice(n_items + 1, size=size, p=probabilities)

    def rejected(block: np.ndarray, block_users: np.ndarray) -> np.ndarray:
        """(R, num) True where an item was touched by its user or repeats an earlier column of its row."""
        cand = block_users[:, None] * stride + block
        bad = keys[np.minimum(np.searchsorted(keys, cand), len(keys) - 1)] == cand
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


# ---------------------------------------------------------------------------------------------------
# DataModule
# ---------------------------------------------------------------------------------------------------


class CTRDataModule(SplitLoaders, L.LightningDataModule):
    """CTR samples for the ``CTRTask``: DIN-style from a next-item ``Source``, or rows of a ``CTRRowSource``.

    Args:
        source: a next-item source (interactions; DIN-style construction) or a ``CTRRowSource`` (BARS).
        preprocessing: filters applied to a next-item source before the split (cached by their hash).
        max_len: L, the history length (newest L events, pre-padded).
        train_mode: "samples" (one sample per training positive, with its negatives) or "windows"
            (next-item sources only: every position of a training window is a target; see module doc).
        window_step: stride between the ends of a long sequence's training windows (default max_len: every
            training event is a target exactly once).
        train_negatives / eval_negatives: negatives per positive (DIN: 1). More evaluation negatives
            give every user more impressions and so a finer per-user AUC.
        negative_sampler: "uniform" or "popularity" (∝ training counts); never an item of the user.
        min_history: events with fewer earlier events are not training positives.
        recent_train_events: keep only each user's newest this-many training positives (speed).
        max_users: a seeded random subset of this many users for every split (speed; None: all).
        bars_mode: row sources only. "clean": validation = the time-ordered tail of train
            (``valid_fraction``, ``valid_split``); "bars_compatible": validation = test, as BARS does.
        seed: seed of the negatives and the user subset.
    """

    def __init__(
        self,
        source: Source,
        preprocessing: Preprocessing = NO_FILTERS,
        max_len: int = 50,
        train_mode: Literal["samples", "windows"] = "samples",
        window_step: int | None = None,
        train_negatives: int = 1,
        eval_negatives: int = 1,
        negative_sampler: Sampler = "uniform",
        min_history: int = 1,
        recent_train_events: int | None = None,
        max_users: int | None = None,
        bars_mode: Literal["clean", "bars_compatible"] = "clean",
        valid_fraction: float = 0.1,
        valid_split: Literal["user_tail", "global_tail"] = "user_tail",
        batch_size: int = 256,
        eval_batch_size: int = 512,
        num_workers: int = 0,
        seed: int = 42,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        if train_negatives < 1 or eval_negatives < 1:
            raise ValueError(f"train_negatives and eval_negatives must be >= 1, got {train_negatives}, {eval_negatives}")
        if train_mode not in ("samples", "windows"):
            raise ValueError(f"train_mode must be 'samples' or 'windows', got {train_mode!r}")
        if min_history < 1:
            raise ValueError(f"min_history must be >= 1 (a CTR sample needs a history), got {min_history}")
        if bars_mode not in ("clean", "bars_compatible"):
            raise ValueError(f"bars_mode must be 'clean' or 'bars_compatible', got {bars_mode!r}")
        self.save_hyperparameters(ignore=["source"])
        self.source, self.preprocessing = source, preprocessing
        self.max_len, self.train_mode = max_len, train_mode
        self.window_step = window_step or max_len
        self.train_negatives, self.eval_negatives = train_negatives, eval_negatives
        self.negative_sampler, self.min_history = negative_sampler, min_history
        self.recent_train_events, self.max_users = recent_train_events, max_users
        self.bars_mode, self.valid_fraction, self.valid_split = bars_mode, valid_fraction, valid_split
        self.batch_size, self.eval_batch_size, self.num_workers = batch_size, eval_batch_size, num_workers
        self.seed, self.cache_dir = seed, cache_dir
        self._sequences: Sequences | None = None
        self._rows: dict[str, CTRRows] | None = None
        self.datasets: dict[str, Dataset] = {}

    @property
    def is_rows(self) -> bool:
        """True when the source gives ready CTR rows (BARS) rather than interactions."""
        return isinstance(self.source, CTRRowSource)

    @property
    def sequences(self) -> Sequences:
        """The preprocessed sequences of a next-item source (cached)."""
        if self.is_rows:
            raise TypeError(f"{type(self.source).__name__} gives CTR rows, not sequences")
        if self._sequences is None:
            self._sequences = load_sequences(self.source, self.preprocessing, self.cache_dir)
        return self._sequences

    @property
    def rows(self) -> dict[str, CTRRows]:
        """The CTR rows of a row source, with the validation split of ``bars_mode``."""
        if self._rows is None:
            splits = self.source.load_rows()
            train, test = splits["train"], splits["test"]
            if self.bars_mode == "bars_compatible":
                log.warning("bars_mode='bars_compatible': validating on the TEST split as BARS does; "
                            "model selection sees the test set (use bars_mode='clean' for a held-out validation)")
                valid = test
            elif "valid" in splits:
                valid = splits["valid"]
            else:
                held = clean_validation(train, self.valid_fraction, self.valid_split)
                train, valid = train.take(~held), train.take(held)
            self._rows = {"train": train, "valid": valid, "test": test}
        return self._rows

    @property
    def num_items(self) -> int:
        """Catalogue size N (ids 1..N); linked into the model's ``num_items`` by the CLI."""
        if self.is_rows:
            _ = self.rows
            return self.source.num_items
        return self.sequences.num_items

    def prepare_data(self) -> None:
        """Download and preprocess once; later ranks and runs read the caches."""
        if self.is_rows:
            self.source.load_rows()
        else:
            _ = self.sequences

    def _user_subset(self, num_users: int) -> np.ndarray | None:
        if self.max_users is None or self.max_users >= num_users:
            return None
        keep = np.zeros(num_users, dtype=bool)
        keep[np.random.default_rng(self.seed).choice(num_users, size=self.max_users, replace=False)] = True
        return keep

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets (views over cached arrays)."""
        if self.datasets:
            return
        if self.is_rows:
            self._setup_rows()
        else:
            self._setup_sequences()

    def _setup_rows(self) -> None:
        if self.train_mode != "samples":
            raise ValueError("train_mode='windows' needs a next-item source; CTR row files have one sample per row")
        rows = self.rows
        num_users = 1 + max(int(r.user.max()) for r in rows.values() if len(r))
        keep = self._user_subset(num_users)
        base = 0
        for name in ("train", "valid", "test"):
            part = rows[name] if keep is None else rows[name].take(keep[rows[name].user])
            self.datasets[name] = RowQueries(part, self.max_len, index_base=base)
            base += len(part)
        log.info("%s: %d train, %d valid, %d test rows (bars_mode=%s)", self.source.describe(),
                 *(len(self.datasets[n]) for n in ("train", "valid", "test")), self.bars_mode)

    def _setup_sequences(self) -> None:
        sequences = self.sequences
        cache = resolve_cache_dir(self.cache_dir) / "ctr"
        samples = din_samples(
            sequences, self.train_negatives, self.eval_negatives, self.negative_sampler, self.seed, cache,
            tag=f"{self.source.fingerprint()}|{self.preprocessing.key()}",
        )
        split = samples.split
        keep = self._user_subset(sequences.num_users)
        users_of = user_of_offsets(sequences)
        if self.train_mode == "samples":
            offsets = train_event_offsets(split, self.min_history, self.recent_train_events)
            if keep is not None:
                offsets = offsets[keep[users_of[offsets]]]
            self.datasets["train"] = EventQueries(sequences, offsets, samples.negatives_by_offset[offsets], self.max_len)
            n_train = len(offsets)
        else:
            start = split.train_start
            if self.recent_train_events is not None:
                start = np.maximum(start, split.train_stop - self.recent_train_events - 1)
            if keep is not None:
                start, stop = start[keep], split.train_stop[keep]
            else:
                stop = split.train_stop
            span_start, span_stop = target_windows(start, stop, self.max_len, self.window_step)
            self.datasets["train"] = WindowTargets(sequences, span_start, span_stop, samples.negatives_by_offset, self.max_len)
            n_train = int((span_stop - span_start - 1).sum())
        base = sequences.num_interactions
        for name, offsets, negatives in (("valid", samples.valid_offsets, samples.valid_negatives),
                                         ("test", samples.test_offsets, samples.test_negatives)):
            if keep is not None:
                chosen = keep[users_of[offsets]]
                offsets, negatives = offsets[chosen], negatives[chosen]
            self.datasets[name] = EventQueries(sequences, offsets, negatives, self.max_len, index_base=base)
            base += len(offsets)
        log.info(
            "%s: %s; CTR %s: %d training positives (x%d negatives), %d validation and %d test users (x%d negatives)",
            self.source.describe(), sequences.summary(), self.train_mode, n_train, self.train_negatives,
            len(self.datasets["valid"]), len(self.datasets["test"]), self.eval_negatives,
        )
