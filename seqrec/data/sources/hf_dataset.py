"""Interactions from a Hugging Face dataset: a Hub dataset, a local Parquet / CSV / JSON directory, or a ``save_to_disk`` copy.

``HFDataset(path, name=None, split="train", data_files=None, ...)`` calls ``datasets.load_dataset`` with
those arguments (or ``datasets.load_from_disk`` for a directory written by ``Dataset.save_to_disk``) and maps
columns as ``InteractionsFile`` does (``seqrec.data.table``) (``user``, ``item``, ``timestamp``, ``rating``; ids integers or text,
kept with their type, text stripped of surrounding whitespace). The dataset's Arrow cache is read in batches straight to numpy (``with_format("arrow")``;
no Python object per row). Needs the ``datasets`` package: ``pip install 'seqrec[hf]'``.

A Hub dataset needs the network the first time (then ``datasets`` reads its own cache, also with
``HF_DATASETS_OFFLINE=1``); a local directory never does.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import numpy as np

from seqrec.data.interactions import Interactions, Source, optional, positions_within_user
from seqrec.data.table import (
    ID_RULES,
    ColumnMap,
    Where,
    check_columns,
    concat_interactions,
    interactions_from_table,
)

log = logging.getLogger(__name__)


def _datasets():  # noqa: ANN202 (module)
    """The ``datasets`` package, or a one-line error saying how to install it."""
    try:
        import datasets
    except ImportError:
        raise ImportError("HFDataset needs the datasets package: pip install 'seqrec[hf]' (or pip install datasets)") from None
    return datasets


def _is_saved_to_disk(path: str) -> bool:
    """True for a directory written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    directory = Path(path).expanduser()
    return directory.is_dir() and ((directory / "state.json").is_file() or (directory / "dataset_dict.json").is_file())


class HFDataset(Source):
    """A Hugging Face dataset of interactions, one row per event.

    Args:
        path: a Hub dataset (``"user/dataset"``), a builder (``"parquet"``, ``"csv"``, ``"json"`` with
            ``data_files``), a local directory of data files, or a ``save_to_disk`` directory.
        name: the dataset configuration (``load_dataset``'s ``name``).
        split: the split holding the interactions (the whole log; seqrec makes its own train/valid/test).
        data_files, data_dir, revision: passed to ``load_dataset``.
        user, item, timestamp, rating: the columns, as for ``InteractionsFile`` (timestamp None: row order).
        timestamp_format: a ``strptime`` format for text timestamps that are not ISO 8601.
        hf_cache_dir: ``load_dataset``'s ``cache_dir`` (default: ``$HF_HOME`` / ``~/.cache/huggingface``).
        batch_size: rows converted per Arrow batch.
    """

    def __init__(
        self,
        path: str,
        name: str | None = None,
        split: str = "train",
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        data_dir: str | None = None,
        revision: str | None = None,
        user: str = "user",
        item: str = "item",
        timestamp: str | None = "timestamp",
        rating: str | None = None,
        timestamp_format: str | None = None,
        hf_cache_dir: str | None = None,
        batch_size: int = 1_000_000,
    ) -> None:
        self.path, self.config_name, self.split = path, optional(name), split
        self.data_files = optional(data_files) if isinstance(data_files, str) else data_files
        self.data_dir, self.revision = optional(data_dir), optional(revision)
        self.columns = ColumnMap(user, item, optional(timestamp), optional(rating))
        self.timestamp_format = optional(timestamp_format)
        self.hf_cache_dir = optional(hf_cache_dir)
        if batch_size < 1:
            raise ValueError(f"HFDataset: batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        base = Path(path.rstrip("/")).name or "dataset"
        self.name = "hf-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(p for p in (base, self.config_name, split) if p))
        self._dataset = None

    def describe(self) -> str:
        """One line for logs."""
        config = f", name={self.config_name!r}" if self.config_name else ""
        return f"HFDataset({self.path!r}{config}, split={self.split!r}, {self.columns.key()})"

    def _where(self) -> str:
        return f"HF dataset {self.path}" + (f" ({self.config_name})" if self.config_name else "") + f" [{self.split}]"

    def prepare(self) -> None:
        """Load (download on first use of a Hub dataset) and check that the mapped columns exist."""
        if self._dataset is not None:
            return
        datasets = _datasets()
        try:
            if _is_saved_to_disk(self.path):
                loaded = datasets.load_from_disk(str(Path(self.path).expanduser()))
            else:
                loaded = datasets.load_dataset(
                    self.path, self.config_name, split=self.split, data_files=self.data_files, data_dir=self.data_dir,
                    revision=self.revision, cache_dir=self.hf_cache_dir,
                )
        except Exception as error:  # noqa: BLE001 (datasets raises many kinds: not found, offline, bad files)
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ValueError(
                f"{self._where()}: cannot load it ({type(error).__name__}: {first}); check path, name, split and "
                "data_files (a Hub dataset needs the network on first use)"
            ) from None
        if isinstance(loaded, datasets.DatasetDict):
            if self.split not in loaded:
                raise ValueError(f"{self._where()}: no split {self.split!r}; the splits are {sorted(loaded)}: "
                                 "set --data.source.split")
            loaded = loaded[self.split]
        check_columns(list(loaded.column_names), self.columns, self._where(), header="the features")
        if loaded.num_rows == 0:
            raise ValueError(f"{self._where()}: the split has no rows; expected one row per interaction")
        self._dataset = loaded

    def fingerprint(self) -> str:
        """``datasets``' own fingerprint of the loaded split, its files' sizes and times, and the column mapping."""
        self.prepare()
        digest = hashlib.sha256()
        for entry in self._dataset.cache_files:
            file = Path(entry["filename"])
            stat = file.stat() if file.exists() else None
            digest.update(f"{file}:{stat.st_size if stat else 0}:{stat.st_mtime_ns if stat else 0}\n".encode())
        where = f"{self.path}:{self.config_name}:{self.split}:{self.data_files}:{self.data_dir}:{self.revision}"
        return (f"HFDataset:{where}:{self.columns.key()}:{ID_RULES}:{self.timestamp_format!r}:"
                f"{getattr(self._dataset, '_fingerprint', '')}:{digest.hexdigest()[:16]}")

    def load(self) -> Interactions:
        """The mapped columns, Arrow batch by Arrow batch, as one interactions table."""
        self.prepare()
        wanted = list(dict.fromkeys(self.columns.roles().values()))
        arrow = self._dataset.select_columns(wanted).with_format("arrow")
        parts, offset = [], 0
        for table in arrow.iter(batch_size=self.batch_size):
            where = Where(self._where(), row_offset=offset)
            parts.append(interactions_from_table(table, self.columns, where, timestamp_format=self.timestamp_format))
            offset += table.num_rows
        result = concat_interactions(parts)
        if self.columns.timestamp is None and len(parts) > 1:  # positions within each user, over all batches
            result.times = positions_within_user(result.users)
        log.info("%s: %d interactions, %d users, %d items", self.describe(), len(result),
                 len(np.unique(result.users)), len(np.unique(result.items)))
        return result
