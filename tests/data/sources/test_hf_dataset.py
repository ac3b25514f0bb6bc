"""``HFDataset``: datasets written offline with ``datasets`` itself (save_to_disk, a Parquet directory) read like a CSV."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from seqrec.data.preprocess import Preprocessing, load_sequences
from seqrec.data.sources.hf_dataset import HFDataset
from seqrec.data.sources.interactions_file import InteractionsFile
from tests.data.sources.test_interactions_file import write_events

datasets = pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def offline_hf(tmp_path_factory, monkeypatch) -> None:
    """No network and a private Hugging Face cache for every test here."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path_factory.mktemp("hf-cache")))


def write_hf_dataset(root: Path) -> dict[str, Path]:
    """The events of ``write_events`` as a ``save_to_disk`` directory and as a directory of Parquet files."""
    write_events(root / "events.csv")
    table = datasets.load_dataset("csv", data_files=str(root / "events.csv"), split="train")
    table.save_to_disk(str(root / "saved"))
    (root / "parquet").mkdir()
    table.to_parquet(str(root / "parquet" / "train.parquet"))
    return {"csv": root / "events.csv", "saved": root / "saved", "parquet": root / "parquet"}


def test_a_saved_dataset_and_a_parquet_directory_equal_the_csv(tmp_path):
    paths = write_hf_dataset(tmp_path)
    from_csv = load_sequences(InteractionsFile(str(paths["csv"]), user="user_id", item="item_id"), Preprocessing(), None)
    for name in ("saved", "parquet"):
        for batch_size in (1_000_000, 97):  # one Arrow batch, or many
            src = HFDataset(str(paths[name]), user="user_id", item="item_id", batch_size=batch_size)
            seqs = load_sequences(src, Preprocessing(), tmp_path / f"cache-{name}-{batch_size}")
            assert seqs.id_kinds == ("str", "str")
            assert list(seqs.user_ids) == list(from_csv.user_ids) and list(seqs.item_ids) == list(from_csv.item_ids)
            assert np.array_equal(seqs.items, from_csv.items) and np.array_equal(seqs.times, from_csv.times)


def test_row_order_without_timestamps_spans_batches(tmp_path):
    table = datasets.Dataset.from_dict({"u": [1, 2, 1, 1, 2], "i": [5, 6, 7, 8, 9]})
    table.save_to_disk(str(tmp_path / "d"))
    inter = HFDataset(str(tmp_path / "d"), user="u", item="i", timestamp=None, batch_size=2).load()
    assert inter.users.dtype == np.int64 and list(inter.times) == [0, 0, 1, 2, 1]


def test_missing_column_split_and_dataset_are_one_line_errors(tmp_path):
    paths = write_hf_dataset(tmp_path)
    with pytest.raises(ValueError, match=r"column 'user', the features: no such column .*'user_id'.*set --data.source.user"):
        HFDataset(str(paths["parquet"]), item="item_id").load()
    with pytest.raises(ValueError, match="cannot load it") as error:
        HFDataset(str(paths["parquet"]), split="test", user="user_id", item="item_id").load()
    assert "\n" not in str(error.value)
    bad = datasets.Dataset.from_dict({"user": ["a", None], "item": [1, 2], "timestamp": [1, 2]})
    bad.save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match=r"column 'user', row 2: empty value"):
        HFDataset(str(tmp_path / "bad")).load()
