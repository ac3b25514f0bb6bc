"""The XLong-shaped benchmark: its corpus is XLong's real format at a scale, and a tiny run writes the section."""

import numpy as np
import pytest

from benchmarks import xlong
from seqrec.data.sources.xlong import XLong


def test_corpus_has_xloongs_format_shape_and_a_catalogue_that_survives_the_5_core(tmp_path):
    info = xlong.write_corpus(tmp_path / "raw", scale=0.001, seed=1)
    assert (info["users"], info["items"]) == xlong.corpus_sizes(0.001) == (70, 2123)
    lines = (tmp_path / "raw" / "train_corpus_total_dual.txt").read_text().splitlines()
    assert len(lines) == 35 and all(len(line.split("\t")) == 5 for line in lines)
    inter = XLong(root=str(tmp_path / "raw")).load()
    assert len(inter) == info["events"] and len(np.unique(inter.users)) == 70
    counts = np.unique(inter.items, return_counts=True)[1]
    assert len(counts) == 2123 and counts.min() >= 5  # every item at least 5 times: the 5-core keeps them all
    assert counts.max() > 20 * np.median(counts)  # popularity-skewed
    lengths = np.bincount(inter.users)
    assert 700 < lengths.mean() < 1300 and lengths.min() >= 20  # histories about 1,000 long
    with pytest.raises(ValueError, match="scale"):
        xlong.corpus_sizes(0)


def test_estimate_counts_60000_steps_and_32_passes():
    assert xlong.estimate_hours(1.0, 69_691.0) == pytest.approx((60_000 + 32) / 3600)


@pytest.mark.slow  # a benchmark smoke run (forked phases)
def test_tiny_run_writes_the_section(tmp_path):
    out = tmp_path / "BENCHMARKS.md"
    xlong.main(["--scale", "0.0005", "--configs", "lru_xlong", "--max_len", "20", "--steps", "1", "--warmup", "0",
                "--eval_batches", "1", "--eval_negatives", "60", "--catalogue_users", "8", "--catalogue_items", "3000",
                "--catalogue_chunks", "1000,4000", "--repeats", "1", "--threads", "1", "--out", str(out)])
    text = out.read_text()
    assert "## XLong-shaped synthetic corpus" in text and "load average" in text
    assert "| lru_xlong |" in text and "after LRURec's preprocessing 35 users" in text
    assert "`np.load(mmap_mode=\"r\")`" in text and "| bfloat16 | 4,000 |" in text
