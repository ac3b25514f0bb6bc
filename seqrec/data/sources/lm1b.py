"""The One Billion Word benchmark (LM1B) as a text source: find, download, extract and read its shards.

``LM1B``: the benchmark of Chelba et al. (2013), official archive ``LM1B_URL`` (statmt.org,
1-billion-word-language-modeling-benchmark-r13output.tar.gz, about 1.7 GB). Its layout::

    1-billion-word-language-modeling-benchmark-r13output/
      training-monolingual.tokenized.shuffled/news.en-000NN-of-00100       (NN = 01..99: training)
      heldout-monolingual.tokenized.shuffled/news.en.heldout-000NN-of-00050 (00..49: held out)

one tokenised sentence per line (tokens separated by spaces). ``path`` may be that archive's folder (or
anything above it), any directory holding such shards (searched recursively, ``.gz`` allowed), or one
single shard file. Splits:
- directory: train = the training shards (``train_shards`` caps how many, in name order), test = held-out
  shard ``test_shard`` (0, the standard test set), validation = held-out shard ``valid_shard`` (1);
- one file (e.g. the held-out shard alone): its sentences in file order, the first
  ``single_file_split[0]`` fraction for training, the next ``single_file_split[1]`` for validation, the
  rest for testing (no shuffling: the shards are already shuffled sentence by sentence).
Without ``path`` the archive is looked for in (and downloaded to) ``<cache>/raw/lm1b/`` and extracted
there; when that fails the error says where to get it and where to put it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path

from seqrec.data.array_cache import resolve_cache_dir
from seqrec.data.download import DownloadError, fetch, sha256_of
from seqrec.data.text import read_sentences

log = logging.getLogger(__name__)

LM1B_URL = "http://www.statmt.org/lm-benchmark/1-billion-word-language-modeling-benchmark-r13output.tar.gz"
LM1B_ARCHIVE = "1-billion-word-language-modeling-benchmark-r13output.tar.gz"
LM1B_FOLDER = "1-billion-word-language-modeling-benchmark-r13output"
TRAIN_SHARD = re.compile(r"^news\.en-(\d{5})-of-00100(\.gz)?$")
HELDOUT_SHARD = re.compile(r"^news\.en\.heldout-(\d{5})-of-00050(\.gz)?$")
SPLITS = ("train", "valid", "test")
_BIG_FILE = 64 << 20  # files above this are fingerprinted by size + head/tail hashes, not a full sha256


def _file_fingerprint(path: Path) -> str:
    """sha256 of a small file; for a big one sha256 of (size, first and last MiB) to stay fast."""
    size = path.stat().st_size
    if size <= _BIG_FILE:
        return sha256_of(path)
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(-(1 << 20), os.SEEK_END)
        digest.update(handle.read(1 << 20))
    return "sizehead:" + digest.hexdigest()


class LM1B:
    """Finds (or downloads) One Billion Word shards and yields each split's sentences (module docstring).

    Args:
        path: the extracted archive (or a directory above it), any directory of shards, or one shard file.
            None: ``<cache>/raw/lm1b/`` (downloaded there when ``download``).
        train_shards: read at most this many training shards (None: all 99).
        valid_shard / test_shard: held-out shard numbers used for validation and testing (directory mode).
        single_file_split: (train, valid) fractions of a single file's sentences, in file order.
        download: try the official archive when nothing is found locally.
        cache_dir: cache root (default ``$SEQREC_CACHE``).
    """

    name = "lm1b"

    def __init__(
        self,
        path: str | None = None,
        train_shards: int | None = None,
        valid_shard: int = 1,
        test_shard: int = 0,
        single_file_split: tuple[float, float] = (0.8, 0.1),
        download: bool = True,
        cache_dir: str | None = None,
    ) -> None:
        train_fraction, valid_fraction = single_file_split
        if not (0 < train_fraction and 0 <= valid_fraction and train_fraction + valid_fraction < 1):
            raise ValueError(
                f"single_file_split=(train, valid) fractions must be > 0, >= 0 and sum below 1 (the rest is the test "
                f"part), got {single_file_split}"
            )
        if train_shards is not None and train_shards < 1:
            raise ValueError(f"train_shards must be None (all) or >= 1, got {train_shards}")
        if valid_shard == test_shard:
            raise ValueError(f"valid_shard and test_shard must differ, both are {test_shard}")
        self.path = Path(path).expanduser() if path is not None else None
        self.train_shards, self.valid_shard, self.test_shard = train_shards, valid_shard, test_shard
        self.single_file_split = (float(train_fraction), float(valid_fraction))
        self.download, self.cache_dir = download, cache_dir
        self.files: dict[str, list[Path]] = {}
        self.single_file: Path | None = None

    # --- locating files ---------------------------------------------------------------------------
    def raw_dir(self) -> Path:
        """``<cache>/raw/lm1b``: where the archive is downloaded and extracted."""
        return resolve_cache_dir(self.cache_dir) / "raw" / self.name

    def _where_to_get_it(self) -> str:
        return (
            f"Get the One Billion Word benchmark from {LM1B_URL} (about 1.7 GB) and either place "
            f"{LM1B_ARCHIVE} in {self.raw_dir()} (it is extracted there), or extract it anywhere and pass "
            f"path=<the extracted {LM1B_FOLDER} folder or any directory of its shards>, or pass path=<one "
            "shard file> (e.g. heldout-monolingual.tokenized.shuffled/news.en.heldout-00000-of-00050) to split "
            "that file's sentences into train/valid/test."
        )

    def _scan(self, directory: Path) -> bool:
        """Use the shards under ``directory``; False when it holds no training shard."""
        train, heldout = {}, {}
        for found in sorted(directory.rglob("news.en*")):
            if not found.is_file():
                continue
            if match := TRAIN_SHARD.match(found.name):
                train.setdefault(int(match.group(1)), found)
            elif match := HELDOUT_SHARD.match(found.name):
                heldout.setdefault(int(match.group(1)), found)
        if not train:
            if heldout:
                raise FileNotFoundError(
                    f"lm1b: {directory} holds held-out shards ({len(heldout)}) but no training shard "
                    "(news.en-000NN-of-00100). Pass path=<one held-out shard file> to split that file into "
                    f"train/valid/test, or add the training shards. {self._where_to_get_it()}"
                )
            return False
        missing = [n for n in (self.valid_shard, self.test_shard) if n not in heldout]
        if missing:
            raise FileNotFoundError(
                f"lm1b: {directory} has {len(train)} training shards but not the held-out shard(s) {missing} "
                f"(news.en.heldout-000NN-of-00050) needed for validation (valid_shard={self.valid_shard}) and "
                f"testing (test_shard={self.test_shard}). {self._where_to_get_it()}"
            )
        numbers = sorted(train)[: self.train_shards]
        self.files = {
            "train": [train[n] for n in numbers],
            "valid": [heldout[self.valid_shard]],
            "test": [heldout[self.test_shard]],
        }
        log.info("lm1b: %d training shards from %s", len(numbers), directory)
        return True

    def _extract(self, archive: Path) -> Path:
        """Extract the archive into ``raw_dir`` atomically (temp folder, then rename); the folder."""
        target = self.raw_dir() / LM1B_FOLDER
        if target.is_dir():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=".lm1b-extract-", dir=self.raw_dir()))
        try:
            log.info("lm1b: extracting %s (several GB) into %s", archive, target)
            try:
                with tarfile.open(archive) as tar:
                    try:
                        tar.extractall(tmp, filter="data")
                    except TypeError:  # Python without extraction filters
                        tar.extractall(tmp)  # noqa: S202 (the archive's sha256 is recorded on first download)
            except (tarfile.TarError, EOFError, zlib.error) as error:
                reason = " ".join(str(error).split())
                raise ValueError(f"{archive} is corrupt or truncated ({reason}); delete it and fetch it again.") from None
            inner = tmp / LM1B_FOLDER
            if not inner.is_dir():
                raise ValueError(f"{archive} does not contain {LM1B_FOLDER}/; it is not the LM1B archive. Delete it.")
            os.replace(inner, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target

    def prepare(self) -> None:
        """Locate the shards: ``path`` (file or directory), else the cache, else the official archive."""
        if self.files:
            return
        if self.path is not None:
            if self.path.is_file():
                self.single_file = self.path
                self.files = {split: [self.path] for split in SPLITS}
                return
            if not self.path.is_dir():
                raise FileNotFoundError(f"lm1b: path={self.path} does not exist. {self._where_to_get_it()}")
            if not self._scan(self.path):
                raise FileNotFoundError(
                    f"lm1b: no LM1B shard (news.en-000NN-of-00100, news.en.heldout-000NN-of-00050) under "
                    f"path={self.path}. {self._where_to_get_it()}"
                )
            return
        raw = self.raw_dir()
        raw.mkdir(parents=True, exist_ok=True)
        if (raw / LM1B_FOLDER).is_dir() and self._scan(raw / LM1B_FOLDER):
            return
        archive = raw / LM1B_ARCHIVE
        if not archive.is_file() and not self.download:
            raise FileNotFoundError(f"lm1b: nothing in {raw} and download=False. {self._where_to_get_it()}")
        try:
            fetch(LM1B_URL, archive)  # no published checksum: the first download's sha256 is recorded
        except DownloadError as error:
            raise DownloadError(f"lm1b: could not download the benchmark ({error}). {self._where_to_get_it()}") from error
        if not self._scan(self._extract(archive)):
            raise FileNotFoundError(f"lm1b: the extracted archive in {raw} has no training shard. {self._where_to_get_it()}")

    def fingerprint(self) -> str:
        """Identity of the files and split options, for cache keys."""
        self.prepare()
        parts = [self.name, f"single={self.single_file is not None}", f"split={self.single_file_split}"]
        for split in SPLITS:
            parts += [f"{split}:{p.name}={_file_fingerprint(p)}" for p in self.files[split]]
        return "|".join(parts)

    def describe(self) -> str:
        """One line for logs."""
        if self.single_file is not None:
            return f"lm1b (one file {self.single_file}, split {self.single_file_split} by sentence order)"
        return f"lm1b ({len(self.files.get('train', []))} training shards)"

    def sentences(self, split: str) -> list[str]:
        """The split's sentences, in file order."""
        self.prepare()
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if self.single_file is not None:
            lines = read_sentences(self.single_file)
            n_train = int(len(lines) * self.single_file_split[0])
            n_valid = int(len(lines) * self.single_file_split[1])
            bounds = {"train": (0, n_train), "valid": (n_train, n_train + n_valid), "test": (n_train + n_valid, len(lines))}
            lo, hi = bounds[split]
            return lines[lo:hi]
        return [line for path in self.files[split] for line in read_sentences(path)]
