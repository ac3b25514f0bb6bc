"""MovieLens-100k and -1M on small fixtures written here in the real raw formats: layouts, downloads, fallbacks."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from seqrec.data.download import DownloadError
from seqrec.data.sources import movielens
from seqrec.data.sources.movielens import MovieLens1M, MovieLens100K
from tests.data.sources.conftest import closed_port_url, sha256_hex

pytestmark = pytest.mark.usefixtures("online")


# --- fixtures in the real formats --------------------------------------------------------------------

# (user, item, rating, timestamp); users 1-3, items 1-4
EVENTS = [
    (196, 242, 3, 881250949),
    (186, 302, 3, 891717742),
    (22, 377, 1, 878887116),
    (196, 377, 5, 881250950),
    (22, 242, 4, 878887100),
    (186, 51, 2, 880606923),
]

GENRES = movielens.ML100K_GENRES


CHILDRENS = "Children's"


def _flags(*names: str) -> str:
    return "|".join("1" if g in names else "0" for g in GENRES)


U_ITEM = (
    f"242|Kolya (1996)|24-Jan-1997||http://us.imdb.com/M/title-exact?Kolya%20(1996)|{_flags('Comedy')}\n"
    f"302|L.A. Confidential (1997)|01-Jan-1997||http://us.imdb.com/x|{_flags('Crime', 'Film-Noir', 'Mystery', 'Thriller')}\n"
    f"377|Misérables, Les (1995)|01-Jan-1995||http://us.imdb.com/x|{_flags('Drama', 'Musical')}\n"
    f"51|Legends of the Fall (1994)|01-Jan-1994||http://us.imdb.com/x|{_flags('Drama', 'Romance', 'War', 'Western')}\n"
    f"267|unknown||||{_flags('unknown')}\n"
    f"1412|Land Before Time III: The Time of the Great Giving (1995) (V)|01-Jan-1995||http://us.imdb.com/x|"
    f"{_flags('Animation', CHILDRENS)}\n"
)

RECBOLE_ITEM = (
    "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
    "242\tKolya\t1996\tComedy\n"
    "302\tL.A. Confidential\t1997\tCrime Film-Noir Mystery Thriller\n"
    "377\tMisérables, Les\t1995\tDrama Musical\n"
    "51\tLegends of the Fall\t1994\tDrama Romance War Western\n"
    "267\tunkonwn\tunkonwn\tunknown\n"
    "1412\tLand Before Time III: The Time of the Great Giving (1995)\tV\tAnimation Children's\n"  # RecBole's "V"
)


def write_grouplens_100k(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "u.data").write_text("".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in EVENTS))
    (directory / "u.item").write_bytes(U_ITEM.encode("latin-1"))
    return directory


def write_recbole_100k(directory: Path) -> dict[str, bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "ml-100k.inter": (
            "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
            + "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in EVENTS)
        ).encode(),
        "ml-100k.item": RECBOLE_ITEM.encode("utf-8"),
        "ml-100k.user": b"user_id:token\tage:token\n196\t49\n186\t39\n22\t25\n",
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return files


def write_ml1m(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ratings.dat").write_text("".join(f"{u}::{i}::{r}::{t}\n" for u, i, r, t in EVENTS))
    (directory / "movies.dat").write_bytes(
        "242::Kolya (1996)::Comedy\n"
        "302::L.A. Confidential (1997)::Crime|Film-Noir|Mystery|Thriller\n"
        "377::Misérables, Les (1995)::Drama|Musical\n"
        "51::Legends of the Fall (1994)::Drama|Romance|War|Western\n".encode("latin-1")
    )
    return directory


def check_events(inter, with_times: bool = True) -> None:
    assert len(inter) == len(EVENTS)
    users, items, ratings, times = (np.array(col) for col in zip(*EVENTS))
    np.testing.assert_array_equal(inter.users, users)
    np.testing.assert_array_equal(inter.items, items)
    np.testing.assert_array_equal(inter.ratings, ratings.astype(np.float32))
    assert inter.users.dtype == np.int64 and inter.items.dtype == np.int64 and inter.ratings.dtype == np.float32
    if with_times:
        np.testing.assert_array_equal(inter.times, times)


# --- MovieLens-100k ----------------------------------------------------------------------------------


def test_ml100k_grouplens_layout(tmp_path: Path) -> None:
    source = MovieLens100K(root=str(write_grouplens_100k(tmp_path / "ml")), cache_dir=str(tmp_path / "cache"))
    inter = source.load()
    check_events(inter)
    features = inter.item_features
    assert features["title"][242] == "Kolya" and features["title"][377] == "Misérables, Les"
    assert features["year"][302] == 1997 and 267 not in features["year"]
    assert features["genres"][302] == ["Crime", "Film-Noir", "Mystery", "Thriller"]
    assert features["genres"][267] == ["unknown"]
    # "(1995) (V)": the format marker goes with the year, as in RecBole's layout (compared below).
    assert (features["title"][1412], features["year"][1412]) == ("Land Before Time III: The Time of the Great Giving", 1995)
    assert source.layout == "grouplens-100k" and "root" in source.provenance


def test_ml100k_recbole_layout_gives_the_same_events(tmp_path: Path) -> None:
    write_recbole_100k(tmp_path / "rb")
    write_grouplens_100k(tmp_path / "gl")
    recbole = MovieLens100K(root=str(tmp_path / "rb"), cache_dir=str(tmp_path / "c")).load()
    grouplens = MovieLens100K(root=str(tmp_path / "gl"), cache_dir=str(tmp_path / "c")).load()
    check_events(recbole)
    for column in ("users", "items", "times", "ratings"):
        np.testing.assert_array_equal(getattr(recbole, column), getattr(grouplens, column))
    assert recbole.times.dtype == np.int64  # "timestamp:float" holding integers stays integral
    for name in ("title", "year", "genres"):
        assert recbole.item_features[name] == grouplens.item_features[name], name


def test_ml100k_root_may_hold_the_unzipped_folder(tmp_path: Path) -> None:
    write_grouplens_100k(tmp_path / "ml-100k")
    check_events(MovieLens100K(root=str(tmp_path), cache_dir=str(tmp_path / "c")).load())


def test_ml100k_missing_item_file(tmp_path: Path) -> None:
    root = write_grouplens_100k(tmp_path / "ml")
    (root / "u.item").unlink()
    with pytest.raises(FileNotFoundError, match=r"u\.item"):
        MovieLens100K(root=str(root), cache_dir=str(tmp_path / "c")).prepare()


def test_ml100k_empty_root(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"u\.data \+ u\.item or ml-100k\.inter \+ ml-100k\.item"):
        MovieLens100K(root=str(tmp_path / "empty"), cache_dir=str(tmp_path / "c")).prepare()


def test_ml100k_malformed_line_names_line_number(tmp_path: Path) -> None:
    root = write_grouplens_100k(tmp_path / "ml")
    lines = (root / "u.data").read_text().splitlines()
    lines[2] = "22\t377\t1"  # a field missing on line 3
    (root / "u.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"u\.data, line 3: expected 4 fields"):
        MovieLens100K(root=str(root), cache_dir=str(tmp_path / "c")).load()


def test_ml100k_non_integer_id_names_line_and_value(tmp_path: Path) -> None:
    root = write_grouplens_100k(tmp_path / "ml")
    lines = (root / "u.data").read_text().splitlines()
    lines[1] = "186\tabc\t3\t891717742"
    (root / "u.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 2: field 2 \(item\) is 'abc', expected an integer"):
        MovieLens100K(root=str(root), cache_dir=str(tmp_path / "c")).load()


def test_ml100k_bad_recbole_header(tmp_path: Path) -> None:
    write_recbole_100k(tmp_path / "rb")
    inter = tmp_path / "rb" / "ml-100k.inter"
    inter.write_text("196\t242\t3\t881250949\n")
    with pytest.raises(ValueError, match="line 1: expected a RecBole header"):
        MovieLens100K(root=str(tmp_path / "rb"), cache_dir=str(tmp_path / "c")).load()


def test_ml100k_fingerprint_tracks_content(tmp_path: Path) -> None:
    root = write_grouplens_100k(tmp_path / "ml")
    first = MovieLens100K(root=str(root), cache_dir=str(tmp_path / "c")).fingerprint()
    data_sha = sha256_hex((root / "u.data").read_bytes())
    assert first.startswith("ml-100k:grouplens-100k:") and data_sha in first
    with open(root / "u.data", "a") as f:
        f.write("1\t2\t3\t4\n")
    assert MovieLens100K(root=str(root), cache_dir=str(tmp_path / "c")).fingerprint() != first


def _grouplens_zip(path: Path, folder: str, files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, data in files.items():
            z.writestr(f"{folder}/{name}", data)
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def test_ml100k_download_from_zip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_grouplens_100k(tmp_path / "src")
    data = _grouplens_zip(tmp_path / "ml-100k.zip", "ml-100k", {n: (src / n).read_bytes() for n in ("u.data", "u.item")})
    monkeypatch.setattr(MovieLens100K, "zip_url", (tmp_path / "ml-100k.zip").as_uri())
    monkeypatch.setattr(MovieLens100K, "zip_md5", hashlib.md5(data).hexdigest())
    monkeypatch.setattr(MovieLens100K, "zip_sha256", sha256_hex(data))
    source = MovieLens100K(cache_dir=str(tmp_path / "cache"))
    check_events(source.load())
    assert source.provenance.startswith("GroupLens") and source.layout == "grouplens-100k"
    assert (tmp_path / "cache" / "raw" / "ml-100k" / "ml-100k.zip").read_bytes() == data
    (tmp_path / "ml-100k.zip").unlink()  # the cached zip suffices from now on
    again = MovieLens100K(cache_dir=str(tmp_path / "cache"))
    assert again.fingerprint() == source.fingerprint()


def test_ml100k_wrong_zip_checksum_does_not_fall_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _grouplens_zip(tmp_path / "ml-100k.zip", "ml-100k", {"u.data": b"1\t2\t3\t4\n"})
    monkeypatch.setattr(MovieLens100K, "zip_url", (tmp_path / "ml-100k.zip").as_uri())

    def no_pip(*args: object, **kwargs: object) -> Path:
        raise AssertionError("the fallback must not hide a checksum mismatch")

    monkeypatch.setattr(movielens, "pip_download", no_pip)
    with pytest.raises(ValueError, match=movielens.ML100K_SHA256):
        MovieLens100K(cache_dir=str(tmp_path / "cache")).prepare()


@pytest.fixture
def fake_recbole_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Offline GroupLens + a ``pip_download`` that returns a wheel built here in the real layout."""
    files = write_recbole_100k(tmp_path / "wheel_src")
    wheel = tmp_path / "recbole-1.2.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("recbole/__init__.py", "")
        for name, data in files.items():
            z.writestr(movielens.RECBOLE_ML100K_DIR + name, data)
    monkeypatch.setattr(movielens, "RECBOLE_ML100K_FILES", {n: sha256_hex(d) for n, d in files.items()})
    monkeypatch.setattr(MovieLens100K, "zip_url", closed_port_url("/datasets/movielens/ml-100k.zip"))
    calls: list[tuple] = []

    def fake_pip_download(requirement: str, dest_dir: Path, *, sha256: str | None = None) -> Path:
        calls.append((requirement, Path(dest_dir), sha256))
        return wheel

    monkeypatch.setattr(movielens, "pip_download", fake_pip_download)
    return {"calls": calls, "wheel": wheel}


