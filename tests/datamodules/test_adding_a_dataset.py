"""Adding a dataset takes one ``Source`` subclass and nothing else: no registry, no edit to any other file.

``InteractionList`` below reads a tab-separated ``user<TAB>item<TAB>time`` file. Given to
``NextItemDataModule`` it is preprocessed, cached, split and batched like the shipped sources. From a
config it is named by its class path, ``tests.datamodules.test_adding_a_dataset.InteractionList``, with
``init_args: {path: ...}``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from seqrec.data.download import sha256_of
from seqrec.data.interactions import Interactions, Source
from seqrec.data.text import parse_int_columns, read_maybe_gzip
from seqrec.datamodules.next_item import NextItemDataModule
from seqrec.fit import main


class InteractionList(Source):
    """Interactions from a ``user<TAB>item<TAB>time`` file (integer ids, one event per line, optionally gzipped)."""

    name = "interaction-list"

    def __init__(self, path: str) -> None:
        self.path = Path(path).expanduser()

    def prepare(self) -> None:
        """Nothing to download: the file must exist."""
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.name}: expected a user<TAB>item<TAB>time file at {self.path}, found nothing")

    def load(self) -> Interactions:
        """Parse the three integer columns."""
        self.prepare()
        users, items, times = parse_int_columns(
            read_maybe_gzip(self.path), 3, sep=b"\t", where=str(self.path), names=("user", "item", "time")
        )
        return Interactions(users=users, items=items, times=times)

    def fingerprint(self) -> str:
        """The name and the file's sha256 (the sequence cache is rebuilt when the file changes)."""
        self.prepare()
        return f"{self.name}:{sha256_of(self.path)}"


def write_interactions(path: Path, users: int = 12, items: int = 30, length: int = 9) -> list[list[int]]:
    """Each user walks a ring of raw item ids 101, 102, ... from its own start; returns the raw sequences."""
    sequences, lines = [], []
    for user in range(users):
        sequence = [101 + (user * 7 + step) % items for step in range(length)]
        sequences.append(sequence)
        lines += [f"{1000 + user}\t{item}\t{1_600_000_000 + 60 * step}" for step, item in enumerate(sequence)]
    path.write_text("\n".join(lines) + "\n")
    return sequences


def test_a_new_source_flows_through_the_next_item_datamodule_to_batches(tmp_path, isolated_cache):
    raw = write_interactions(tmp_path / "events.tsv")
    data = NextItemDataModule(InteractionList(str(tmp_path / "events.tsv")), max_len=5, batch_size=4, eval_batch_size=8)
    data.prepare_data()
    data.setup("fit")
    assert data.num_items == 30 and data.sequences.num_users == 12
    assert len(list((isolated_cache / "sequences").glob("interaction-list-*"))) == 1  # cached like any source

    batch = next(iter(data.train_dataloader()))
    assert set(batch) == {"items", "labels"}
    assert batch["items"].shape == (4, 5) and batch["labels"].shape == (4, 5) and batch["items"].dtype == torch.int64
    assert int(batch["items"].max()) <= data.num_items

    # leave-last-out: the test target is each user's last raw item, its input the events before it
    item_ids = data.sequences.item_ids
    test = next(iter(data.test_dataloader()))
    assert test["items"].shape == (8, 5) and test["target"].shape == (8,)
    for row, index in enumerate(test["index"].tolist()):
        user = int(data.split.test.user[index])
        sequence = raw[int(data.sequences.user_ids[user]) - 1000]
        assert item_ids[int(test["target"][row])] == str(sequence[-1])
        assert [item_ids[i] for i in test["items"][row].tolist()] == [str(i) for i in sequence[-6:-1]]


def test_a_new_source_gets_frozen_sampled_candidates_and_clear_errors(tmp_path):
    write_interactions(tmp_path / "events.tsv")
    data = NextItemDataModule(InteractionList(str(tmp_path / "events.tsv")), max_len=5, eval_negatives=10)
    data.setup("fit")
    batch = next(iter(data.val_dataloader()))
    assert batch["candidates"].shape == (12, 10)
    for row, index in enumerate(batch["index"].tolist()):
        user = int(data.split.valid.user[index])
        assert not set(batch["candidates"][row].tolist()) & set(data.sequences.sequence(user).tolist())
    again = NextItemDataModule(InteractionList(str(tmp_path / "events.tsv")), max_len=5, eval_negatives=10)
    again.setup("fit")
    assert np.array_equal(again.datasets["valid"].negatives, data.datasets["valid"].negatives)
    with pytest.raises(FileNotFoundError, match="expected a user<TAB>item<TAB>time file"):
        NextItemDataModule(InteractionList(str(tmp_path / "missing.tsv"))).prepare_data()


def test_the_new_source_trains_through_the_cli_with_one_config(tmp_path):
    """One config names the new source under a shipped protocol and model; nothing else is edited."""
    data = tmp_path / "events.tsv"
    write_interactions(data, users=20, items=25, length=12)
    experiment = tmp_path / "sasrec_events.yaml"
    experiment.write_text(
        "compose: [protocol/ml100k_full_ranking.yaml, model/sasrec.yaml]\n"
        "data:\n  init_args:\n    source:\n"
        "      class_path: tests.datamodules.test_adding_a_dataset.InteractionList\n"
        f"      init_args:\n        path: {data}\n"
    )
    results = main([
        "--config", str(experiment), "--data.max_len", "8", "--model.net.d_model", "16",
        "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--threads", "1",
    ])
    assert 0 < results["test/hr@10"] <= 1
