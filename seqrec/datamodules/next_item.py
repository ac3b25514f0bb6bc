"""LightningDataModules: source → preprocessing (cached) → split → training examples / evaluation queries."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import numpy as np
from torch import Tensor

from seqrec.data.array_cache import resolve_cache_dir
from seqrec.data.cloze import ClozeExamples, MaskCount, Replacement, check_cloze_settings
from seqrec.data.examples import EvalQueries, TrainExamples, training_spans
from seqrec.data.features import ItemFeatures, ItemFeatureSource, load_item_features
from seqrec.data.interactions import Source
from seqrec.data.negatives import GeneratedNegatives, Sampler, frozen_negatives
from seqrec.data.preprocess import NO_FILTERS, Preprocessing
from seqrec.data.sequences import Sequences
from seqrec.data.splits import Split, leave_last_out
from seqrec.data.temporal import TemporalSplit, TimeCutSplit, describe_split
from seqrec.datamodules.base import RecommendationData
from seqrec.datamodules.loaders import SplitLoaders
from seqrec.datamodules.sequences import SourceSequences

log = logging.getLogger(__name__)
DEFAULT_TEMPORAL = TemporalSplit()  # frozen: safe as a shared default


@dataclass(frozen=True)
class ExpectedCounts:
    """Published counts of a dataset after preprocessing; the datamodule refuses data that differ.

    ``users`` / ``items`` / ``interactions`` (None: not checked) are compared with the preprocessed
    sequences; ``interactions_tolerance`` is the absolute slack of a figure published rounded (LRURec's
    Table 2 gives Sports as 596K: tolerance 500). ``source`` names where the figures come from.
    """

    users: int | None = None
    items: int | None = None
    interactions: int | None = None
    interactions_tolerance: int = 0
    source: str = ""

    def check(self, sequences: Sequences, where: str) -> None:
        """ValueError naming every count of ``sequences`` that differs from the published one."""
        found = {"users": sequences.num_users, "items": sequences.num_items,
                 "interactions": sequences.num_interactions}
        bad = []
        for name, want in (("users", self.users), ("items", self.items)):
            if want is not None and found[name] != want:
                bad.append(f"{name} {found[name]:,} (published {want:,})")
        if self.interactions is not None and abs(found["interactions"] - self.interactions) > self.interactions_tolerance:
            slack = f" ± {self.interactions_tolerance:,}" if self.interactions_tolerance else ""
            bad.append(f"interactions {found['interactions']:,} (published {self.interactions:,}{slack})")
        if bad:
            raise ValueError(
                f"{where}: after preprocessing the data has {', '.join(bad)}"
                f"{' per ' + self.source if self.source else ''}: the file is another version or the preprocessing "
                "differs, so results would not be comparable. Fix the data, or set data.init_args.expected_counts "
                "null to run on it anyway."
            )


class NextItemDataModule(SourceSequences, SplitLoaders, RecommendationData):
    """Next-item data: leave-last-out or temporal split, training windows or prefixes, full or sampled evaluation.

    Args:
        source: where the raw interactions come from (``class_path`` in YAML).
        preprocessing: filters and ordering applied before splitting (cached by their hash).
        max_len: input length L; longer histories keep their newest L items.
        split: "leave_last_out" (per user: last event tests, the one before validates) or "temporal"
            (global time cuts, ``seqrec.data.temporal``: train before the cut, test on the final days).
        temporal: the temporal split's windows and options (used when split="temporal").
        train_mode: "windows" (labels at every position, LRURec/SASRec), "prefix" (one example per prefix) or
            "cloze" (BERT4Rec: LRURec's windows of max_len events, positions masked with ``mask_prob``, labels at the
            masked positions only, ``seqrec.data.cloze``; a query then reads ``max_len - 1`` events, the model
            appending its ``[mask]``).
        mask_prob: in "cloze" mode, the probability that a position is masked (LRURec's ``bert_mask_prob`` 0.2).
        mask_replacement: in "cloze" mode, "bert" (a masked input is [mask] 80 %, a random item 10 %, unchanged
            10 %: the PyTorch BERT4Rec code) or "mask" (always [mask]: the original TensorFlow scripts).
        mask_last_prob: in "cloze" mode, the share of windows that mask their newest event alone (the original
            TensorFlow BERT4Rec's last-item instances, 1/11 of its data; ``seqrec.data.cloze``); 0 (default) none,
            as in the PyTorch code LRURec's baselines come from.
        mask_count: in "cloze" mode, "bernoulli" (default: each position masked independently with ``mask_prob``,
            the PyTorch code's) or "fixed" (exactly max(1, round(n · mask_prob)) of a window's n events, the original
            TensorFlow BERT4Rec's; ``seqrec.data.cloze``).
        window_step: stride between windows of a long sequence (default max_len: non-overlapping).
        label_first: in "windows" mode, keep the label that faces a padding input (LRURec does).
        eval_negatives: None ranks the full catalogue; N ranks the target against N frozen sampled negatives.
        negative_sampler: "uniform" or "popularity" (∝ training counts), for evaluation candidates.
        negatives_storage: "frozen" draws N distinct items the user never touched, once, and stores them in
            the cache (``frozen_negatives``); "generated" draws each query's N items when it is read from a
            generator seeded by (seed, query), uniformly over 1..N with replacement and without exclusion, as
            LRURec's XLong code does (``GeneratedNegatives``: nothing stored; uniform sampler only).
        seed: seed of the evaluation negatives (validation: seed, test: seed + 1).
        expected_counts: the dataset's published users / items / interactions after preprocessing; ``setup``
            raises ValueError when the data differ (None: no check).
        cache_dir: cache root (default ``$SEQREC_CACHE`` or the user cache dir).
        mmap_sequences: map the cached sequence arrays read-only instead of reading them into memory (XLong's
            66.8M events: the page cache holds them, shared by every process).
        features: optional item features (``seqrec.data.features``); None (default) builds none. The tables
            are built once (cached on disk) and reach a model through ``item_feature_spec`` (linked into a
            model's ``feature_spec``) and ``item_feature_tables()`` (copied once into the model's buffers by
            the task), so batches keep carrying item ids only.
    """

    def __init__(
        self,
        source: Source,
        preprocessing: Preprocessing = NO_FILTERS,
        max_len: int = 50,
        split: Literal["leave_last_out", "temporal"] = "leave_last_out",
        temporal: TemporalSplit = DEFAULT_TEMPORAL,
        train_mode: Literal["windows", "prefix", "cloze"] = "windows",
        mask_prob: float = 0.2,
        mask_replacement: Replacement = "bert",
        mask_last_prob: float = 0.0,
        mask_count: MaskCount = "bernoulli",
        window_step: int | None = None,
        label_first: bool = True,
        eval_negatives: int | None = None,
        negative_sampler: Sampler = "uniform",
        negatives_storage: Literal["frozen", "generated"] = "frozen",
        batch_size: int = 128,
        eval_batch_size: int = 256,
        num_workers: int = 0,
        seed: int = 42,
        cache_dir: str | None = None,
        features: ItemFeatureSource | None = None,
        expected_counts: ExpectedCounts | None = None,
        mmap_sequences: bool = False,
    ) -> None:
        super().__init__(max_len, batch_size, eval_batch_size, num_workers)
        if train_mode == "cloze" and max_len < 2:
            raise ValueError(f"train_mode cloze needs max_len >= 2 (one event and the [mask] of a query), got {max_len}")
        check_cloze_settings(mask_prob, mask_replacement, mask_last_prob, mask_count)
        if eval_negatives is not None and eval_negatives < 1:
            raise ValueError(f"eval_negatives must be None (full ranking) or >= 1, got {eval_negatives}")
        if negatives_storage not in ("frozen", "generated"):
            raise ValueError(f"negatives_storage must be 'frozen' or 'generated', got {negatives_storage!r}")
        if negatives_storage == "generated" and negative_sampler != "uniform":
            raise ValueError(
                f"negatives_storage 'generated' draws uniformly (LRURec's XLong protocol); got negative_sampler "
                f"{negative_sampler!r}: use negative_sampler: uniform, or negatives_storage: frozen"
            )
        self.save_hyperparameters(ignore=["source", "features"])
        self.source = source
        self.preprocessing = preprocessing
        if split not in ("leave_last_out", "temporal"):
            raise ValueError(f"split must be 'leave_last_out' or 'temporal', got {split!r}")
        self.split_kind, self.temporal = split, temporal
        self.train_mode = train_mode
        self.mask_prob, self.mask_replacement, self.mask_last_prob = mask_prob, mask_replacement, mask_last_prob
        self.mask_count = mask_count
        self.window_step = window_step or max_len
        self.label_first = label_first
        self.eval_negatives = eval_negatives
        self.negative_sampler = negative_sampler
        self.negatives_storage = negatives_storage
        self.expected_counts = expected_counts
        self.mmap_sequences = mmap_sequences
        self.seed = seed
        self.cache_dir = cache_dir
        self.features = features
        self._item_features: ItemFeatures | None = None
        self._sequences: Sequences | None = None
        self._split: Split | None = None
        self.datasets: dict[str, object] = {}

    # --- data, built once -----------------------------------------------------------------------
    @property
    def item_features(self) -> ItemFeatures | None:
        """The item-feature tables aligned with item ids (row 0 = padding), or None without ``features``."""
        if self.features is not None and self._item_features is None:
            self._item_features = load_item_features(self.features, self.source, self.sequences, self.cache_dir)
        return self._item_features

    @property
    def item_feature_spec(self) -> list[dict]:
        """Name, kind, vocab_size, max_tokens per feature ([] without features); linked into ``feature_spec``."""
        return [] if self.item_features is None else self.item_features.spec()

    def item_feature_tables(self) -> dict[str, Tensor]:
        """``{name: tensor}``: the (N + 1, ...) feature tables a model copies into its buffers ({} without features)."""
        return {} if self.item_features is None else self.item_features.tensors()

    @property
    def cloze_inputs(self) -> bool:
        """True in "cloze" mode: training inputs hold the model's [mask] token."""
        return self.train_mode == "cloze"

    @property
    def history_len(self) -> int:
        """Events a query reads: ``max_len``, or ``max_len - 1`` in "cloze" mode (the model appends its [mask] token).

        The evaluation windows, ``seqrec.load_run`` (``recommend``, ``predict``) and ``seqrec serve`` all read it,
        so they give a model the same history and mask the same items.
        """
        return self.max_len - 1 if self.train_mode == "cloze" else self.max_len

    @property
    def split(self) -> Split:
        """The split of ``sequences`` (leave-last-out, or temporal by global time cuts)."""
        if self._split is None:
            if self.split_kind == "temporal":
                self._split = self.temporal.apply(self.sequences)
            else:
                self._split = leave_last_out(self.sequences)
            if isinstance(self._split, TimeCutSplit):
                log.info("%s", describe_split(self._split))
        return self._split

    def prepare_data(self) -> None:
        """Download and preprocess once (rank 0); later ranks and runs read the cache."""
        _ = self.sequences
        _ = self.item_features

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets of the split (every rank; cheap: views over the cached arrays)."""
        if self.datasets:
            return
        if self.expected_counts is not None:
            self.expected_counts.check(self.sequences, self.source.describe())
        split = self.split
        items = split.sequences.items
        start, stop = training_spans(split, self.max_len, self.train_mode, self.window_step)
        if len(start) == 0:
            raise ValueError("the training split is empty: every user has fewer than 2 training events")
        if self.train_mode == "cloze":
            self.datasets["train"] = ClozeExamples(
                items, start, stop, self.max_len, self.num_items, mask_prob=self.mask_prob,
                replacement=self.mask_replacement, mask_last_prob=self.mask_last_prob, mask_count=self.mask_count,
            )
        else:
            self.datasets["train"] = TrainExamples(items, start, stop, self.max_len, self.train_mode, self.label_first)
        counts = np.bincount(items[split.train_mask()], minlength=self.num_items + 1)
        self.train_item_counts = counts  # (N + 1,) events per item in the training part
        for name, examples in (("valid", split.valid), ("test", split.test)):
            negatives: np.ndarray | GeneratedNegatives | None = None
            seed = self.seed + (0 if name == "valid" else 1)
            if self.eval_negatives is not None and self.negatives_storage == "generated":
                negatives = GeneratedNegatives(len(examples), self.eval_negatives, self.num_items, seed)
            elif self.eval_negatives is not None:
                negatives = frozen_negatives(
                    split.sequences,
                    examples,
                    self.eval_negatives,
                    self.negative_sampler,
                    seed=seed,
                    cache_dir=resolve_cache_dir(self.cache_dir) / "negatives",
                    tag=f"{self.source.fingerprint()}|{self.preprocessing.key()}|{name}",
                    counts=counts,
                )
            self.datasets[name] = EvalQueries(items, examples, self.history_len, negatives, longest_first=True)
        log.info(
            "%s: %s; %d training examples, %d validation and %d test queries",
            self.source.describe(), self.sequences.summary(), len(start), len(split.valid), len(split.test),
        )