def test_ml100k_offline_uses_recbole_wheel_fallback(
    tmp_path: Path, fake_recbole_wheel: dict, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="seqrec")
    source = MovieLens100K(cache_dir=str(tmp_path / "cache"))
    inter = source.load()
    check_events(inter)
    assert inter.item_features["genres"][302] == ["Crime", "Film-Noir", "Mystery", "Thriller"]
    assert fake_recbole_wheel["calls"] == [
        ("recbole==1.2.1", tmp_path / "cache" / "raw" / "ml-100k" / "wheels", movielens.RECBOLE_WHEEL_SHA256)
    ]
    assert source.layout == "recbole-100k" and "recbole==1.2.1 wheel" in source.provenance
    assert "falling back" in caplog.text and "recbole==1.2.1" in caplog.text
    extracted = tmp_path / "cache" / "raw" / "ml-100k" / "recbole-1.2.1"
    assert sorted(p.name for p in extracted.iterdir()) == ["ml-100k.inter", "ml-100k.item", "ml-100k.user"]
    # A second source reuses the verified extracted files: no pip, no network.
    again = MovieLens100K(cache_dir=str(tmp_path / "cache"))
    assert again.fingerprint() == source.fingerprint()
    assert len(fake_recbole_wheel["calls"]) == 1 and "cached copy" in again.provenance


