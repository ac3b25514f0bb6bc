"""CTR datamodules: (user, target item, history of up to L items pre-padded, label) samples for the ``CTRTask``.

Two ways in, one datamodule each (both share ``CTRBaseDataModule``: loaders, user subset, batch layout):

- ``CTRDataModule``, **from any next-item dataset (DIN-style construction).** Every real event of a
  user's time-ordered sequence is a positive (target = the event's item, history = the events before
  it, newest L kept); each positive is paired with ``train_negatives`` (training) or ``eval_negatives``
  (validation, test) items drawn from the items the user **never** touched in their whole sequence,
  sharing the positive's history. Split by user position (leave-last-out, like DIN's Amazon set): the
  last event is the test positive, the one before it the validation positive, earlier events are
  training positives; users with fewer than 3 events only train. Nothing is materialised per user:
  samples are offsets into the ``Sequences`` CSR arrays; the random part (the negatives) is drawn once,
  seeded, vectorised, and cached atomically next to the sequence cache (``seqrec.data.ctr_samples``).
- ``CTRRowsDataModule``, **from CTR row files** (``CTRRowSource``, e.g. the BARS/FuxiCTR csv files of
  ``seqrec.data.sources.bars``): each row already holds (user, target, label, history). ``bars_mode``
  "clean" holds out a time-ordered tail of train for validation; "bars_compatible" validates on the
  test file as BARS does (then model selection sees the test set; every log line says so).

Batches: ``history`` (B, L) pre-padded ids (0 = padding), ``targets`` (B, C), ``labels`` (B, C) float,
``user`` (B,), ``index`` (B,) a unique sample id (lets metrics drop a distributed sampler's padding).
``train_mode="windows"`` (``CTRDataModule`` only) instead yields ``items`` (B, L) windows with
``targets``/``labels`` (B, L, C) for every position and a ``target_mask`` (B, L): one causal pass
scores the next event (and its negatives) at every position, as SASRec-style training does. The
history of the target at window position t is then the window's events up to t (at most L).
"""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np
from torch.utils.data import DataLoader, Dataset

from seqrec.data.array_cache import resolve_cache_dir
from seqrec.data.ctr_rows import CTRRows, CTRRowSource, clean_validation
from seqrec.data.ctr_samples import (
    EventQueries,
    RowQueries,
    WindowTargets,
    din_samples,
    target_windows,
    train_event_offsets,
)
from seqrec.data.interactions import Source
from seqrec.data.negatives import Sampler
from seqrec.data.preprocess import NO_FILTERS, Preprocessing
from seqrec.data.sequences import Sequences, user_of_offsets
from seqrec.datamodules.base import RecommendationData
from seqrec.datamodules.batching import LengthBucketBatchSampler
from seqrec.datamodules.loaders import SplitLoaders
from seqrec.datamodules.sequences import SourceSequences

log = logging.getLogger(__name__)
SPLITS = ("train", "valid", "test")


class CTRBaseDataModule(SplitLoaders, RecommendationData):
    """What both CTR datamodules share: history length, the seeded user subset, loaders, ``setup`` once.

    Sub-classes implement ``num_items`` (``RecommendationData``), ``prepare_data`` and ``_build`` (fills ``self.datasets``).
    """

    def __init__(
        self,
        max_len: int,
        max_users: int | None,
        batch_size: int,
        eval_batch_size: int,
        num_workers: int,
        seed: int,
    ) -> None:
        super().__init__(max_len, batch_size, eval_batch_size, num_workers)
        self.max_users = max_users
        self.seed = seed
        self.datasets: dict[str, Dataset] = {}

    def _user_subset(self, num_users: int) -> np.ndarray | None:
        """(num_users,) mask of a seeded random subset of ``max_users`` users; None keeps everyone."""
        if self.max_users is None or self.max_users >= num_users:
            return None
        keep = np.zeros(num_users, dtype=bool)
        keep[np.random.default_rng(self.seed).choice(num_users, size=self.max_users, replace=False)] = True
        return keep

    def _build(self) -> None:
        """Fill ``self.datasets`` with the train, valid and test datasets."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets once (views over cached arrays)."""
        if not self.datasets:
            self._build()


