"""``benchmarks/split_difficulty.py``: validation vs test target statistics, checked on a file worked by hand."""

from __future__ import annotations

import gzip

import pytest

from benchmarks.split_difficulty import difficulty, main, read_sequences


def test_the_statistics_of_a_hand_worked_file(tmp_path):
    # users a, b, c have queries; d has 2 events (training only). Training counts: x 4 (a 2, b 1, d 1), y 2, z 1, q 0.
    lines = ["a x", "a x", "a y", "a z", "b x", "b y", "b x", "b y", "c z", "c q", "c x", "d x", "d y"]
    path = tmp_path / "toy.txt.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    rows = difficulty(read_sequences(path), "toy", max_len=1, cold=2, k=1)
    val, test = rows
    # validation targets: a y (2), b x (4, in its history x y), c q (0); test: a z (1), b y (2, in x y x), c x (4)
    assert (val.queries, val.median_count, val.cold, val.in_history) == (3, 2.0, pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert (test.median_count, test.cold, test.in_history) == (2.0, pytest.approx(1 / 3), pytest.approx(1 / 3))
    # the popularity ranker's top 1 outside the window (the newest item), ranking x, y:
    # val: a window {x} -> y == y hit; b window {y} -> x == x hit; c window {z} -> x != q miss  => 2/3
    # test: a window {y} -> x != z; b window {x} -> y == y hit; c window {q} -> x == x hit      => 2/3
    assert val.popularity_recall10 == pytest.approx(2 / 3) and test.popularity_recall10 == pytest.approx(2 / 3)
    out = tmp_path / "report.md"
    text = main([str(path), "--max_len", "1", "--out", str(out)])
    assert out.read_text() == text and "| toy | test | 3 |" in text


def test_a_malformed_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("a x\nlonely\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: expected 'user item'"):
        read_sequences(path)
