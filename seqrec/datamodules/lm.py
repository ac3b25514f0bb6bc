"""Language-model data for EvoRNN's LM1B variant: the One Billion Word benchmark, 128-word windows, last 4 words held out.

The text comes from ``seqrec.data.sources.lm1b.LM1B`` (which shards, how a single file is split); the
vocabulary, the token streams and the windows (the last ``num_targets`` words of each window are targets,
never inputs) from ``seqrec.data.lm_windows``. ``LMDataModule`` builds the vocabulary and the token streams
once, caches them (``<cache>/lm/<key>/``, an ``array_cache`` directory) and serves the windows.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Literal

import numpy as np

from seqrec.data.array_cache import load_arrays, resolve_cache_dir, save_arrays
from seqrec.data.lm_windows import UNK, LMWindows, build_vocabulary, encode
from seqrec.data.sources.lm1b import LM1B, SPLITS
from seqrec.datamodules.base import RecommendationData
from seqrec.datamodules.loaders import SplitLoaders

log = logging.getLogger(__name__)


class LMDataModule(SplitLoaders, RecommendationData):
    """LM1B windows for next-word models: a vocabulary is a catalogue of "items".

    Args:
        source: an ``LM1B`` source.
        max_len: model input length; windows hold max_len + 1 words (127 -> 128-word windows).
        num_targets: words held out at the end of each window (4).
        train_labels: "all" labels every context position too; "targets" only the held-out words.
        min_count / max_vocab: vocabulary from the training text (``seqrec.data.lm_windows``).
        add_eos: append ``</s>`` to every sentence.
        batch_size / eval_batch_size / num_workers: loaders.
        cache_dir: where token streams and the vocabulary are cached (``<cache>/lm/<key>/``).
    """

    def __init__(
        self,
        source: LM1B,
        max_len: int = 127,
        num_targets: int = 4,
        train_labels: Literal["all", "targets"] = "all",
        min_count: int = 3,
        max_vocab: int | None = None,
        add_eos: bool = True,
        batch_size: int = 64,
        eval_batch_size: int = 128,
        num_workers: int = 0,
        cache_dir: str | None = None,
    ) -> None:
        if not 1 <= num_targets < max_len:
            raise ValueError(f"num_targets must lie in 1..max_len-1, got num_targets={num_targets}, max_len={max_len}")
        if train_labels not in ("all", "targets"):
            raise ValueError(f"train_labels must be 'all' or 'targets', got {train_labels!r}")
        if min_count < 1 or (max_vocab is not None and max_vocab < 1):
            raise ValueError(f"need min_count >= 1 and max_vocab None or >= 1, got {min_count}, {max_vocab}")
        super().__init__(max_len, batch_size, eval_batch_size, num_workers)
        self.save_hyperparameters(ignore=["source"])
        self.source = source
        self.num_targets, self.train_labels = num_targets, train_labels
        self.min_count, self.max_vocab, self.add_eos = min_count, max_vocab, add_eos
        self.cache_dir = cache_dir
        self._vocabulary: list[str] | None = None
        self._tokens: dict[str, np.ndarray] = {}
        self.datasets: dict[str, LMWindows] = {}

    # --- data, built once and cached ------------------------------------------------------------
    def _cache_directory(self) -> Path:
        options = json.dumps([self.min_count, self.max_vocab, self.add_eos], sort_keys=True)
        key = hashlib.sha256(f"{self.source.fingerprint()}|{options}".encode()).hexdigest()[:20]
        return resolve_cache_dir(self.cache_dir) / "lm" / f"{self.source.name}-{key}"

    def _load(self) -> None:
        if self._vocabulary is not None:
            return
        directory = self._cache_directory()
        if directory.is_dir():
            try:
                arrays, _ = load_arrays(directory)
                vocabulary = arrays["vocabulary"].tolist()
                tokens = {split: arrays[split] for split in SPLITS}
                if any(t.size and int(t.max()) >= len(vocabulary) for t in tokens.values()):
                    raise ValueError("token ids exceed the vocabulary")
                self._vocabulary, self._tokens = vocabulary, tokens
                log.info("lm: loaded token streams and a %d-word vocabulary from %s", len(vocabulary), directory)
                return
            except (OSError, ValueError, KeyError) as error:
                log.warning("lm: cache %s is unreadable (%s); rebuilding it", directory, error)
        train = self.source.sentences("train")
        vocabulary = build_vocabulary(train, self.min_count, self.max_vocab)
        tokens = {"train": encode(train, vocabulary, self.add_eos)}
        for split in ("valid", "test"):
            tokens[split] = encode(self.source.sentences(split), vocabulary, self.add_eos)
        save_arrays(directory, {**tokens, "vocabulary": np.array(vocabulary, dtype=str)})
        self._vocabulary, self._tokens = vocabulary, tokens

    @property
    def vocabulary(self) -> list[str]:
        """Token strings by id (0 padding, 1 <unk>, 2 </s>, 3 <blank>, then words)."""
        self._load()
        assert self._vocabulary is not None
        return self._vocabulary

    def tokens(self, split: str) -> np.ndarray:
        """The split's token stream (int32 ids)."""
        self._load()
        return self._tokens[split]

    @property
    def num_items(self) -> int:
        """Vocabulary size without padding (ids 1..N); linked into the model's ``num_items``."""
        return len(self.vocabulary) - 1

    def prepare_data(self) -> None:
        """Locate or download the text and build the cached token streams once."""
        self._load()

    def setup(self, stage: str | None = None) -> None:
        """Windows over each split's stream."""
        if self.datasets:
            return
        for split in SPLITS:
            label_context = split == "train" and self.train_labels == "all"
            self.datasets[split] = LMWindows(self.tokens(split), self.max_len, self.num_targets, label_context)
        empty = [s for s in SPLITS if len(self.datasets[s]) == 0]
        if empty:
            raise ValueError(
                f"lm: the {empty} split(s) hold fewer than {self.max_len + 1} tokens, not one window: use more text "
                "or a shorter max_len"
            )
        unk = {s: float(np.mean(self.tokens(s) == UNK)) for s in SPLITS}
        log.info(
            "%s: vocabulary %d; windows train %d, valid %d, test %d; <unk> rate %s",
            self.source.describe(), len(self.vocabulary), *(len(self.datasets[s]) for s in SPLITS),
            {s: round(v, 4) for s, v in unk.items()},
        )
