"""SASRec- and S3Rec-format text files: both layouts, gzip by content, errors naming the line, downloads.

Tests that read the project's shared data take its location from ``SEQREC_SHARED_DATA`` and skip when
it is unset.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from seqrec.data.download import DownloadError
from seqrec.data.sources.sasrec_text import (
    SASREC_DATASETS,
    KnownText,
    S3RecText,
    SASRecText,
)
from tests.data.sources.conftest import closed_port_url, sha256_hex

pytestmark = pytest.mark.usefixtures("online")


# --- SASRec / S3Rec text -----------------------------------------------------------------------------

SASREC_TEXT = "1 10\n1 11\n1 10\n2 12\n2 10\n3 13\n"


def test_sasrec_text_plain_and_gzipped(tmp_path: Path) -> None:
    plain = tmp_path / "mine.txt"
    plain.write_text(SASREC_TEXT)
    gz = tmp_path / "mine.data"  # gzip is detected by content, not by the name
    gz.write_bytes(gzip.compress(SASREC_TEXT.encode()))
    for path in (plain, gz):
        inter = SASRecText("mine", path=str(path), cache_dir=str(tmp_path / "c")).load()
        np.testing.assert_array_equal(inter.users, [1, 1, 1, 2, 2, 3])
        np.testing.assert_array_equal(inter.items, [10, 11, 10, 12, 10, 13])
        np.testing.assert_array_equal(inter.times, [0, 1, 2, 0, 1, 0])
        assert inter.ratings is None


def test_sasrec_text_malformed_and_non_integer(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("1 10\n1 11\n1\n")
    with pytest.raises(ValueError, match=r"bad\.txt, line 3: expected 2 fields separated by whitespace, found 1"):
        SASRecText("x", path=str(bad)).load()
    bad.write_text("1 10\n2 1.5\n")
    with pytest.raises(ValueError, match=r"line 2: field 2 \(item\) is '1\.5', expected an integer"):
        SASRecText("x", path=str(bad)).load()


def test_sasrec_text_missing_path_and_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="expected a 'pairs'-layout text file"):
        SASRecText("x", path=str(tmp_path / "nope.txt")).prepare()
    with pytest.raises(ValueError, match=r"known names are \['beauty', 'ml-1m', 'sports', 'steam', 'video'\]"):
        SASRecText("nonesuch")
    with pytest.raises(FileNotFoundError, match="no public download location"):
        SASRecText("sports", cache_dir=str(tmp_path)).prepare()


def test_sasrec_text_known_name_downloads_and_records_sha(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    served = tmp_path / "served_Beauty.txt"
    served.write_text(SASREC_TEXT)
    monkeypatch.setitem(SASREC_DATASETS, "beauty", KnownText("Beauty.txt", served.as_uri(), None, (3, 4, 6)))
    source = SASRecText("beauty", cache_dir=str(tmp_path / "cache"))
    inter = source.load()
    assert len(inter) == 6
    cached = tmp_path / "cache" / "raw" / "sasrec" / "Beauty.txt"
    assert cached.read_text() == SASREC_TEXT
    sha = sha256_hex(SASREC_TEXT.encode())
    assert (tmp_path / "cache" / "raw" / "sasrec" / "Beauty.txt.sha256").read_text().split()[0] == sha
    assert source.fingerprint() == f"SASRecText:beauty:pairs:{sha}"
    served.unlink()  # cached now
    assert SASRecText("beauty", cache_dir=str(tmp_path / "cache")).fingerprint() == source.fingerprint()


def test_sasrec_text_unreachable_known_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = closed_port_url("/Video.txt")
    monkeypatch.setitem(SASREC_DATASETS, "video", KnownText("Video.txt", url, None, None))
    with pytest.raises(DownloadError, match=r"Video\.txt.*place it at.*path="):
        SASRecText("video", cache_dir=str(tmp_path)).prepare()


def test_fingerprint_differs_by_name_and_content(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text(SASREC_TEXT)
    a = SASRecText("a", path=str(path)).fingerprint()
    assert SASRecText("b", path=str(path)).fingerprint() != a
    path.write_text(SASREC_TEXT + "4 10\n")
    assert SASRecText("a", path=str(path)).fingerprint() != a


def test_s3rec_lines(tmp_path: Path) -> None:
    path = tmp_path / "Beauty.txt"
    path.write_text("1 1 2 3 4 5\n2 6 7\n3 4 12 13 14\n")
    inter = S3RecText("beauty", path=str(path)).load()
    np.testing.assert_array_equal(inter.users, [1, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3])
    np.testing.assert_array_equal(inter.items, [1, 2, 3, 4, 5, 6, 7, 4, 12, 13, 14])
    np.testing.assert_array_equal(inter.times, [0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3])
    path.write_text("1 1 2\n2\n")
    with pytest.raises(ValueError, match="line 2: expected at least 2 field"):
        S3RecText("beauty", path=str(path)).load()


# --- shared real data (SEQREC_SHARED_DATA) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "counts"),
    [("lrurec/ml-1m.txt.gz", (6_040, 3_416, 999_611)), ("lrurec/beauty.txt.gz", (52_204, 57_289, 394_908))],
)
def test_shared_lrurec_counts(shared_data: Path, tmp_path: Path, relative: str, counts: tuple[int, int, int]) -> None:
    path = shared_data / relative
    if not path.is_file():
        pytest.skip(f"{path} not present under SEQREC_SHARED_DATA")
    inter = SASRecText(relative, path=str(path), cache_dir=str(tmp_path)).load()
    assert (len(np.unique(inter.users)), len(np.unique(inter.items)), len(inter)) == counts
    assert np.all(np.diff(inter.users) >= 0)  # grouped by user in file order
    first = inter.users == inter.users[0]
    np.testing.assert_array_equal(inter.times[first], np.arange(first.sum()))


def test_shared_s3rec_beauty_counts(shared_data: Path, tmp_path: Path) -> None:
    path = shared_data / "s3rec" / "Beauty.txt.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present under SEQREC_SHARED_DATA")
    inter = S3RecText("beauty", path=str(path), cache_dir=str(tmp_path)).load()
    assert (len(np.unique(inter.users)), len(np.unique(inter.items)), len(inter)) == (22_363, 12_101, 198_502)
