"""MovieLens-100k and MovieLens-1M from GroupLens, with a manual ``root`` and an ML-100k offline fallback.

Where the files come from, in order:
1. ``root=``: a directory already holding the raw files (GroupLens layout, or for ML-100k RecBole's
   atomic files), used as is;
2. a verified copy in the cache (``<cache>/raw/ml-100k/`` or ``<cache>/raw/ml-1m/``);
3. the GroupLens zip (md5 and sha256 checked);
4. ML-100k only, when GroupLens is unreachable and ``allow_fallback``: the MovieLens-100k atomic files
   shipped inside the ``recbole==1.2.1`` wheel on PyPI (fetched with ``pip download``; recbole is never
   imported or installed, its files are read from the wheel zip and sha256-checked).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

from seqrec.data.array_cache import resolve_cache_dir
from seqrec.data.download import DownloadError, extract_member, fetch, pip_download, sha256_of
from seqrec.data.features import FeatureKind
from seqrec.data.interactions import Interactions, Source
from seqrec.data.text import parse_int_columns, read_maybe_gzip

log = logging.getLogger(__name__)

ML100K_URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
ML100K_MD5 = "0e33842e24a9c977be4e0107933c0723"
ML100K_SHA256 = "50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229"
ML1M_URL = "https://files.grouplens.org/datasets/movielens/ml-1m.zip"
ML1M_MD5 = "c4d9eecfca2ab87c1945afe126590906"
ML1M_SHA256 = "a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20"

# sha256 of the files inside the GroupLens ml-100k.zip (published by others, not by GroupLens); used only to
# log whether a root= copy is the official release.
ML100K_FILE_SHA256 = {
    "u.data": "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490",
    "u.item": "553841ebc7de3a0fd0d6b62a204ea30c1e651aacfb2814c7a6584ac52f2c5701",
}

RECBOLE_REQUIREMENT = "recbole==1.2.1"
RECBOLE_WHEEL_SHA256 = "9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407"
RECBOLE_ML100K_DIR = "recbole/dataset_example/ml-100k/"
RECBOLE_ML100K_FILES = {
    "ml-100k.inter": "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff",
    "ml-100k.item": "51d7cdf777ce5c0f5b32c1d947a4a81fe07d75e78abbe761e0cd4d0756064532",
    "ml-100k.user": "4f670007d9cfbeb9807e757209af1555b9bcc186bde25e767f67cb67c6dd5972",
}

# The 19 genre flags of u.item, in column order (u.genre).
ML100K_GENRES = (
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
    "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
    "War", "Western",
)

# The item features every MovieLens parser fills, with their default kinds (SourceItemFeatures, MovieLensItemTable).
MOVIELENS_KINDS: dict[str, FeatureKind] = {"genres": "token_seq", "title": "token_seq", "year": "float"}

# "Name (1995)", or "Name (1995) (V)": ML-100k's item 1412 carries a format marker after its year, which
# RecBole's ml-100k.item moved into release_year ("V"); dropping it with the year gives both layouts the same
# title and year.
_TITLE_YEAR = re.compile(r"^(.*?)\s*\((\d{4})\)(?:\s*\([A-Za-z]{1,3}\))?\s*$")
# Bump when a parser's output changes for the same files: fingerprint() carries it, so caches rebuild.
# 2: the "(1995) (V)" title above (before, GroupLens's item 1412 kept it in its title words).
PARSER_REVISION = 2
_RELEASE_YEAR = re.compile(r"(\d{4})\s*$")


def split_title_year(title: str) -> tuple[str, int | None]:
    """``"Toy Story (1995)"`` → ``("Toy Story", 1995)``; a short format marker after the year goes too
    (``"… Giving (1995) (V)"`` → ``("… Giving", 1995)``); a title without a trailing year keeps None."""
    match = _TITLE_YEAR.match(title)
    if match is None:
        return title.strip(), None
    return match.group(1), int(match.group(2))


def _features(titles: dict, years: dict, genres: dict) -> dict[str, dict]:
    """The ``item_features`` dict; a missing year is simply absent from ``year``."""
    return {"title": titles, "year": years, "genres": genres}


def _events(users: np.ndarray, items: np.ndarray, ratings: np.ndarray, times: np.ndarray) -> Interactions:
    """Interactions with int64 ids, float32 ratings and integer times where they are integral."""
    if times.dtype.kind == "f" and np.all(times == np.round(times)):
        times = times.astype(np.int64)
    return Interactions(
        users=users.astype(np.int64, copy=False),
        items=items.astype(np.int64, copy=False),
        times=times,
        ratings=ratings.astype(np.float32),
    )


# ---------------------------------------------------------------------------------------------------
# Parsers, one per raw format
# ---------------------------------------------------------------------------------------------------


def parse_u_data(path: Path) -> Interactions:
    """GroupLens ``u.data``: ``user<TAB>item<TAB>rating<TAB>timestamp`` per line."""
    users, items, ratings, times = parse_int_columns(
        read_maybe_gzip(path), 4, sep=b"\t", where=str(path), names=("user", "item", "rating", "timestamp")
    )
    return _events(users, items, ratings, times)


def parse_u_item(path: Path) -> dict[str, dict]:
    """GroupLens ``u.item`` (latin-1, ``|``-separated: id, title, release date, video date, URL, 19 flags)."""
    text = read_maybe_gzip(path).decode("latin-1")
    titles: dict[int, str] = {}
    years: dict[int, int] = {}
    genres: dict[int, list[str]] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 5 + len(ML100K_GENRES):
            raise ValueError(
                f"{path}, line {n}: expected {5 + len(ML100K_GENRES)} '|'-separated fields (id, title, release "
                f"date, video release date, IMDb URL, 19 genre flags), found {len(fields)}: {line[:200]!r}."
            )
        item = _int_field(fields[0], path, n, "movie id")
        flags = fields[5:]
        if any(flag not in ("0", "1") for flag in flags):
            raise ValueError(f"{path}, line {n}: genre flags must be 0 or 1, found {flags}.")
        title, title_year = split_title_year(fields[1])
        release = _RELEASE_YEAR.search(fields[2])
        # The title's year first (as RecBole's ml-100k.item does), else the release date's.
        year = title_year if title_year is not None else (int(release.group(1)) if release else None)
        titles[item] = title
        if year is not None:
            years[item] = year
        genres[item] = [g for g, flag in zip(ML100K_GENRES, flags) if flag == "1"]
    return _features(titles, years, genres)


def _atomic_header(first_line: str, path: Path, required: tuple[str, ...]) -> dict[str, int]:
    """Column index by name from a RecBole atomic-file header (``name:type`` fields)."""
    names = [field.split(":", 1)[0].strip() for field in first_line.split("\t")]
    missing = [r for r in required if r not in names]
    if missing or not all(":" in field for field in first_line.split("\t")):
        raise ValueError(
            f"{path}, line 1: expected a RecBole header with columns {list(required)} as 'name:type' "
            f"tab-separated fields, found {first_line[:200]!r}."
        )
    return {name: i for i, name in enumerate(names)}


def parse_recbole_inter(path: Path) -> Interactions:
    """RecBole ``ml-100k.inter``: header ``user_id:token item_id:token rating:float timestamp:float``."""
    data = read_maybe_gzip(path)
    header, _, body = data.partition(b"\n")
    columns = _atomic_header(header.decode("utf-8").rstrip("\r"), path, ("user_id", "item_id", "rating", "timestamp"))
    parsed = parse_int_columns(
        body, len(columns), sep=b"\t", where=str(path), names=list(columns),
        float_cols=(columns["rating"], columns["timestamp"]), first_line=2,
    )
    return _events(
        parsed[columns["user_id"]], parsed[columns["item_id"]], parsed[columns["rating"]], parsed[columns["timestamp"]]
    )


def parse_recbole_item(path: Path) -> dict[str, dict]:
    """RecBole ``ml-100k.item``: ``item_id movie_title release_year class`` (tab-separated, genres space-separated)."""
    lines = read_maybe_gzip(path).decode("utf-8").splitlines()
    if not lines:
        raise ValueError(f"{path} is empty; expected a RecBole header line and one line per movie.")
    columns = _atomic_header(lines[0], path, ("item_id",))
    titles: dict[int, str] = {}
    years: dict[int, int] = {}
    genres: dict[int, list[str]] = {}
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(columns):
            raise ValueError(f"{path}, line {n}: expected {len(columns)} tab-separated fields, found {len(fields)}: {line[:200]!r}.")
        item = _int_field(fields[columns["item_id"]], path, n, "item_id")
        year_text = fields[columns["release_year"]].strip() if "release_year" in columns else ""
        title_year = None
        if "movie_title" in columns:
            title = fields[columns["movie_title"]]
            titles[item] = "unknown" if title == "unkonwn" else title  # RecBole's typo for u.item's "unknown"
            if not year_text.isdigit():  # e.g. item 1412: year "V", title "... Giving (1995)"
                titles[item], title_year = split_title_year(titles[item])
        if year_text.isdigit():
            years[item] = int(year_text)
        elif title_year is not None:
            years[item] = title_year
        if "class" in columns:
            genres[item] = fields[columns["class"]].split()
    return _features(titles, years, genres)


def parse_ratings_dat(path: Path) -> Interactions:
    """GroupLens ML-1M ``ratings.dat``: ``UserID::MovieID::Rating::Timestamp`` per line."""
    users, items, ratings, times = parse_int_columns(
        read_maybe_gzip(path), 4, sep=b"::", where=str(path), names=("UserID", "MovieID", "Rating", "Timestamp")
    )
    return _events(users, items, ratings, times)


def parse_movies_dat(path: Path) -> dict[str, dict]:
    """GroupLens ML-1M ``movies.dat``: ``MovieID::Title (Year)::Genre|Genre`` (latin-1)."""
    text = read_maybe_gzip(path).decode("latin-1")
    titles: dict[int, str] = {}
    years: dict[int, int] = {}
    genres: dict[int, list[str]] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        head, sep1, rest = line.partition("::")
        title, sep2, genre_text = rest.rpartition("::")
        if not (sep1 and sep2):
            raise ValueError(f"{path}, line {n}: expected 'MovieID::Title::Genres', found {line[:200]!r}.")
        item = _int_field(head, path, n, "MovieID")
        titles[item], year = split_title_year(title)
        if year is not None:
            years[item] = year
        genres[item] = [g for g in genre_text.split("|") if g]
    return _features(titles, years, genres)


def _int_field(text: str, path: Path, line: int, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{path}, line {line}: {what} is {text!r}, expected an integer.") from None


# ---------------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------------

# layout name → (events file, item file, events parser, item parser)
_LAYOUTS = {
    "grouplens-100k": ("u.data", "u.item", parse_u_data, parse_u_item),
    "recbole-100k": ("ml-100k.inter", "ml-100k.item", parse_recbole_inter, parse_recbole_item),
    "grouplens-1m": ("ratings.dat", "movies.dat", parse_ratings_dat, parse_movies_dat),
}


class _MovieLens(Source):
    """Shared logic: find a layout in a directory, fingerprint and parse it."""

    item_feature_kinds = MOVIELENS_KINDS
    layouts: tuple[str, ...] = ()
    zip_url = ""
    zip_md5 = ""
    zip_sha256 = ""
    zip_folder = ""

    def __init__(self, cache_dir: str | None = None, root: str | None = None) -> None:
        self.cache_dir = cache_dir
        self.root = Path(root).expanduser() if root is not None else None
        self.layout: str | None = None
        self.files: dict[str, Path] = {}
        self.provenance: str | None = None  # where the files came from: root, cache, grouplens, recbole wheel
        self._checksums: dict[str, str] = {}

    def describe(self) -> str:
        """One line for logs."""
        return f"{self.name} ({self.layout or 'not prepared'} from {self.provenance or '?'})"

    def raw_dir(self) -> Path:
        """``<cache>/raw/<name>``: where downloads and extracted files live."""
        return resolve_cache_dir(self.cache_dir) / "raw" / self.name

    def _find(self, directory: Path) -> tuple[str, dict[str, Path]] | None:
        """The first layout whose two files are in ``directory`` (or its ``<zip folder>/``)."""
        partial = None
        for base in (directory, directory / self.zip_folder):
            for layout in self.layouts:
                events, items = _LAYOUTS[layout][:2]
                event_path, item_path = base / events, base / items
                if event_path.is_file() and item_path.is_file():
                    return layout, {"events": event_path, "items": item_path}
                if partial is None and (event_path.is_file() or item_path.is_file()):
                    partial = (event_path, item_path) if event_path.is_file() else (item_path, event_path)
        if partial is not None:
            have, lack = partial
            raise FileNotFoundError(
                f"{self.name}: found {have} but not {lack.name} beside it; the events file and the item file "
                f"are both needed ({self._expected_files()}). Copy the missing file from the same release."
            )
        return None

    def _expected_files(self) -> str:
        return " or ".join(f"{_LAYOUTS[lay][0]} + {_LAYOUTS[lay][1]}" for lay in self.layouts)

    def _use(self, layout: str, files: dict[str, Path], provenance: str) -> None:
        self.layout, self.files, self.provenance = layout, files, provenance
        self._checksums = {p.name: sha256_of(p) for p in files.values()}
        known = {**ML100K_FILE_SHA256, **RECBOLE_ML100K_FILES}
        for filename, digest in self._checksums.items():
            if filename in known and known[filename] != digest:
                log.info("%s: %s (sha256 %s) differs from the published release file", self.name, filename, digest)
        log.info("%s: using %s files from %s (%s)", self.name, layout, provenance,
                 ", ".join(str(p) for p in files.values()))

    def _prepare_root(self) -> bool:
        """Use ``root`` when given; True when done."""
        if self.root is None:
            return False
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"{self.name}: root={self.root} is not a directory; expected a directory holding "
                f"{self._expected_files()}."
            )
        found = self._find(self.root)
        if found is None:
            raise FileNotFoundError(
                f"{self.name}: no raw files in root={self.root}; expected {self._expected_files()} there "
                f"(or in {self.root / self.zip_folder}). Unzip {self.zip_url} into it, or drop root= to download."
            )
        self._use(*found, provenance=f"root {self.root}")
        return True

    def _prepare_grouplens(self, zip_path: Path) -> None:
        """Verify the zip (downloading it if needed) and extract the two files next to it."""
        fetch(self.zip_url, zip_path, md5=self.zip_md5, sha256=self.zip_sha256)
        layout = self.layouts[0]
        files = {}
        for role, filename in (("events", _LAYOUTS[layout][0]), ("items", _LAYOUTS[layout][1])):
            files[role] = extract_member(zip_path, f"{self.zip_folder}/{filename}", zip_path.parent / filename)
        self._use(layout, files, provenance=f"GroupLens {self.zip_url}")

    def fingerprint(self) -> str:
        """``<name>:<layout>:<file>=<sha256>,...:parser-<PARSER_REVISION>`` of the raw files in use."""
        self.prepare()
        sums = ",".join(f"{name}={digest}" for name, digest in sorted(self._checksums.items()))
        return f"{self.name}:{self.layout}:{sums}:parser-{PARSER_REVISION}"

    def load(self) -> Interactions:
        """Parse the events and the item features of the prepared layout."""
        self.prepare()
        assert self.layout is not None
        _, _, parse_events, parse_items = _LAYOUTS[self.layout]
        inter = parse_events(self.files["events"])
        inter.item_features = parse_items(self.files["items"])
        log.info("%s: %d events, %d users, %d items", self.name, len(inter),
                 len(np.unique(inter.users)), len(np.unique(inter.items)))
        return inter


class MovieLens100K(_MovieLens):
    """MovieLens-100k: 100,000 ratings by 943 users of 1,682 movies, with title, year and genres."""

    name = "ml-100k"
    layouts = ("grouplens-100k", "recbole-100k")
    zip_url, zip_md5, zip_sha256, zip_folder = ML100K_URL, ML100K_MD5, ML100K_SHA256, "ml-100k"

    def __init__(self, cache_dir: str | None = None, root: str | None = None, allow_fallback: bool = True) -> None:
        super().__init__(cache_dir=cache_dir, root=root)
        self.allow_fallback = allow_fallback

    def _fallback_dir(self) -> Path:
        return self.raw_dir() / "recbole-1.2.1"

    def _cached_fallback(self) -> bool:
        """Use atomic files extracted earlier from the recbole wheel, when all verify."""
        directory = self._fallback_dir()
        paths = {name: directory / name for name in RECBOLE_ML100K_FILES}
        if not all(p.is_file() for p in paths.values()):
            return False
        if any(sha256_of(p) != digest for (name, digest), p in zip(RECBOLE_ML100K_FILES.items(), paths.values())):
            log.warning("%s: cached files in %s do not verify; ignoring them", self.name, directory)
            return False
        files = {"events": paths["ml-100k.inter"], "items": paths["ml-100k.item"]}
        self._use("recbole-100k", files, provenance=f"cached copy of the {RECBOLE_REQUIREMENT} wheel files")
        return True

    def _prepare_fallback(self, reason: DownloadError) -> None:
        """Take the ML-100k atomic files out of the recbole wheel from PyPI."""
        log.warning(
            "%s: GroupLens is unreachable (%s); falling back to the MovieLens-100k copy inside the %s wheel "
            "from the package index", self.name, reason.args[0].split(". ")[0], RECBOLE_REQUIREMENT,
        )
        directory = self._fallback_dir()
        try:
            wheel = pip_download(RECBOLE_REQUIREMENT, self.raw_dir() / "wheels", sha256=RECBOLE_WHEEL_SHA256)
        except DownloadError as e:
            raise DownloadError(
                f"{self.name}: both sources failed. GroupLens: {reason} Fallback ({RECBOLE_REQUIREMENT} wheel from "
                f"the package index): {e} Alternatively unzip ml-100k.zip anywhere and pass root=<that directory>."
            ) from e
        for name, digest in RECBOLE_ML100K_FILES.items():
            extract_member(wheel, RECBOLE_ML100K_DIR + name, directory / name, sha256=digest)
        files = {"events": directory / "ml-100k.inter", "items": directory / "ml-100k.item"}
        self._use("recbole-100k", files, provenance=f"{RECBOLE_REQUIREMENT} wheel from the package index ({wheel.name})")

    def prepare(self) -> None:
        """Find or fetch the raw files: root, cached zip, cached fallback, GroupLens, then the wheel."""
        if self.layout is not None or self._prepare_root():
            return
        zip_path = self.raw_dir() / "ml-100k.zip"
        if not zip_path.is_file() and self._cached_fallback():
            return
        try:
            self._prepare_grouplens(zip_path)
        except DownloadError as e:
            if not self.allow_fallback:
                raise DownloadError(
                    f"{e} (The offline fallback is disabled: allow_fallback=False. Or unzip ml-100k.zip anywhere "
                    f"and pass root=<that directory>.)"
                ) from e
            self._prepare_fallback(e)


class MovieLens1M(_MovieLens):
    """MovieLens-1M: 1,000,209 ratings by 6,040 users of 3,706 movies, with title, year and genres."""

    name = "ml-1m"
    layouts = ("grouplens-1m",)
    zip_url, zip_md5, zip_sha256, zip_folder = ML1M_URL, ML1M_MD5, ML1M_SHA256, "ml-1m"

    def prepare(self) -> None:
        """Find or fetch the raw files: root, else the (cached or downloaded) GroupLens zip."""
        if self.layout is not None or self._prepare_root():
            return
        zip_path = self.raw_dir() / "ml-1m.zip"
        try:
            self._prepare_grouplens(zip_path)
        except DownloadError as e:
            raise DownloadError(
                f"{e} MovieLens-1M has no offline fallback: get ml-1m.zip from {self.zip_url} "
                f"(https://grouplens.org/datasets/movielens/1m/, md5 {self.zip_md5}) and either place the zip at "
                f"{zip_path} or unzip it and pass root=<directory with ratings.dat and movies.dat>."
            ) from e
