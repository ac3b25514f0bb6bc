"""``Sequences``: every user's time-ordered item ids as flat CSR arrays, with an atomic on-disk cache."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqrec.data.array_cache import load_arrays, save_arrays

_ARRAYS = ("indptr", "items", "times", "user_ids", "item_ids")
ID_KINDS = ("int", "str")  # the optional ``id_kinds`` array: absent from older caches, loaded as None


@dataclass
class Sequences:
    """Users' item sequences in CSR form (no Python list per user).

    ``items[indptr[u]:indptr[u+1]]`` is user ``u``'s sequence in time order, with item ids in
    ``1..num_items`` (0 is reserved for padding). ``times`` is parallel to ``items``.
    ``user_ids[u]`` and ``item_ids[i]`` are the raw ids as strings (``item_ids[0] == ""``, the padding).
    ``id_kinds`` is ``(user kind, item kind)``, each "int" or "str": the raw ids' type before they were stored
    as strings, so ``raw_user_ids`` / ``raw_item_ids`` give them back as the source had them (None: unknown,
    strings are returned).
    """

    indptr: np.ndarray  # (U + 1,) int64
    items: np.ndarray  # (nnz,) int64, values in 1..num_items
    times: np.ndarray  # (nnz,) float64
    user_ids: np.ndarray  # (U,) str
    item_ids: np.ndarray  # (num_items + 1,) str
    id_kinds: tuple[str, str] | None = None

    @property
    def num_users(self) -> int:
        """Number of users (rows)."""
        return len(self.indptr) - 1

    @property
    def num_items(self) -> int:
        """Catalogue size, excluding the padding id 0."""
        return len(self.item_ids) - 1

    @property
    def num_interactions(self) -> int:
        """Total number of events."""
        return int(self.indptr[-1])

    def lengths(self) -> np.ndarray:
        """(U,) sequence length per user."""
        return np.diff(self.indptr)

    def sequence(self, user: int) -> np.ndarray:
        """User ``user``'s item ids in time order (a view)."""
        return self.items[self.indptr[user] : self.indptr[user + 1]]

    def item_counts(self) -> np.ndarray:
        """(num_items + 1,) number of events per item id (index 0 stays 0)."""
        return np.bincount(self.items, minlength=self.num_items + 1)

    def raw_user_ids(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Raw user ids of ``rows`` (default: every user) in the source's type: int64 for integer ids, else str."""
        ids = self.user_ids if rows is None else self.user_ids[rows]
        return ids.astype(np.int64) if self.id_kinds is not None and self.id_kinds[0] == "int" else ids

    def raw_item_ids(self, items: np.ndarray | None = None) -> np.ndarray:
        """Raw ids of item ids ``items`` (1..N; default: the catalogue 1..N) in the source's type."""
        ids = self.item_ids[1:] if items is None else self.item_ids[items]
        return ids.astype(np.int64) if self.id_kinds is not None and self.id_kinds[1] == "int" else ids

    def summary(self) -> str:
        """users / items / interactions in one line."""
        return f"{self.num_users:,} users, {self.num_items:,} items, {self.num_interactions:,} interactions"

    def validate(self) -> None:
        """Raise ValueError when the arrays are inconsistent (corrupt cache or bad construction)."""
        problems = []
        if self.indptr.ndim != 1 or len(self.indptr) < 1 or self.indptr[0] != 0:
            problems.append("indptr must be 1-D and start at 0")
        elif np.any(np.diff(self.indptr) < 0):
            problems.append("indptr must be non-decreasing")
        elif self.indptr[-1] != len(self.items):
            problems.append(f"indptr[-1]={self.indptr[-1]} but there are {len(self.items)} items")
        if len(self.times) != len(self.items):
            problems.append(f"{len(self.times)} times for {len(self.items)} items")
        if len(self.user_ids) != self.num_users:
            problems.append(f"{len(self.user_ids)} user ids for {self.num_users} users")
        if len(self.items) and (self.items.min() < 1 or self.items.max() > self.num_items):
            problems.append(
                f"item ids must lie in 1..{self.num_items}, found {self.items.min()}..{self.items.max()}"
            )
        if self.id_kinds is not None and (len(self.id_kinds) != 2 or not set(self.id_kinds) <= set(ID_KINDS)):
            problems.append(f"id_kinds must be two of {ID_KINDS}, got {self.id_kinds!r}")
        if problems:
            raise ValueError("inconsistent Sequences: " + "; ".join(problems))

    # --- cache ------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """Write the arrays and a manifest with CRC32s to ``directory`` atomically (temp dir, then rename)."""
        arrays = {name: getattr(self, name) for name in _ARRAYS}
        if self.id_kinds is not None:
            arrays["id_kinds"] = np.array(self.id_kinds)
        save_arrays(directory, arrays)

    @classmethod
    def load(cls, directory: str | Path, mmap: bool = False) -> Sequences:
        """Read a cache written by ``save``; ValueError when any file is missing, truncated or altered.

        ``mmap=True`` maps the arrays read-only instead of reading them into memory (XLong: 66.8M events).
        """
        arrays, _ = load_arrays(directory, mmap=mmap)
        missing = [name for name in _ARRAYS if name not in arrays]
        if missing:
            raise ValueError(f"sequence cache {directory} lacks {missing}")
        kinds = arrays.get("id_kinds")
        sequences = cls(**{name: arrays[name] for name in _ARRAYS}, id_kinds=None if kinds is None else tuple(kinds.tolist()))
        sequences.validate()
        return sequences


def user_of_offsets(sequences: Sequences) -> np.ndarray:
    """(nnz,) int64 user row of every event offset."""
    return np.repeat(np.arange(sequences.num_users, dtype=np.int64), sequences.lengths())


class RawIdIndex:
    """Raw id -> position in ``ids`` (a str array, as ``Sequences.user_ids`` / ``item_ids``), vectorised.

    Lookups compare string forms, so ``7`` and ``"7"`` find the same entry; unknown ids map to -1.
    Memory is one sorted copy of ``ids`` and its argsort (no Python dict per id). Keys are compared at the width
    of ``ids``: a key longer than every id is unknown without a comparison (numpy would otherwise widen the whole
    sorted copy to the longest key's width: a 1 Mi-character key against 3,000 ids is 12.5 GB).
    """

    def __init__(self, ids: np.ndarray) -> None:
        self.order = np.argsort(ids, kind="stable")
        self.sorted = ids[self.order]

    def lookup(self, raw: np.ndarray | list) -> np.ndarray:
        """(n,) int64 positions of ``raw`` ids in ``ids``, -1 where absent."""
        keys = np.asarray(raw)
        if len(self.sorted) == 0 or len(keys) == 0:
            return np.full(len(keys), -1, dtype=np.int64)
        width = max(self.sorted.dtype.itemsize // 4, 1)
        if keys.dtype.kind == "U":
            fits = np.char.str_len(keys) <= width
        else:  # numbers or Python values: their text
            text = [k if type(k) is str else str(k) for k in keys.tolist()]
            fits = np.fromiter(map(len, text), dtype=np.int64, count=len(text)) <= width
            keys = np.array(text, dtype=object)
        keys = keys.astype(self.sorted.dtype)  # cuts an overlong key, which ``fits`` then rules out
        at = np.minimum(np.searchsorted(self.sorted, keys), len(self.sorted) - 1)
        found = (self.sorted[at] == keys) & fits
        return np.where(found, self.order[at], -1).astype(np.int64)
