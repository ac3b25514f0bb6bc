"""``Sequences``: every user's time-ordered item ids as flat CSR arrays, with an atomic on-disk cache."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_ARRAYS = ("indptr", "items", "times", "user_ids", "item_ids")
_FORMAT_VERSION = 1


@dataclass
class Sequences:
    """Users' item sequences in CSR form (no Python list per user).

    ``items[indptr[u]:indptr[u+1]]`` is user ``u``'s sequence in time order, with item ids in
    ``1..num_items`` (0 is reserved for padding). ``times`` is parallel to ``items``.
    ``user_ids[u]`` and ``item_ids[i]`` are the raw ids as strings (``item_ids[0] == ""``, the padding).
    """

    indptr: np.ndarray  # (U + 1,) int64
    items: np.ndarray  # (nnz,) int64, values in 1..num_items
    times: np.ndarray  # (nnz,) float64
    user_ids: np.ndarray  # (U,) str
    item_ids: np.ndarray  # (num_items + 1,) str

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
        if problems:
            raise ValueError("inconsistent Sequences: " + "; ".join(problems))

    # --- cache ------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """Write the arrays and a manifest with CRC32s to ``directory`` atomically (temp dir, then rename)."""
        directory = Path(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        try:
            manifest: dict = {"version": _FORMAT_VERSION, "arrays": {}}
            for name in _ARRAYS:
                array = getattr(self, name)
                if array.dtype.kind in "OU":
                    array = array.astype(str)
                path = tmp / f"{name}.npy"
                np.save(path, array, allow_pickle=False)
                manifest["arrays"][name] = {"crc32": _crc32(path), "bytes": path.stat().st_size}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
            if directory.exists():
                shutil.rmtree(directory)
            os.replace(tmp, directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @classmethod
    def load(cls, directory: str | Path) -> Sequences:
        """Read a cache written by ``save``; ValueError when any file is missing, truncated or altered."""
        directory = Path(directory)
        manifest_path = directory / "manifest.json"
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"sequence cache {directory} has no readable manifest.json ({error})") from error
        if manifest.get("version") != _FORMAT_VERSION:
            raise ValueError(f"sequence cache {directory} has format {manifest.get('version')}, need {_FORMAT_VERSION}")
        arrays = {}
        for name in _ARRAYS:
            path = directory / f"{name}.npy"
            expected = manifest["arrays"].get(name, {})
            if not path.exists():
                raise ValueError(f"sequence cache {directory} lacks {path.name}")
            if path.stat().st_size != expected.get("bytes") or _crc32(path) != expected.get("crc32"):
                raise ValueError(f"sequence cache file {path} does not match its manifest (corrupt or altered)")
            arrays[name] = np.load(path, allow_pickle=False)
        sequences = cls(**arrays)
        sequences.validate()
        return sequences


def _crc32(path: Path) -> int:
    """CRC32 of a file, streamed (fast enough to check a 500 MB cache in about a second)."""
    value = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            value = zlib.crc32(chunk, value)
    return value