def test_ml100k_offline_without_fallback_names_url_and_fix(tmp_path: Path, fake_recbole_wheel: dict) -> None:
    with pytest.raises(DownloadError) as info:
        MovieLens100K(cache_dir=str(tmp_path / "cache"), allow_fallback=False).prepare()
    message = str(info.value)
    assert MovieLens100K.zip_url in message
    assert "place it at" in message and str(tmp_path / "cache" / "raw" / "ml-100k" / "ml-100k.zip") in message
    assert "root=" in message and "allow_fallback" in message
    assert fake_recbole_wheel["calls"] == []


def test_ml100k_both_sources_failing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MovieLens100K, "zip_url", closed_port_url("/ml-100k.zip"))

    def failing_pip(*args: object, **kwargs: object) -> Path:
        raise DownloadError("pip download of 'recbole==1.2.1' failed (exit 1)")

    monkeypatch.setattr(movielens, "pip_download", failing_pip)
    with pytest.raises(DownloadError, match=r"both sources failed.*GroupLens.*recbole==1\.2\.1.*root="):
        MovieLens100K(cache_dir=str(tmp_path / "cache")).prepare()


@pytest.mark.slow
def test_ml100k_real_fallback_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.environ.get("SEQREC_TEST_NETWORK") != "1":
        pytest.skip("set SEQREC_TEST_NETWORK=1 to run the real ML-100k download (recbole wheel from PyPI)")
    monkeypatch.setattr(MovieLens100K, "zip_url", closed_port_url("/ml-100k.zip"))  # force the fallback
    inter = MovieLens100K(cache_dir=str(tmp_path)).load()
    assert (len(inter), len(np.unique(inter.users)), len(np.unique(inter.items))) == (100_000, 943, 1_682)
    assert inter.item_features["title"][1] == "Toy Story" and inter.item_features["year"][1] == 1995


