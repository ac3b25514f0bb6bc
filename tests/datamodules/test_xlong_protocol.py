"""XLong's protocol through the shipped config: LRURec's preprocessing, generated 10,000-style candidates (here
60), no history masking, the published counts checked; on small corpora in XLong's real two-file format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from seqrec.build import build_datamodule, parse
from seqrec.data.negatives import GeneratedNegatives
from seqrec.data.sources.xlong import XLong
from seqrec.datamodules.next_item import ExpectedCounts, NextItemDataModule
from seqrec.models.next_item.lru import LRURec
from seqrec.tasks.next_item import NextItemTask


def write_corpora(root: Path, users: int = 24, items: int = 40, length: int = 30, seed: int = 0) -> Path:
    """``<index>\\t<user>\\t<history, comma-separated>\\t<target>\\t<negatives>`` lines, split over the two files."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for row in range(users):
        seq = 1000 + (3 * row + 7 * np.arange(length + 1)) % items  # no consecutive repeat by construction
        seq[5] = seq[4]  # a consecutive repeat, dropped by the preprocessing
        history, target = ",".join(map(str, seq[:-1])), seq[-1]
        lines.append(f"{row}\t{row % 7}\t{history}\t{target}\t{int(rng.integers(1000, 1100))}")
    (root / "train_corpus_total_dual.txt").write_text("\n".join(lines[: users // 2]) + "\n")
    (root / "test_corpus_total_dual.txt").write_text("\n".join(lines[users // 2 :]) + "\n")
    return root


def xlong_args(root: Path, *extra: str) -> list[str]:
    return ["--config", "lru_xlong", "--data.init_args.source.init_args.root", str(root),
            "--data.init_args.max_len", "8", "--data.init_args.eval_negatives", "60",
            "--data.init_args.expected_counts", "null", *extra]


def test_shipped_config_builds_generated_candidates_that_are_equal_across_builds(tmp_path: Path, isolated_cache: Path) -> None:
    root = write_corpora(tmp_path / "xlong")
    a, b = build_datamodule(xlong_args(root)), build_datamodule(xlong_args(root))
    for data in (a, b):
        data.prepare_data()
        data.setup("fit")
    assert a.sequences.num_users == 24  # every line one user (LRURec's construction)
    assert a.sequences.num_interactions == 24 * 30  # 31 events per line, one consecutive repeat dropped
    for name, seed in (("valid", 42), ("test", 43)):
        negatives = a.datasets[name].negatives
        assert isinstance(negatives, GeneratedNegatives) and negatives.shape == (24, 60) and negatives.seed == seed
        for index in (0, 7, 23):
            assert np.array_equal(negatives[index], b.datasets[name].negatives[index])
    assert not any(p.name.startswith("negatives-") for p in isolated_cache.rglob("*"))  # nothing stored
    batch = next(iter(a.val_dataloader()))
    assert batch["candidates"].shape == (24, 60) and batch["items"].shape == (24, 8)
    for row, index in enumerate(batch["index"].tolist()):
        assert torch.equal(batch["candidates"][row], torch.from_numpy(a.datasets["valid"].negatives[index]))


def test_config_evaluates_without_history_masking_and_the_options_for_full_ranking() -> None:
    config = parse(["--config", "lru_xlong"])
    assert config.model.init_args.mask_history is False
    assert config.data.init_args.negatives_storage == "generated" and config.data.init_args.eval_negatives == 10000
    assert (config.data.init_args.max_len, config.data.init_args.batch_size) == (1000, 32)
    assert config.trainer.val_check_interval == 2000
    full = parse(["--config", "lru_xlong", "--data.init_args.eval_negatives", "null"])
    assert full.data.init_args.eval_negatives is None


def test_candidate_ranks_count_history_items_and_ties_favour_the_target(tmp_path: Path) -> None:
    root = write_corpora(tmp_path / "xlong")
    data = build_datamodule(xlong_args(root))
    data.prepare_data()
    data.setup("fit")
    torch.manual_seed(0)
    task = NextItemTask(LRURec(num_items=data.num_items, d_model=8, num_layers=1), mask_history=False).eval()
    batch = next(iter(data.test_dataloader()))
    batch["candidates"][0, :3] = batch["items"][0, -3:]  # history items among the candidates stay candidates
    batch["candidates"][1, 0] = batch["target"][1]  # a drawn target ties: it never moves the rank
    with torch.no_grad():
        ranks = task.ranks(batch)
        hidden = task.net.last_hidden(batch["items"])
        scores = task.net.score(hidden, batch["candidates"])
        target = task.net.score(hidden, batch["target"].unsqueeze(-1))
    np.testing.assert_array_equal(ranks.numpy(), 1 + (scores > target).sum(-1).numpy())


def test_counts_that_differ_from_the_published_ones_stop_the_run(tmp_path: Path) -> None:
    root = write_corpora(tmp_path / "xlong")
    data = NextItemDataModule(source=XLong(root=str(root)), max_len=8, expected_counts=ExpectedCounts(
        users=24, items=41, interactions=700, interactions_tolerance=10, source="the fixture's table"))
    with pytest.raises(ValueError, match=r"items 40 \(published 41\), interactions 744 \(published 700 ± 10\) per "
                                         r"the fixture's table.*expected_counts null"):
        data.setup("fit")
    ok = NextItemDataModule(source=XLong(root=str(root)), max_len=8, expected_counts=ExpectedCounts(
        users=24, items=40, interactions=700, interactions_tolerance=44))  # 24 lines × 31 events, no dedupe here
    ok.setup("fit")


def test_generated_storage_needs_the_uniform_sampler(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="negatives_storage 'generated' draws uniformly"):
        NextItemDataModule(source=XLong(root=str(tmp_path)), eval_negatives=5, negative_sampler="popularity",
                           negatives_storage="generated")
