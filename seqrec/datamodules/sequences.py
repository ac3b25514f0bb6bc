"""What every datamodule built from a next-item ``Source`` shares: its preprocessed sequences and catalogue size."""

from __future__ import annotations

from seqrec.data.interactions import Source
from seqrec.data.preprocess import Preprocessing, load_sequences
from seqrec.data.sequences import Sequences


class SourceSequences:
    """Mixin: ``sequences`` (loaded from the cache or built once) and ``num_items`` of ``source`` under ``preprocessing``.

    The datamodule sets ``source``, ``preprocessing``, ``cache_dir`` and ``_sequences = None`` in its ``__init__``
    (and ``mmap_sequences`` to map the cached arrays read-only instead of reading them into memory).
    """

    source: Source
    preprocessing: Preprocessing
    cache_dir: str | None
    _sequences: Sequences | None
    mmap_sequences: bool = False

    @property
    def sequences(self) -> Sequences:
        """The preprocessed sequences (loaded or built on first use)."""
        if self._sequences is None:
            self._sequences = load_sequences(self.source, self.preprocessing, self.cache_dir, mmap=self.mmap_sequences)
        return self._sequences

    @property
    def num_items(self) -> int:
        """Catalogue size N (ids 1..N); linked into the model's ``num_items`` by the builder."""
        return self.sequences.num_items