class CTRDataModule(SourceSequences, CTRBaseDataModule):
    """DIN-style CTR samples built from a next-item ``Source`` (module docstring).

    Args:
        source: a next-item source (interactions). CTR row files (BARS) go to ``CTRRowsDataModule``.
        preprocessing: filters applied before the split (cached by their hash).
        max_len: L, the history length (newest L events, pre-padded).
        train_mode: "samples" (one sample per training positive, with its negatives) or "windows"
            (every position of a training window is a target; see the module docstring).
        window_step: stride between the ends of a long sequence's training windows (default max_len: every
            training event is a target exactly once).
        train_negatives / eval_negatives: negatives per positive (DIN: 1). More evaluation negatives
            give every user more impressions and so a finer per-user AUC.
        negative_sampler: "uniform" or "popularity" (∝ training counts); never an item of the user.
        min_history: events with fewer earlier events are not training positives.
        recent_train_events: keep only each user's newest this-many training positives (speed).
        max_users: a seeded random subset of this many users for every split (speed; None: all).
        seed: seed of the negatives and the user subset.
        cache_dir: cache root (default ``$SEQREC_CACHE`` or the user cache dir).
        train_batch_tokens: when set, training batches group examples of similar length and hold at most
            this many tokens (an example counts its events: a window's inputs plus its last target, a
            sample's history plus its target; a batch counts its longest example × its size), at most
            ``batch_size`` examples; seeded, reshuffled every epoch (``LengthBucketBatchSampler``). None:
            ``batch_size`` examples drawn at random. One process only.
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
        batch_size: int = 256,
        eval_batch_size: int = 512,
        num_workers: int = 0,
        seed: int = 42,
        cache_dir: str | None = None,
        train_batch_tokens: int | None = None,
    ) -> None:
        super().__init__(max_len, max_users, batch_size, eval_batch_size, num_workers, seed)
        if isinstance(source, CTRRowSource):
            raise TypeError(
                f"{type(source).__name__} gives ready CTR rows, not interactions: use "
                "seqrec.datamodules.ctr.CTRRowsDataModule for it (CTRDataModule builds DIN-style samples "
                "from a next-item source)"
            )
        if train_negatives < 1 or eval_negatives < 1:
            raise ValueError(f"train_negatives and eval_negatives must be >= 1, got {train_negatives}, {eval_negatives}")
        if train_mode not in ("samples", "windows"):
            raise ValueError(f"train_mode must be 'samples' or 'windows', got {train_mode!r}")
        if min_history < 1:
            raise ValueError(f"min_history must be >= 1 (a CTR sample needs a history), got {min_history}")
        if train_batch_tokens is not None and train_batch_tokens < 1:
            raise ValueError(f"train_batch_tokens must be >= 1 or None (no token budget), got {train_batch_tokens}")
        self.save_hyperparameters(ignore=["source"])
        self.source, self.preprocessing = source, preprocessing
        self.train_mode = train_mode
        self.window_step = window_step or max_len
        self.train_negatives, self.eval_negatives = train_negatives, eval_negatives
        self.negative_sampler, self.min_history = negative_sampler, min_history
        self.recent_train_events = recent_train_events
        self.cache_dir = cache_dir
        self.train_batch_tokens = train_batch_tokens
        self._sequences: Sequences | None = None

    def prepare_data(self) -> None:
        """Download and preprocess once; later ranks and runs read the caches."""
        _ = self.sequences

    def _build(self) -> None:
        """Training samples or windows, and one validation and one test positive per user, with frozen negatives."""
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

    def train_lengths(self) -> np.ndarray:
        """(N,) events of each training example: a window's span (inputs + last target), a sample's history + 1."""
        dataset = self.datasets["train"]
        if isinstance(dataset, WindowTargets):
            return dataset.span_stop - dataset.span_start
        return np.minimum(dataset.offsets - dataset.user_start, self.max_len) + 1

    def train_dataloader(self) -> DataLoader:
        """Shuffled training examples; with ``train_batch_tokens``, length-bucketed batches under that budget."""
        if self.train_batch_tokens is None:
            return super().train_dataloader()
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            raise ValueError(
                f"train_batch_tokens batches in one process, but this run has {trainer.world_size}: "
                "set data.init_args.train_batch_tokens null (batches of batch_size) for multi-process training"
            )
        sampler = LengthBucketBatchSampler(self.train_lengths(), self.batch_size, self.train_batch_tokens, self.seed)
        return DataLoader(
            self.datasets["train"],
            batch_sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )


class CTRRowsDataModule(CTRBaseDataModule):
    """CTR rows of a ``CTRRowSource`` (BARS, DIN text), one sample per row (module docstring).

    Args:
        source: a ``CTRRowSource`` (e.g. ``seqrec.data.sources.bars.BARS``).
        max_len: L, the history length (newest L events, pre-padded).
        bars_mode: used when the source has no validation file. "clean": validation = the time-ordered
            tail of train (``valid_fraction``, ``valid_split``); "bars_compatible": validation = test, as
            BARS does.
        valid_fraction / valid_split: the clean validation split (``seqrec.data.ctr_rows.clean_validation``).
        max_users: a seeded random subset of this many users for every split (speed; None: all).
        seed: seed of the user subset.
    """

    def __init__(
        self,
        source: CTRRowSource,
        max_len: int = 50,
        bars_mode: Literal["clean", "bars_compatible"] = "clean",
        valid_fraction: float = 0.1,
        valid_split: Literal["user_tail", "global_tail"] = "user_tail",
        max_users: int | None = None,
        batch_size: int = 256,
        eval_batch_size: int = 512,
        num_workers: int = 0,
        seed: int = 42,
    ) -> None:
        super().__init__(max_len, max_users, batch_size, eval_batch_size, num_workers, seed)
        if not isinstance(source, CTRRowSource):
            raise TypeError(
                f"{type(source).__name__} is not a CTR row source (CTRRowSource): use "
                "seqrec.datamodules.ctr.CTRDataModule to build DIN-style samples from a next-item source"
            )
        if bars_mode not in ("clean", "bars_compatible"):
            raise ValueError(f"bars_mode must be 'clean' or 'bars_compatible', got {bars_mode!r}")
        self.save_hyperparameters(ignore=["source"])
        self.source = source
        self.bars_mode, self.valid_fraction, self.valid_split = bars_mode, valid_fraction, valid_split
        self._rows: dict[str, CTRRows] | None = None

    @property
    def rows(self) -> dict[str, CTRRows]:
        """The source's rows per split, with the validation split of ``bars_mode`` when it has no valid file."""
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
        """Catalogue size N (ids 1..N, the source's vocabulary); linked into the model's ``num_items``."""
        _ = self.rows
        return self.source.num_items

    def prepare_data(self) -> None:
        """Parse the row files once; later ranks and runs read the source's cache."""
        self.source.load_rows()

    def _build(self) -> None:
        """One dataset per split over the rows (of the user subset)."""
        rows = self.rows
        num_users = 1 + max(int(r.user.max()) for r in rows.values() if len(r))
        keep = self._user_subset(num_users)
        base = 0
        for name in SPLITS:
            part = rows[name] if keep is None else rows[name].take(keep[rows[name].user])
            self.datasets[name] = RowQueries(part, self.max_len, index_base=base)
            base += len(part)
        log.info("%s: %d train, %d valid, %d test rows (bars_mode=%s)", self.source.describe(),
                 *(len(self.datasets[n]) for n in SPLITS), self.bars_mode)
