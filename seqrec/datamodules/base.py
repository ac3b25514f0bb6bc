"""What every recommendation datamodule declares: the catalogue, the input window, the batch sizes, item features.

Tasks, callbacks, the builder and the Python API read the data through this contract (``isinstance(datamodule,
RecommendationData)`` and its attributes), never by probing for names. ``max_len`` is declared here once: the
builder links ``data.init_args.max_len`` into the network's ``max_len`` when the config is parsed
(``seqrec.build``), so the data and the model never disagree on the window.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import lightning as L
from torch import Tensor


class RecommendationData(L.LightningDataModule, ABC):
    """Base of the next-item, CTR and language-model datamodules.

    Args:
        max_len: L, the input window (the newest L events of a history); linked into the network's ``max_len``.
        batch_size / eval_batch_size: examples per training / evaluation batch.
        num_workers: DataLoader worker processes.

    Subclasses implement ``num_items`` (the catalogue size N: ids 1..N, 0 = padding) and override the optional
    capabilities below where they have them (item features, cloze inputs, a query window shorter than ``max_len``).
    """

    max_len: int
    batch_size: int
    eval_batch_size: int
    num_workers: int

    def __init__(self, max_len: int, batch_size: int, eval_batch_size: int, num_workers: int) -> None:
        super().__init__()
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self.max_len = max_len
        self.batch_size, self.eval_batch_size, self.num_workers = batch_size, eval_batch_size, num_workers

    @property
    @abstractmethod
    def num_items(self) -> int:
        """Catalogue size N (ids 1..N); linked into the model's ``num_items`` by the builder."""

    @property
    def history_len(self) -> int:
        """Events a query reads (default ``max_len``); the evaluation, ``seqrec.load_run`` and serving read it."""
        return self.max_len

    @property
    def cloze_inputs(self) -> bool:
        """True when training inputs hold a ``[mask]`` token (a cloze model's data, BERT4Rec); default False."""
        return False

    @property
    def item_feature_spec(self) -> list[dict]:
        """Name, kind, vocab_size, max_tokens per item feature (default none); linked into a model's ``feature_spec``."""
        return []

    def item_feature_tables(self) -> dict[str, Tensor]:
        """``{name: (N + 1, ...) tensor}`` item-feature tables a feature model copies into its buffers (default none)."""
        return {}
