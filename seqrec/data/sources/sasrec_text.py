"""SASRec-style text datasets (parsed with ``seqrec.data.text``).

Two layouts of the same data:
- ``pairs`` (SASRec, LRURec): one ``user item`` pair per line, ids from 1, lines grouped by user in
  time order (``data/Beauty.txt`` of github kang205/SASRec);
- ``lines`` (S3Rec, ICLRec, ...): one user per line, ``user item1 item2 ...`` in time order
  (``data/Beauty.txt`` of github RUCAIBox/CIKM2020-S3Rec).
Neither has timestamps: ``times`` is the event's position within its user (0, 1, 2, ...), so ordering
by time keeps the file's order. Files may be gzipped (detected by content, not by name).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqrec.data.array_cache import resolve_cache_dir
from seqrec.data.download import DownloadError, fetch, sha256_of
from seqrec.data.interactions import Interactions, Source, positions_within_user
from seqrec.data.text import parse_int_columns, parse_int_lines, read_maybe_gzip

log = logging.getLogger(__name__)


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
