"""What every dataset source provides."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from seqrec.data.interactions import Interactions


class Source(ABC):
    """A dataset family: finds or downloads its raw files and parses them into ``Interactions``.

    ``prepare()`` does the I/O that must happen once (download + checksum into the cache);
    ``load()`` parses the prepared files. ``fingerprint()`` is a short string that changes
    whenever what ``load()`` returns could change (file checksums, variant name); the
    preprocessing cache key includes it.
    """

    name: str

    @abstractmethod
    def prepare(self) -> None:
        """Download (or locate) and verify the raw files; idempotent."""

    @abstractmethod
    def load(self) -> Interactions:
        """Parse the prepared raw files into an interactions table."""

    @abstractmethod
    def fingerprint(self) -> str:
        """Identity of the raw data for cache keys (name, variant and checksums)."""

    def describe(self) -> str:
        """One line for logs."""
        return self.name


def resolve_cache_dir(cache_dir: str | Path | None) -> Path:
    """``cache_dir``, else ``$SEQREC_CACHE``, else the user cache dir (``~/.cache/seqrec``)."""
    import os

    import platformdirs

    if cache_dir is not None:
        path = Path(cache_dir).expanduser()
    elif os.environ.get("SEQREC_CACHE"):
        path = Path(os.environ["SEQREC_CACHE"]).expanduser()
    else:
        path = Path(platformdirs.user_cache_dir("seqrec"))
    path.mkdir(parents=True, exist_ok=True)
    return path
