"""The SASRec-format files LRURec publishes for Video, Sports and Steam (github yueqirex/LRURec, ``data/``).

LRURec's repository ships the three files its Table 3 was computed on, as ``user item`` pairs grouped by user
in time order (``SASRecText``'s ``pairs`` layout): ``data/video/Video.txt``, ``data/sports/
Sports_and_Outdoors.txt`` and ``data/steam/Steam.txt``. Its loaders (``datasets/{video,sports,steam}.py``)
read them, drop consecutive repeats of a (user, item) pair and apply no count filter; the protocol parts
``configs/protocol/lrurec_{video,sports,steam}.yaml`` do the same.

Provenance, from the repositories' git trees (a git blob id is the SHA-1 of ``b"blob <size>\\0" + content``,
so it identifies the exact bytes the repository published):

| name | LRURec path (blob) | byte-identical copy | sha256 |
|---|---|---|---|
| video | data/video/Video.txt (f576455c…) | kang205/SASRec data/Video.txt (same blob) | b7376fe2… (computed from the repository snapshot) |
| sports | data/sports/Sports_and_Outdoors.txt (02e88cf9…) | none known | not obtained |
| steam | data/steam/Steam.txt (a0e80e7a…) | kang205/SASRec data/Steam.txt (same blob) | not obtained |

Video is verified by its sha256. Sports and Steam could not be downloaded where this was written, so no
sha256 is pinned (none is invented): their download is checked against the git blob id above (a mismatch is
a ``ValueError``) and their users and items against the paper's Table 2 (a mismatch is a ``ValueError``; the
interactions are published rounded, 596K and 3.7M, and are checked after preprocessing by the protocol's
``expected_counts``); the sha256 of the first download is recorded beside it and checked on every later use.
When LRURec's URL fails, the byte-identical SASRec copy is tried (Video, Steam).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
from pathlib import Path

import numpy as np

from seqrec.data.download import DownloadError, fetch, sha256_of
from seqrec.data.interactions import Interactions
from seqrec.data.sources.sasrec_text import KnownText, SASRecText

log = logging.getLogger(__name__)

_LRUREC_RAW = "https://raw.githubusercontent.com/yueqirex/LRURec/master/data/"
_SASREC_RAW = "https://raw.githubusercontent.com/kang205/SASRec/master/data/"

LRUREC_DATASETS: dict[str, KnownText] = {
    "video": KnownText(
        "Video.txt", _LRUREC_RAW + "video/Video.txt",
        "b7376fe24430743f411dc7f567285657b2adb3f74361cc7ba0aee94f3024b651", (31_013, 23_715, 287_107),
    ),
    "sports": KnownText(
        "Sports_and_Outdoors.txt", _LRUREC_RAW + "sports/Sports_and_Outdoors.txt", None, (83_970, 83_728, None),
        note="~596K interactions (LRURec Table 2); no sha256 obtained: checked by git blob id and counts",
    ),
    "steam": KnownText(
        "Steam.txt", _LRUREC_RAW + "steam/Steam.txt", None, (334_730, 13_047, None),
        note="~3.7M interactions (LRURec Table 2); no sha256 obtained: checked by git blob id and counts",
    ),
}

# Git blob ids of the published files (LRURec's tree at master; SASRec's Video.txt and Steam.txt carry the same).
GIT_BLOBS: dict[str, str] = {
    "video": "f576455c76008a2c02a178c9d4ee930be632af89",
    "sports": "02e88cf9ea42d4d8f06492d80265e53471c2fe0c",
    "steam": "a0e80e7ae37ef2cf9410daf23c3e28ea6f6c31b7",
}

# Byte-identical copies tried when LRURec's URL fails (same git blob id in kang205/SASRec).
MIRRORS: dict[str, str] = {"video": _SASREC_RAW + "Video.txt", "steam": _SASREC_RAW + "Steam.txt"}


def git_blob_sha1(path: str | os.PathLike) -> str:
    """Git's blob id of a file's (decompressed, if gzipped) content: SHA-1 of ``b"blob <size>\\0" + content``."""
    path = Path(path)
    with open(path, "rb") as handle:
        gzipped = handle.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    size = 0
    with opener(path, "rb") as handle:  # the size first (streamed: a gzipped file has no size on disk)
        while chunk := handle.read(1 << 20):
            size += len(chunk)
    digest = hashlib.sha1(f"blob {size}\0".encode())  # noqa: S324 (git's content address, not a security hash)
    with opener(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class LRURecText(SASRecText):
    """One of LRURec's published SASRec-format files (``LRUREC_DATASETS``: video, sports, steam).

    Downloaded into ``<cache>/raw/lrurec/`` from LRURec's repository (the byte-identical SASRec copy when that
    fails), verified by sha256 where one is known and by git blob id otherwise; users and items must equal
    the paper's Table 2. ``path`` reads a local copy as is (no check beyond the parse).
    """

    registry = LRUREC_DATASETS
    cache_subdir = "lrurec"

    def prepare(self) -> None:
        """Locate or download the file (LRURec's URL, then its mirror), hash it, check its git blob id."""
        if self._file is not None:
            return
        try:
            super().prepare()
        except DownloadError as first:
            mirror = MIRRORS.get(self.variant) if self.path is None else None
            if mirror is None:
                raise
            assert self.known is not None
            dest = self._raw_dir() / self.known.filename
            log.warning("%s(%r): %s; trying the byte-identical copy %s", type(self).__name__, self.name, first, mirror)
            try:
                self._file = fetch(mirror, dest, sha256=self.known.sha256)
            except DownloadError as second:
                raise DownloadError(f"{first} The copy at {mirror} failed too: {second}") from second
            self._sha256 = sha256_of(self._file)
        self.verify_published()

    def verify_published(self) -> None:
        """ValueError when a downloaded known file is not the blob the repository published (``GIT_BLOBS``)."""
        blob = GIT_BLOBS.get(self.variant)
        if self.path is not None or blob is None or self._file is None:
            return
        if self.known is not None and self.known.sha256 is not None:
            return  # the sha256 already pinned these bytes
        found = git_blob_sha1(self._file)
        if found != blob:
            raise ValueError(
                f"{type(self).__name__}({self.name!r}): {self._file} has git blob id {found}, but LRURec published "
                f"{blob} ({self.known.url if self.known else ''}): it is another version. Delete it and fetch it "
                "again, or pass path= to use it anyway."
            )

    def _check_counts(self, inter: Interactions) -> None:
        """Users and items must equal the paper's (ValueError otherwise); interactions as published, when exact."""
        super()._check_counts(inter)
        if self.known is None or self.known.counts is None or self.path is not None:
            return
        found = (len(np.unique(inter.users)), len(np.unique(inter.items)), len(inter))
        bad = [f"{label} {got:,} (published {want:,})"
               for label, want, got in zip(("users", "items", "interactions"), self.known.counts, found)
               if want is not None and want != got]
        if bad:
            raise ValueError(
                f"{type(self).__name__}({self.name!r}): {self._file} has {', '.join(bad)} per LRURec's Table 2: "
                "it is not the file LRURec published. Delete it and fetch it again, or pass path= to use it anyway."
            )
