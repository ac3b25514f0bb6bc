"""XLong's two corpora: each line one user with its target appended; errors say where to get the files."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from seqrec.data.sources.xlong import XLong

pytestmark = pytest.mark.usefixtures("online")


# --- XLong ---------------------------------------------------------------------------------------------


def write_xlong(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train_corpus_total_dual.txt").write_text(
        "0\t17\t5,6,7\t8\t9,10\n"
        "1\t18\t5,11\t6\t12\n"
    )
    (directory / "test_corpus_total_dual.txt.gz").write_bytes(gzip.compress(b"2\t17\t7,8,9\t10\t11\n"))
    return directory


def test_xlong_rows_are_users_with_target_appended(tmp_path: Path) -> None:
    source = XLong(root=str(write_xlong(tmp_path / "xl")))
    inter = source.load()
    np.testing.assert_array_equal(inter.users, [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    np.testing.assert_array_equal(inter.items, [5, 6, 7, 8, 5, 11, 6, 7, 8, 9, 10])
    np.testing.assert_array_equal(inter.times, [0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3])
    assert source.fingerprint().startswith("xlong:rows-as-users:train_corpus_total_dual.txt=")


def test_xlong_missing_files_say_where_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        XLong(cache_dir=str(tmp_path)).prepare()
    message = str(info.value)
    assert "train_corpus_total_dual.txt" in message and "test_corpus_total_dual.txt" in message
    assert str(tmp_path / "raw" / "xlong") in message and "HPMN" in message and "root=" in message


def test_xlong_malformed_lines(tmp_path: Path) -> None:
    root = write_xlong(tmp_path / "xl")
    train = root / "train_corpus_total_dual.txt"
    train.write_text("0\t17\t5,6,7\t8\t9\n1\t18\t5,x,7\t8\t9\n")
    with pytest.raises(ValueError, match=r"line 2: the history \(field 3\) must be comma-separated integer item ids, found 'x'"):
        XLong(root=str(root)).load()
    train.write_text("0\t17\t5,6,7\n")
    with pytest.raises(ValueError, match="line 1: expected at least 4 tab-separated fields"):
        XLong(root=str(root)).load()
