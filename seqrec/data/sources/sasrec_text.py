"""SASRec-style text datasets, and the fast integer-text parser the other sources share.

Two layouts of the same data:
- ``pairs`` (SASRec, LRURec): one ``user item`` pair per line, ids from 1, lines grouped by user in
  time order (``data/Beauty.txt`` of github kang205/SASRec);
- ``lines`` (S3Rec, ICLRec, ...): one user per line, ``user item1 item2 ...`` in time order
  (``data/Beauty.txt`` of github RUCAIBox/CIKM2020-S3Rec).
Neither has timestamps: ``times`` is the event's position within its user (0, 1, 2, ...), so ordering
by time keeps the file's order. Files may be gzipped (detected by content, not by name).
"""

from __future__ import annotations

import gzip
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqrec.data.download import DownloadError, fetch, sha256_of
from seqrec.data.interactions import Interactions
from seqrec.data.sources.base import Source, resolve_cache_dir

log = logging.getLogger(__name__)

_NEWLINE, _SPACE, _TAB = 10, 32, 9
_INT64_MAX = np.iinfo(np.int64).max


# ---------------------------------------------------------------------------------------------------
# Parsing helpers (shared by movielens.py and xlong.py)
# ---------------------------------------------------------------------------------------------------


def read_maybe_gzip(path: str | os.PathLike) -> bytes:
    """All bytes of ``path``, decompressed when the file is gzip (magic bytes ``1f 8b``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Expected a data file at {path}, found {'a directory' if path.exists() else 'nothing'}.")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                return f.read()
        except (OSError, EOFError) as e:
            raise ValueError(f"{path} looks gzipped but cannot be decompressed ({e}); fetch it again.") from e
    return path.read_bytes()


def _normalise(data: bytes) -> bytes:
    """CRLF → LF and no trailing blank lines (leading content is kept for line numbering)."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return data.rstrip(b"\n\t ")


def _line_text(data: bytes, line_index: int) -> str:
    """Line ``line_index`` (0-based) of ``data``, decoded and shortened for an error message."""
    start = 0
    for _ in range(line_index):
        start = data.index(b"\n", start) + 1
    end = data.find(b"\n", start)
    text = data[start : end if end >= 0 else len(data)].decode("latin-1")
    return text if len(text) <= 200 else text[:200] + "..."


def _fields_per_line(arr: np.ndarray, newlines: np.ndarray, sep_byte: int | None) -> np.ndarray:
    """Number of fields on each line: separator count + 1, or whitespace-separated token count."""
    n_lines = len(newlines) + 1
    if sep_byte is not None:
        seps = np.flatnonzero(arr == sep_byte)
        return np.bincount(np.searchsorted(newlines, seps), minlength=n_lines) + 1
    blank = (arr == _SPACE) | (arr == _TAB) | (arr == _NEWLINE)
    starts = np.flatnonzero(~blank & np.concatenate(([True], blank[:-1])))
    return np.bincount(np.searchsorted(newlines, starts), minlength=n_lines)


def _slow_parse(
    data: bytes,
    sep: bytes | None,
    where: str,
    names: Sequence[str],
    float_cols: Sequence[int],
    first_line: int,
) -> list[list[float | int]]:
    """Line-by-line parse used only to report the first bad field (or to accept float columns)."""
    rows: list[list[float | int]] = []
    for i, line in enumerate(data.split(b"\n")):
        fields = line.split(sep) if sep is not None else line.split()
        row: list[float | int] = []
        for j, field in enumerate(fields):
            is_float = j in float_cols
            try:
                value: float | int = float(field) if is_float else int(field)
            except ValueError:
                name = names[min(j, len(names) - 1)] if names else f"field {j + 1}"
                raise ValueError(
                    f"{where}, line {first_line + i}: field {j + 1} ({name}) is {field.decode('latin-1')!r}, "
                    f"expected {'a number' if is_float else 'an integer'}. Line: "
                    f"{_line_text(data, i)!r}. Fix or remove the line, or fetch the file again."
                ) from None
            if not is_float and not -(2**63) <= value < 2**63:
                raise ValueError(f"{where}, line {first_line + i}: field {j + 1} ({field!r}) does not fit in int64.")
            row.append(value)
        rows.append(row)
    return rows


