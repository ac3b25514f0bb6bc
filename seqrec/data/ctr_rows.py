"""CTR rows as read from ready-made CTR files (BARS/FuxiCTR, DIN text): the row format and its source contract."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Literal

import numpy as np

from seqrec.data.interactions import Source

# ---------------------------------------------------------------------------------------------------


@dataclass
class CTRRows:
    """Row-wise CTR samples with CSR histories: row r has history ``hist_items[hist_indptr[r]:hist_indptr[r+1]]``.

    Histories are oldest first (newest last). ``time`` orders rows (a timestamp, or the row's position
    in its file where the format has none). Ids: items 1..N (0 = padding), users 0..U-1.
    """

    user: np.ndarray  # (R,) int64
    target: np.ndarray  # (R,) int64
    label: np.ndarray  # (R,) float32, 0 or 1
    hist_indptr: np.ndarray  # (R + 1,) int64
    hist_items: np.ndarray  # (nnz,) int64
    time: np.ndarray  # (R,) float64

    def __len__(self) -> int:
        return len(self.user)

    def take(self, rows: np.ndarray) -> CTRRows:
        """The rows ``rows`` (sorted integer index or boolean mask), histories re-packed."""
        rows = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows, dtype=np.int64)
        starts, stops = self.hist_indptr[rows], self.hist_indptr[rows + 1]
        lengths = stops - starts
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        flat = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        return CTRRows(self.user[rows], self.target[rows], self.label[rows], indptr, self.hist_items[flat], self.time[rows])

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The columns as ``{prefix + name: array}`` for ``save_arrays``."""
        return {f"{prefix}{name}": getattr(self, name) for name in ("user", "target", "label", "hist_indptr", "hist_items", "time")}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str) -> CTRRows:
        """Inverse of ``arrays``."""
        return cls(**{name: arrays[f"{prefix}{name}"] for name in ("user", "target", "label", "hist_indptr", "hist_items", "time")})


class CTRRowSource(Source):
    """A source of ready-made CTR rows: ``load_rows()`` -> ``{"train": CTRRows, "test": ..., ["valid": ...]}``."""

    num_items: int

    @abstractmethod
    def load_rows(self) -> dict[str, CTRRows]:
        """Parse (or read from the cache) the split files; sets ``num_items``."""

    def load(self):  # noqa: ANN201 (Source API)
        """CTR row files hold no interaction log; use ``load_rows``."""
        raise TypeError(f"{type(self).__name__} holds CTR rows, not interactions: use it with CTRRowsDataModule")


def clean_validation(train: CTRRows, fraction: float, split: Literal["user_tail", "global_tail"]) -> np.ndarray:
    """Boolean mask over train rows for the clean validation split (the time-ordered tail of train).

    "user_tail": each user's last ⌈fraction·n_u⌉ rows by (time, file order), for users with >= 2 rows;
    "global_tail": the last ⌈fraction·R⌉ rows of train by (time, file order).
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"valid_fraction must lie in (0, 1), got {fraction}")
    rows = np.arange(len(train))
    if split == "global_tail":
        order = np.lexsort((rows, train.time))
        mask = np.zeros(len(train), dtype=bool)
        mask[order[len(train) - int(np.ceil(fraction * len(train))) :]] = True
        return mask
    if split != "user_tail":
        raise ValueError(f"valid_split must be 'user_tail' or 'global_tail', got {split!r}")
    order = np.lexsort((rows, train.time, train.user))
    users = train.user[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = users[1:] != users[:-1]
    start = np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))
    counts = np.bincount(users, minlength=int(users.max()) + 1 if len(users) else 0)[users]
    position = np.arange(len(order)) - start
    held = np.where(counts >= 2, np.ceil(fraction * counts).astype(np.int64), 0)
    mask = np.zeros(len(train), dtype=bool)
    mask[order[position >= counts - held]] = True
    return mask
