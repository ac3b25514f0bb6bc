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

import logging
from typing import Literal

import lightning as L
import numpy as np
from torch.utils.data import Dataset

from seqrec.data.ctr_rows import CTRRows, CTRRowSource, clean_validation
from seqrec.data.ctr_samples import (
    EventQueries,
    RowQueries,
    WindowTargets,
    din_samples,
    target_windows,
    train_event_offsets,
    user_of_offsets,
)
from seqrec.data.negatives import Sampler
from seqrec.data.preprocess import NO_FILTERS, Preprocessing, load_sequences
from seqrec.data.sequences import Sequences
from seqrec.data.sources.base import Source, resolve_cache_dir
from seqrec.datamodules.loaders import SplitLoaders

log = logging.getLogger(__name__)


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
