"""Raw item ids <-> item rows 1..N (``Sequences.item_ids`` order), one hash map: what every caller looks items up in.

The Python API (``TrainedRun.items``), ``predict`` and serving share this map. Keys are the ids' text, so ``7`` and
``"7"`` find the same item (the data keeps raw ids as strings). A lookup costs O(length of the key) whatever the
catalogue's size (a sorted array of fixed-width strings would widen the whole catalogue to the longest key's width);
memory is one dict entry per item. Lookups run in slices of ``LOOKUP_CHUNK`` ids, one C call each, so another
thread (the server's event loop answering /health) may take the GIL between them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

LOOKUP_CHUNK = 4096  # ids looked up per C call


class ItemMap:
    """Raw item ids <-> item rows 1..N; row 0 is the padding and no raw id maps to it (module docstring)."""

    def __init__(self, item_ids: np.ndarray, raw_of: Callable[[np.ndarray], np.ndarray]) -> None:
        """item_ids: (N + 1,) the ids' text, ``item_ids[0]`` the padding; raw_of: rows -> raw ids as the source had them."""
        self.index: dict[str, int] = {raw: i for i, raw in enumerate(np.asarray(item_ids).astype(str).tolist()) if i > 0}
        self.raw_of = raw_of
        self.size = len(item_ids) - 1

    @classmethod
    def of_sequences(cls, sequences: Any) -> ItemMap:  # noqa: ANN401 (seqrec.data.sequences.Sequences)
        """The catalogue of a run's data."""
        return cls(sequences.item_ids, sequences.raw_item_ids)

    @classmethod
    def numbered(cls, num_items: int) -> ItemMap:
        """Items named 1..N (a model without data, e.g. the serving benchmark's)."""
        ids = np.array([""] + [str(i) for i in range(1, num_items + 1)])
        return cls(ids, lambda rows: np.asarray(rows, dtype=np.int64))

    def rows(self, raw: Sequence[Any] | np.ndarray) -> np.ndarray:
        """(n,) int64 item rows 1..N of raw ids, 0 where the catalogue has none."""
        values = raw if isinstance(raw, (list, np.ndarray)) else list(raw)
        out = np.empty(len(values), dtype=np.int64)
        for start in range(0, len(values), LOOKUP_CHUNK):
            part = values[start:start + LOOKUP_CHUNK]
            out[start:start + len(part)] = np.fromiter(map(self.index.get, map(str, part), itertools.repeat(0)),
                                                       dtype=np.int64, count=len(part))
        return out

    def raw(self, rows: np.ndarray) -> list[Any]:
        """Raw ids (JSON-ready Python values) of item rows."""
        return self.raw_of(np.asarray(rows, dtype=np.int64)).tolist()