def parse_int_columns(
    data: bytes,
    n_cols: int,
    *,
    sep: bytes | None = None,
    where: str = "<data>",
    names: Sequence[str] = (),
    float_cols: Sequence[int] = (),
    first_line: int = 1,
) -> list[np.ndarray]:
    """Parse delimited integer text (one record per line) into ``n_cols`` int64 columns, vectorised.

    ``sep=None`` splits on runs of spaces/tabs; otherwise on exactly ``sep`` (e.g. ``b"\\t"``,
    ``b"::"``). Columns in ``float_cols`` may hold non-integers, in which case they come back float64.
    A line with the wrong number of fields or a non-integer id raises ``ValueError`` naming the line.
    """
    data = _normalise(data)
    if not data:
        return [np.zeros(0, dtype=np.int64) for _ in range(n_cols)]
    data, split = _unify_sep(data, sep)
    counts = _check_fields(data, split, where, first_line, sep, exact=n_cols)
    values = _fast_ints(data, split, int(counts.sum()))
    if values is not None:
        table = values.reshape(-1, n_cols)
        return [table[:, j].copy() for j in range(n_cols)]
    rows = _slow_parse(data, split, where, names, float_cols, first_line)
    columns = []
    for j in range(n_cols):
        column = [row[j] for row in rows]
        is_int = all(isinstance(v, int) for v in column)
        columns.append(np.array(column, dtype=np.int64 if is_int else np.float64))
    return columns


