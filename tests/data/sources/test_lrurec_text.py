"""LRURec's published Video / Sports / Steam files: download, sha256 or git blob id, mirror fallback, counts."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from seqrec.data.download import DownloadError
from seqrec.data.sources import lrurec_text
from seqrec.data.sources.lrurec_text import GIT_BLOBS, LRUREC_DATASETS, MIRRORS, LRURecText, git_blob_sha1
from seqrec.data.sources.sasrec_text import KnownText
from tests.data.sources.conftest import closed_port_url, sha256_hex

pytestmark = pytest.mark.usefixtures("online")

# LRURec's format: "user item" per line, grouped by user in time order; user 3 repeats an item consecutively.
PAIRS = "1 10\n1 11\n1 12\n2 12\n2 10\n2 13\n3 11\n3 11\n3 14\n"
COUNTS = (3, 5, 9)


def serve(tmp_path: Path, text: str = PAIRS, name: str = "served.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def blob_of(text: str) -> str:
    import hashlib

    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_git_blob_id_is_gits_and_reads_through_gzip(tmp_path: Path) -> None:
    plain = serve(tmp_path, "hello\n")
    assert git_blob_sha1(plain) == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object` of "hello\n"
    packed = tmp_path / "hello.gz"
    packed.write_bytes(gzip.compress(b"hello\n"))
    assert git_blob_sha1(packed) == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_registry_holds_lrurecs_three_files() -> None:
    assert sorted(LRUREC_DATASETS) == ["sports", "steam", "video"]
    video = LRUREC_DATASETS["video"]
    assert video.url.endswith("yueqirex/LRURec/master/data/video/Video.txt")
    assert video.sha256 == "b7376fe24430743f411dc7f567285657b2adb3f74361cc7ba0aee94f3024b651"
    assert video.counts == (31_013, 23_715, 287_107)
    assert LRUREC_DATASETS["sports"].url.endswith("data/sports/Sports_and_Outdoors.txt")
    assert LRUREC_DATASETS["sports"].sha256 is None and LRUREC_DATASETS["steam"].sha256 is None  # none invented
    assert LRUREC_DATASETS["sports"].counts[:2] == (83_970, 83_728)
    assert LRUREC_DATASETS["steam"].counts[:2] == (334_730, 13_047)
    assert set(GIT_BLOBS) == {"video", "sports", "steam"} and all(len(b) == 40 for b in GIT_BLOBS.values())
    assert set(MIRRORS) == {"video", "steam"} and all("kang205/SASRec" in url for url in MIRRORS.values())


def test_download_pinned_by_sha256_parses_and_checks_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    served = serve(tmp_path)
    monkeypatch.setitem(LRUREC_DATASETS, "video", KnownText("Video.txt", served.as_uri(), sha256_hex(PAIRS.encode()), COUNTS))
    source = LRURecText("video", cache_dir=str(tmp_path / "cache"))
    inter = source.load()
    np.testing.assert_array_equal(inter.users, [1, 1, 1, 2, 2, 2, 3, 3, 3])
    np.testing.assert_array_equal(inter.times, [0, 1, 2, 0, 1, 2, 0, 1, 2])
    assert (tmp_path / "cache" / "raw" / "lrurec" / "Video.txt").read_text() == PAIRS
    assert source.fingerprint() == f"LRURecText:video:pairs:{sha256_hex(PAIRS.encode())}"
    monkeypatch.setitem(LRUREC_DATASETS, "video", KnownText("Video.txt", served.as_uri(), "0" * 64, COUNTS))
    with pytest.raises(ValueError, match="Checksum mismatch"):
        LRURecText("video", cache_dir=str(tmp_path / "other")).prepare()


def test_unpinned_download_is_checked_by_git_blob_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    served = serve(tmp_path)
    monkeypatch.setitem(LRUREC_DATASETS, "steam", KnownText("Steam.txt", served.as_uri(), None, (3, 5, None)))
    monkeypatch.setitem(GIT_BLOBS, "steam", blob_of(PAIRS))
    source = LRURecText("steam", cache_dir=str(tmp_path / "cache"))
    assert len(source.load()) == 9
    assert (tmp_path / "cache" / "raw" / "lrurec" / "Steam.txt.sha256").is_file()  # recorded on first download
    monkeypatch.setitem(GIT_BLOBS, "steam", blob_of(PAIRS + "4 10\n"))
    with pytest.raises(ValueError, match=r"git blob id .* but LRURec published .*another version"):
        LRURecText("steam", cache_dir=str(tmp_path / "cache")).prepare()


def test_counts_that_differ_from_the_paper_are_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    served = serve(tmp_path)
    monkeypatch.setitem(LRUREC_DATASETS, "sports", KnownText("Sports_and_Outdoors.txt", served.as_uri(), None, (3, 6, None)))
    monkeypatch.setitem(GIT_BLOBS, "sports", blob_of(PAIRS))
    with pytest.raises(ValueError, match=r"items 5 \(published 6\) per LRURec's Table 2"):
        LRURecText("sports", cache_dir=str(tmp_path / "cache")).load()
    own = LRURecText("sports", path=str(served), cache_dir=str(tmp_path / "cache"))  # a local copy: read as is
    assert len(own.load()) == 9


def test_mirror_is_tried_when_lrurecs_url_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    served = serve(tmp_path)
    monkeypatch.setitem(LRUREC_DATASETS, "video", KnownText("Video.txt", closed_port_url("/Video.txt"), None, COUNTS))
    monkeypatch.setitem(MIRRORS, "video", served.as_uri())
    monkeypatch.setitem(GIT_BLOBS, "video", blob_of(PAIRS))
    source = LRURecText("video", cache_dir=str(tmp_path / "cache"))
    assert len(source.load()) == 9
    assert (tmp_path / "cache" / "raw" / "lrurec" / "Video.txt").read_text() == PAIRS
    monkeypatch.setitem(MIRRORS, "video", closed_port_url("/mirror/Video.txt"))
    with pytest.raises(DownloadError, match=r"Video\.txt.*place it at.*The copy at .*mirror/Video\.txt failed too"):
        LRURecText("video", cache_dir=str(tmp_path / "empty")).prepare()


def test_sports_has_no_mirror_and_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LRUREC_DATASETS, "sports", KnownText("Sports_and_Outdoors.txt", closed_port_url("/S.txt"), None, None))
    with pytest.raises(DownloadError, match=r"Sports_and_Outdoors\.txt.*path="):
        LRURecText("sports", cache_dir=str(tmp_path)).prepare()
    with pytest.raises(ValueError, match=r"known names are \['sports', 'steam', 'video'\]"):
        LRURecText("beauty")


def test_offline_cache_copy_is_used_without_the_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = tmp_path / "cache" / "raw" / "lrurec"
    raw.mkdir(parents=True)
    (raw / "Video.txt").write_text(PAIRS)
    monkeypatch.setenv("SEQREC_OFFLINE", "1")
    monkeypatch.setitem(LRUREC_DATASETS, "video", KnownText("Video.txt", closed_port_url("/V.txt"), sha256_hex(PAIRS.encode()), COUNTS))
    assert len(LRURecText("video", cache_dir=str(tmp_path / "cache")).load()) == 9
    assert lrurec_text.LRURecText.cache_subdir == "lrurec"


@pytest.mark.parametrize("name", ["video", "sports", "steam"])
def test_shared_copy_is_the_published_file(shared_data: Path, tmp_path: Path, name: str) -> None:
    """A copy under $SEQREC_SHARED_DATA/lrurec/<name>.txt.gz (what `repro --shared_data` reads) is LRURec's file."""
    path = shared_data / "lrurec" / f"{name}.txt.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present under SEQREC_SHARED_DATA")
    assert git_blob_sha1(path) == GIT_BLOBS[name]
    inter = LRURecText(name, path=str(path), cache_dir=str(tmp_path)).load()
    users, items, interactions = LRUREC_DATASETS[name].counts
    assert (len(np.unique(inter.users)), len(np.unique(inter.items))) == (users, items)
    if interactions is not None:
        assert len(inter) == interactions
