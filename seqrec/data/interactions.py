"""The interactions table (parallel numpy columns, one row per event) and the ``Source`` contract that produces it.

Implementations of ``Source`` live in ``seqrec.data.sources``; data-level modules depend on this contract
only, never on a source module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np


@dataclass
class Interactions:
    """One row per (user, item, time) event, as raw ids straight from a source.

    Columns are parallel 1-D numpy arrays of equal length:
    - ``users``: raw user ids (int64 or str; remapped later by ``preprocess``, which keeps them, and whether they
      were integers, in ``Sequences.user_ids`` / ``id_kinds``, so predictions come back in these ids),
    - ``items``: raw item ids (same),
    - ``times``: float64 or int64 timestamps; where a source has no timestamps (SASRec text
      files) it passes the event's position within the user's sequence, so ordering by time
      keeps the file's order,
    - ``ratings``: float32 or None when the source has no ratings.
    ``item_features``: optional per-raw-item side information (``{feature_name: {raw_item: value}}``),
    filled by sources that have it; the feature layer aligns it with remapped ids.
    """

    users: np.ndarray
    items: np.ndarray
    times: np.ndarray
    ratings: np.ndarray | None = None
    item_features: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.users)
        lengths = {"users": n, "items": len(self.items), "times": len(self.times)}
        if self.ratings is not None:
            lengths["ratings"] = len(self.ratings)
        if len(set(lengths.values())) != 1:
            raise ValueError(f"Interactions columns must have equal lengths, got {lengths}")

    def __len__(self) -> int:
        return len(self.users)

    def take(self, index: np.ndarray) -> Interactions:
        """Rows selected by a boolean mask or integer index."""
        return Interactions(
            users=self.users[index],
            items=self.items[index],
            times=self.times[index],
            ratings=None if self.ratings is None else self.ratings[index],
            item_features=self.item_features,
        )


def positions_within_user(users: np.ndarray) -> np.ndarray:
    """0-based position of each row among the rows of the same user, in file order (stable): the ``times`` of a
    source without timestamps."""
    n = len(users)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(users, kind="stable")
    sorted_users = users[order]
    new_group = np.concatenate(([True], sorted_users[1:] != sorted_users[:-1]))
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    positions = np.empty(n, dtype=np.int64)
    positions[order] = np.arange(n) - group_start
    return positions


class Source(ABC):
    """A dataset family: finds or downloads its raw files and parses them into ``Interactions``.

    ``prepare()`` does the I/O that must happen once (download + checksum into the cache);
    ``load()`` parses the prepared files. ``fingerprint()`` is a short string that changes
    whenever what ``load()`` returns could change (file checksums, variant name); the
    preprocessing cache key includes it. ``item_feature_kinds`` names the item features ``load()``
    fills in ``Interactions.item_features`` and their default kinds (``token``, ``token_seq`` or
    ``float``; see ``seqrec.data.features``); empty when the source has none.
    """

    name: str
    item_feature_kinds: ClassVar[dict[str, str]] = {}

    @abstractmethod
    def prepare(self) -> None:
        """Download (or locate) and verify the raw files; idempotent."""

    @abstractmethod
    def load(self) -> Interactions:
        """Parse the prepared raw files into an interactions table."""

    @abstractmethod
    def fingerprint(self) -> str:
        """Identity of the raw data for cache keys (name, variant and checksums)."""

    def describe(self) -> str:
        """One line for logs."""
        return self.name


def optional(value: str | None) -> str | None:
    """None for an unset optional text option of a ``Source``.

    ``--data.source.timestamp null`` reaches a nested source as the text "None" (jsonargparse 4.x turns a
    null into "None" for ``str | None`` arguments of a subclass nested in a subclass), so "None" and "null"
    mean unset here; a column really named "None" cannot be mapped.
    """
    return None if value is None or str(value).strip() in ("", "None", "null", "~") else value