def parse_int_lines(
    data: bytes,
    *,
    where: str = "<data>",
    min_fields: int = 1,
    first_line: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Parse variable-length whitespace-separated integer lines: (flat int64 values, fields per line)."""
    data = _normalise(data)
    if not data:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    counts = _check_fields(data, None, where, first_line, None, minimum=min_fields)
    values = _fast_ints(data, None, int(counts.sum()))
    if values is None:
        rows = _slow_parse(data, None, where, (), (), first_line)
        values = np.fromiter((v for row in rows for v in row), dtype=np.int64, count=int(counts.sum()))
    return values, counts


def _unify_sep(data: bytes, sep: bytes | None) -> tuple[bytes, bytes | None]:
    """Rewrite a multi-byte separator (``::``) as a tab so every separator is one byte."""
    if sep is not None and len(sep) > 1:
        return data.replace(sep, b"\t"), b"\t"
    return data, sep


def _check_fields(
    data: bytes,
    split: bytes | None,
    where: str,
    first_line: int,
    sep: bytes | None,
    *,
    exact: int | None = None,
    minimum: int = 1,
) -> np.ndarray:
    """Fields per line; ValueError naming the first line whose count is wrong."""
    arr = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(arr == _NEWLINE)
    counts = _fields_per_line(arr, newlines, None if split is None else split[0])
    bad = np.flatnonzero(counts != exact) if exact is not None else np.flatnonzero(counts < minimum)
    if len(bad):
        i = int(bad[0])
        expected = f"{exact} fields" if exact is not None else f"at least {minimum} field(s)"
        sep_name = "whitespace" if sep is None else repr(sep.decode("latin-1"))
        raise ValueError(
            f"{where}, line {first_line + i}: expected {expected} separated by {sep_name}, found "
            f"{int(counts[i])} (line: {_line_text(data, i)!r}). The file is truncated, malformed or not in "
            f"this format; fix or remove the line, or fetch the file again."
        )
    return counts


def _fast_ints(data: bytes, split: bytes | None, total: int) -> np.ndarray | None:
    """All integers of ``data`` via ``np.fromstring``; None when anything is not a plain int64."""
    text = data.decode("latin-1")
    if split is not None and split not in (b" ", b"\t"):
        text = text.replace(split.decode("latin-1"), " ")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            values = np.fromstring(text, dtype=np.int64, sep=" ")
    except (ValueError, DeprecationWarning):
        return None
    if len(values) != total or (total and values.max() == _INT64_MAX):
        return None
    return values


def positions_within_user(users: np.ndarray) -> np.ndarray:
    """0-based position of each row among the rows of the same user, in file order (stable)."""
    n = len(users)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(users, kind="stable")
    sorted_users = users[order]
    new_group = np.concatenate(([True], sorted_users[1:] != sorted_users[:-1]))
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    positions = np.empty(n, dtype=np.int64)
    positions[order] = np.arange(n) - group_start
    return positions


# ---------------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownText:
    """A published SASRec/S3Rec-format file: where it lives and what it should contain."""

    filename: str
    url: str | None
    sha256: str | None  # None: not verified by us; the sha256 of the first download is recorded
    counts: tuple[int, int, int] | None  # (users, items, interactions) as published, for a sanity log
    note: str = ""


_SASREC_RAW = "https://raw.githubusercontent.com/kang205/SASRec/master/data/"
_S3REC_RAW = "https://raw.githubusercontent.com/RUCAIBox/CIKM2020-S3Rec/master/data/"

# Checksums: none of these files publishes one, and the hosts are unreachable from the machine this
# was written on, so sha256 is None everywhere: fetch() records the sha256 of the first download in
# ``<file>.sha256`` and verifies it on every later use. For reference (not enforced): the decompressed
# copies in the project's shared test data hash to
#   beauty (SASRec/LRURec pairs): 3cd3d56cee682f5118f22d0443d5d27116075c719ec83bfdfa3e45df33a95e12
#   beauty (S3Rec lines):         226cce9c3105299ca0db9615d7d3fb32b3175e90da43100ae352599f0f0107b8
SASREC_DATASETS: dict[str, KnownText] = {
    "beauty": KnownText("Beauty.txt", _SASREC_RAW + "Beauty.txt", None, (52_204, 57_289, 394_908)),
    "video": KnownText("Video.txt", _SASREC_RAW + "Video.txt", None, (31_013, 23_715, 287_107)),
    "steam": KnownText("Steam.txt", _SASREC_RAW + "Steam.txt", None, (334_730, 13_047, None)),  # ~3.7M
    "ml-1m": KnownText("ml-1m.txt", _SASREC_RAW + "ml-1m.txt", None, (6_040, 3_416, 999_611)),
    "sports": KnownText(
        "Sports.txt", None, None, (83_970, 83_728, None),  # ~596K interactions (LRURec Table 2)
        note="LRURec uses a SASRec-style Sports.txt (Amazon Sports and Outdoors) but publishes no "
        "location; build it with SASRec's data/DataProcessing.py from the Amazon 2014 ratings file",
    ),
}

S3REC_DATASETS: dict[str, KnownText] = {
    "beauty": KnownText("Beauty.txt", _S3REC_RAW + "Beauty.txt", None, (22_363, 12_101, 198_502)),
    "sports": KnownText("Sports_and_Outdoors.txt", _S3REC_RAW + "Sports_and_Outdoors.txt", None, None),
    "toys": KnownText("Toys_and_Games.txt", _S3REC_RAW + "Toys_and_Games.txt", None, None),
    "yelp": KnownText("Yelp.txt", _S3REC_RAW + "Yelp.txt", None, None),
    "lastfm": KnownText("LastFM.txt", _S3REC_RAW + "LastFM.txt", None, None),
}


class SASRecText(Source):
    """A SASRec-format text file (``user item`` per line, grouped by user in time order).

    ``name`` picks a known dataset (``SASREC_DATASETS``: beauty, video, steam, ml-1m, sports) that is
    downloaded into ``<cache>/raw/sasrec/``; with ``path`` any name works and the file is read as is.
    """

    layout = "pairs"
    registry = SASREC_DATASETS
    cache_subdir = "sasrec"

    def __init__(self, name: str, path: str | None = None, cache_dir: str | None = None) -> None:
        self.name = name
        self.variant = name.lower()
        self.path = Path(path).expanduser() if path is not None else None
        self.cache_dir = cache_dir
        self.known = self.registry.get(self.variant)
        if self.path is None and self.known is None:
            raise ValueError(
                f"Unknown {type(self).__name__} dataset {name!r}: known names are {sorted(self.registry)}; "
                f"for any other dataset pass path= to a file in the {self.layout!r} layout."
            )
        self._file: Path | None = None
        self._sha256: str | None = None

    def describe(self) -> str:
        """One line for logs."""
        return f"{type(self).__name__}({self.name!r}, {self._file or self.path or 'not prepared'})"

    def _raw_dir(self) -> Path:
        return resolve_cache_dir(self.cache_dir) / "raw" / self.cache_subdir

    def prepare(self) -> None:
        """Locate the file (``path``, a cached copy, or a download of the known URL) and hash it."""
        if self._file is not None:
            return
        if self.path is not None:
            if not self.path.is_file():
                raise FileNotFoundError(
                    f"{type(self).__name__}({self.name!r}): expected a {self.layout!r}-layout text file "
                    f"(optionally gzipped) at {self.path}, found {'a directory' if self.path.exists() else 'nothing'}."
                )
            self._file = self.path
        else:
            assert self.known is not None
            raw = self._raw_dir()
            candidates = [raw / self.known.filename, raw / (self.known.filename + ".gz")]
            found = next((p for p in candidates if p.is_file()), None)
            if found is not None and self.known.url is None:
                self._file = found
            elif self.known.url is None:
                raise FileNotFoundError(
                    f"{type(self).__name__}({self.name!r}) has no public download location ({self.known.note}). "
                    f"Put the file at {candidates[0]} (or {candidates[1].name}), or pass path=."
                )
            elif found is not None and found.suffix == ".gz":
                self._file = found  # a manually placed gzipped copy
            else:
                try:
                    self._file = fetch(self.known.url, candidates[0], sha256=self.known.sha256)
                except DownloadError as e:
                    raise DownloadError(
                        f"{e} Alternatively pass path= to a local copy of {self.known.filename}."
                    ) from e
        self._sha256 = sha256_of(self._file)
        log.info("%s: using %s (sha256 %s)", type(self).__name__, self._file, self._sha256)

    def fingerprint(self) -> str:
        """``<class>:<name>:<layout>:<sha256 of the raw file>``."""
        self.prepare()
        return f"{type(self).__name__}:{self.variant}:{self.layout}:{self._sha256}"

    def load(self) -> Interactions:
        """Parse the file; ``times`` are positions within each user."""
        self.prepare()
        assert self._file is not None
        data = read_maybe_gzip(self._file)
        where = str(self._file)
        if self.layout == "pairs":
            users, items = parse_int_columns(data, 2, where=where, names=("user", "item"))
            times = positions_within_user(users)
        else:
            values, counts = parse_int_lines(data, where=where, min_fields=2)
            starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
            lengths = counts - 1
            users = np.repeat(values[starts], lengths)
            is_item = np.ones(len(values), dtype=bool)
            is_item[starts] = False
            items = values[is_item]
            times = np.arange(len(items), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        result = Interactions(users=users, items=items, times=times)
        self._check_counts(result)
        return result

    def _check_counts(self, inter: Interactions) -> None:
        """Log (warn on mismatch) the counts against the published ones of a known dataset."""
        found = (len(np.unique(inter.users)), len(np.unique(inter.items)), len(inter))
        log.info("%s(%r): %d users, %d items, %d interactions", type(self).__name__, self.name, *found)
        if self.known is None or self.known.counts is None or self.path is not None:
            return
        for label, want, got in zip(("users", "items", "interactions"), self.known.counts, found):
            if want is not None and want != got:
                log.warning(
                    "%s(%r): %s %d differs from the published %d; the file may be a different version",
                    type(self).__name__, self.name, label, got, want,
                )


class S3RecText(SASRecText):
    """An S3Rec-format text file: one user per line, ``user item1 item2 ...`` in time order.

    Known names (``S3REC_DATASETS``): beauty, sports, toys, yelp, lastfm (S3Rec's 5-core files).
    """

    layout = "lines"
    registry = S3REC_DATASETS
    cache_subdir = "s3rec"
