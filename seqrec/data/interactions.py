"""The interactions table every source produces: parallel numpy columns, one row per event."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Interactions:
    """One row per (user, item, time) event, as raw ids straight from a source.

    Columns are parallel 1-D numpy arrays of equal length:
    - ``users``: raw user ids (int64 or str objects; remapped later by ``preprocess``),
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