# --- MovieLens-1M ------------------------------------------------------------------------------------


def test_ml1m_root(tmp_path: Path) -> None:
    source = MovieLens1M(root=str(write_ml1m(tmp_path / "ml-1m-files")), cache_dir=str(tmp_path / "c"))
    inter = source.load()
    check_events(inter)
    assert inter.item_features["title"][377] == "Misérables, Les"
    assert inter.item_features["year"][51] == 1994
    assert inter.item_features["genres"][51] == ["Drama", "Romance", "War", "Western"]
    assert source.fingerprint().startswith("ml-1m:grouplens-1m:")


def test_ml1m_malformed_separator(tmp_path: Path) -> None:
    root = write_ml1m(tmp_path / "ml")
    text = (root / "ratings.dat").read_text().splitlines()
    text[4] = "22::242:4::878887100"
    (root / "ratings.dat").write_text("\n".join(text) + "\n")
    with pytest.raises(ValueError, match=r"ratings\.dat, line 5: expected 4 fields separated by '::', found 3"):
        MovieLens1M(root=str(root), cache_dir=str(tmp_path / "c")).load()


def test_ml1m_download_from_zip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_ml1m(tmp_path / "src")
    data = _grouplens_zip(tmp_path / "ml-1m.zip", "ml-1m", {n: (src / n).read_bytes() for n in ("ratings.dat", "movies.dat")})
    monkeypatch.setattr(MovieLens1M, "zip_url", (tmp_path / "ml-1m.zip").as_uri())
    monkeypatch.setattr(MovieLens1M, "zip_md5", hashlib.md5(data).hexdigest())
    monkeypatch.setattr(MovieLens1M, "zip_sha256", sha256_hex(data))
    source = MovieLens1M(cache_dir=str(tmp_path / "cache"))
    check_events(source.load())
    assert source.provenance.startswith("GroupLens")


def test_ml1m_offline_error_says_where_to_get_and_put(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MovieLens1M, "zip_url", closed_port_url("/ml-1m.zip"))
    with pytest.raises(DownloadError) as info:
        MovieLens1M(cache_dir=str(tmp_path)).prepare()
    message = str(info.value)
    assert MovieLens1M.zip_url in message and str(tmp_path / "raw" / "ml-1m" / "ml-1m.zip") in message
    assert "ratings.dat" in message and "root=" in message and "grouplens.org" in message


def test_ml1m_parses_a_million_lines_fast(tmp_path: Path) -> None:
    import time

    rng = np.random.default_rng(0)
    n, repeats = 1_001, 1_000  # a random block repeated: 1,001,000 lines (writing them fast)
    cols = [rng.integers(1, 6041, n), rng.integers(1, 3953, n), rng.integers(1, 6, n), rng.integers(9e8, 1e9, n)]
    block = "".join(f"{u}::{i}::{r}::{t}\n" for u, i, r, t in zip(*cols))
    (tmp_path / "ratings.dat").write_text(block * repeats)
    start = time.perf_counter()
    inter = movielens.parse_ratings_dat(tmp_path / "ratings.dat")
    elapsed = time.perf_counter() - start
    assert len(inter) == n * repeats
    np.testing.assert_array_equal(inter.users, np.tile(cols[0], repeats))
    np.testing.assert_array_equal(inter.times, np.tile(cols[3], repeats))
    assert elapsed < 3.0, f"parsing 1M ratings took {elapsed:.2f}s"
