"""XLong: Alibaba's lifelong user-behaviour corpora (Ren et al., SIGIR 2019, HPMN), as LRURec reads them.

The dataset comes as two tab-separated corpora, ``train_corpus_total_dual.txt`` and
``test_corpus_total_dual.txt``; each line is one sample::

    <index> \\t <user> \\t <item,item,...,item> \\t <target item> [\\t <negative items> ...]

(the history is comma-separated in time order; the target is the next item; later columns hold
negatives and are ignored here). LRURec (``datasets/xlong.py``) concatenates train then test, makes
each *line* one user (numbered by row, 0-based across both files) and appends the target to the
history; so does this source. Times are positions within the line (no timestamps exist). LRURec then
drops consecutive repeats and keeps items ≥ 5 then users ≥ 5: that is ``preprocess``'s job.

There is no public download URL (LRURec's README: "XLong must be downloaded separately"); place both
files (optionally gzipped) in ``root`` or in ``<cache>/raw/xlong/``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seqrec.data.array_cache import resolve_cache_dir
from seqrec.data.download import sha256_of
from seqrec.data.interactions import Interactions, Source
from seqrec.data.text import read_maybe_gzip

log = logging.getLogger(__name__)

XLONG_FILES = ("train_corpus_total_dual.txt", "test_corpus_total_dual.txt")
XLONG_HOWTO = (
    "XLong has no public download URL (LRURec: 'XLong must be downloaded separately'). It is the "
    "Alibaba dataset of 'Lifelong Sequential Modeling with Personalized Memorization for User Response "
    "Prediction' (Ren et al., SIGIR 2019; github alimamarankgroup/HPMN); obtain "
    f"{XLONG_FILES[0]} and {XLONG_FILES[1]} from its authors"
)


def _int_list(text: str, where: str, line: int, what: str) -> np.ndarray:
    """Comma-separated integers → int64 array; ValueError naming the line when one is not an integer."""
    text = text.strip()
    if not text:
        return np.zeros(0, dtype=np.int64)
    expected = text.count(",") + 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            values = np.fromstring(text, dtype=np.int64, sep=",")
    except (ValueError, DeprecationWarning):
        values = None
    if values is None or len(values) != expected:
        bad = next((t for t in text.split(",") if not t.strip().lstrip("+-").isdigit()), text[:50])
        raise ValueError(
            f"{where}, line {line}: {what} must be comma-separated integer item ids, found {bad!r}. "
            f"Fix or remove the line, or fetch the file again."
        )
    return values


def parse_xlong_corpus(data: bytes, where: str = "<data>") -> list[np.ndarray]:
    """One int64 array per line: the history items followed by the target item(s)."""
    sequences = []
    text = data.decode("latin-1")
    for n, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 4:
            raise ValueError(
                f"{where}, line {n}: expected at least 4 tab-separated fields (index, user, comma-separated "
                f"history, target item[, negatives]), found {len(fields)}: {line[:200]!r}."
            )
        history = _int_list(fields[2], where, n, "the history (field 3)")
        target = _int_list(fields[3], where, n, "the target (field 4)")
        if len(target) == 0:
            raise ValueError(f"{where}, line {n}: the target item (field 4) is empty.")
        sequences.append(np.concatenate((history, target)))
    return sequences


class XLong(Source):
    """XLong from its two local corpora; each line becomes one user (LRURec's construction)."""

    name = "xlong"

    def __init__(self, root: str | None = None, cache_dir: str | None = None, files: Sequence[str] = XLONG_FILES) -> None:
        self.root = Path(root).expanduser() if root is not None else None
        self.cache_dir = cache_dir
        self.files = tuple(files)
        self._paths: list[Path] | None = None
        self._checksums: dict[str, str] = {}

    def _directory(self) -> Path:
        return self.root if self.root is not None else resolve_cache_dir(self.cache_dir) / "raw" / "xlong"

    def describe(self) -> str:
        """One line for logs."""
        return f"xlong ({self._directory()})"

    def prepare(self) -> None:
        """Locate both corpora (plain or ``.gz``) and hash them; FileNotFoundError says where to get them."""
        if self._paths is not None:
            return
        directory = self._directory()
        paths, missing = [], []
        for filename in self.files:
            found = next((p for p in (directory / filename, directory / (filename + ".gz")) if p.is_file()), None)
            if found is None:
                missing.append(filename)
            else:
                paths.append(found)
        if missing:
            raise FileNotFoundError(
                f"xlong: missing {missing} in {directory}. {XLONG_HOWTO}, and place them (plain or .gz) in "
                f"{directory}" + (" or pass root=<their directory>." if self.root is None else ".")
            )
        self._paths = paths
        self._checksums = {p.name: sha256_of(p) for p in paths}
        log.info("xlong: using %s", ", ".join(str(p) for p in paths))

    def fingerprint(self) -> str:
        """``xlong:rows-as-users:<file>=<sha256>,...``."""
        self.prepare()
        sums = ",".join(f"{name}={digest}" for name, digest in self._checksums.items())
        return f"xlong:rows-as-users:{sums}"

    def load(self) -> Interactions:
        """Concatenate train then test lines; user = row number, times = position within the row."""
        self.prepare()
        assert self._paths is not None
        sequences: list[np.ndarray] = []
        for path in self._paths:
            sequences.extend(parse_xlong_corpus(read_maybe_gzip(path), where=str(path)))
        if not sequences:
            raise ValueError(f"xlong: no samples in {[str(p) for p in self._paths]}; expected one line per sample.")
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        items = np.concatenate(sequences)
        users = np.repeat(np.arange(len(sequences), dtype=np.int64), lengths)
        starts = np.cumsum(lengths) - lengths
        times = np.arange(len(items), dtype=np.int64) - np.repeat(starts, lengths)
        log.info("xlong: %d rows (users), %d interactions, %d distinct items",
                 len(sequences), len(items), len(np.unique(items)))
        return Interactions(users=users, items=items, times=times)
