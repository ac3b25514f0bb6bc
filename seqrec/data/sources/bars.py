"""CTR row files in the BARS / FuxiCTR formats (Amazon-Electronics, KuaiVideo, MicroVideo1.7M, TaobaoAd), and DIN text.

BARS (github reczoo/BARS, data on huggingface.co/datasets/reczoo/<name>) ships each dataset as a zip of
csv files with a header; sequence columns hold ids joined by ``^``, oldest first (FuxiCTR pre-pads
them). Columns used here (from the FuxiCTR dataset configs of the BARS benchmark logs):

| dataset | label | user | target item | history | time |
|---|---|---|---|---|---|
| AmazonElectronics_x1 | label | user_id | item_id | item_history (cate_id, cate_history unused) | none |
| KuaiVideo_x1 | is_click | user_id | item_id | pos_items (neg_items unused) | none |
| MicroVideo1.7M_x1 | is_click | user_id | item_id | clicked_items (cate_id, clicked_categories unused) | timestamp |
| TaobaoAd_x1 | clk | userid | adgroup_id | click_sequence (ad-group ids) | time_stamp |

The backbones here use item ids only, so category and multimodal columns are parsed away. Where a format
has no time column, a row's position in its file orders it. None of these sets has a validation file:
``CTRRowsDataModule(bars_mode=...)`` decides (a clean time-ordered tail of train, or BARS' test-as-validation).

Vocabulary (FuxiCTR's rule): item ids seen in **train** (as target or in a history) at least
``min_item_count`` times get ids 1..K in first-seen order; everything else, including items that only
appear in test (all of MicroVideo1.7M's test items, by construction of that split), maps to one OOV id
K+1, so ``num_items = K + 1``. Users are numbered over all files.

``DINText`` reads the DIN-style text layout ``hist_items;hist_cates;target_item;target_cate;label``
(space-separated lists, no user column: every row becomes its own user, so GAUC is undefined there).
"""

from __future__ import annotations

import csv
import hashlib
import logging
import os
import tempfile
import zipfile
import zlib
from array import array
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from seqrec.data.array_cache import load_arrays, resolve_cache_dir, save_arrays
from seqrec.data.ctr_rows import CTRRows, CTRRowSource
from seqrec.data.download import DownloadError, fetch, md5_of, sha256_of

log = logging.getLogger(__name__)

_HF = "https://huggingface.co/datasets/reczoo/{name}/resolve/main/{name}.zip"


@dataclass(frozen=True)
class BARSFormat:
    """Column names and published location of one BARS dataset."""

    label: str
    user: str
    item: str
    history: str
    time: str | None
    md5: dict[str, str] = field(default_factory=dict)  # published md5 of the csv files (reczoo/Datasets READMEs)
    splitter: str = "^"
    url: str | None = None


BARS_FORMATS: dict[str, BARSFormat] = {
    "AmazonElectronics_x1": BARSFormat(
        "label", "user_id", "item_id", "item_history", None,
        {"train.csv": "e9bf80b92985e463db18fdc753d347b5", "test.csv": "57a20e82fe736dd495f2eaf0669bf6d0"},
        url=_HF.format(name="AmazonElectronics_x1"),
    ),
    "KuaiVideo_x1": BARSFormat(
        "is_click", "user_id", "item_id", "pos_items", None,
        {"train.csv": "16f13734411532cc313caf2180bfcd56", "test.csv": "ba26c01caaf6c65c272af11aa451fc7a"},
        url=_HF.format(name="KuaiVideo_x1"),
    ),
    "MicroVideo1.7M_x1": BARSFormat(
        "is_click", "user_id", "item_id", "clicked_items", "timestamp",
        {"train.csv": "936e6612714c887e76226a60829b4e0a", "test.csv": "9417a18304fb62411ac27c26c5e0de56"},
        url=_HF.format(name="MicroVideo1.7M_x1"),
    ),
    "TaobaoAd_x1": BARSFormat(
        "clk", "userid", "adgroup_id", "click_sequence", "time_stamp", {}, url=_HF.format(name="TaobaoAd_x1"),
    ),
}
SPLITS = ("train", "valid", "test")


def _time_value(text: str, where: str) -> float:
    """A numeric timestamp, or an ISO date-time (``2017-05-06 00:00:00``) as POSIX seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(f"{where}: time value {text!r} is neither a number nor an ISO date-time") from None


class _Vocabulary:
    """Item and user codes: items frozen after train (OOV = K + 1), users grow over all files."""

    def __init__(self, min_item_count: int, counts: dict[str, int] | None) -> None:
        self.items: dict[str, int] = {}
        self.users: dict[str, int] = {}
        self.frozen = False
        self.min_item_count, self.counts = min_item_count, counts

    def item(self, token: str) -> int:
        code = self.items.get(token)
        if code is not None:
            return code
        if self.frozen or (self.counts is not None and self.counts.get(token, 0) < self.min_item_count):
            return -1  # OOV, resolved once the vocabulary is frozen
        code = self.items[token] = len(self.items) + 1
        return code

    def user(self, token: str) -> int:
        code = self.users.get(token)
        if code is None:
            code = self.users[token] = len(self.users)
        return code

    @property
    def oov(self) -> int:
        return len(self.items) + 1


def _encode_rows(
    records, fmt_label: str, fmt_user: str | None, fmt_item: str, fmt_history: str, fmt_time: str | None,
    splitter: str | None, vocab: _Vocabulary, where: str,
) -> CTRRows:
    """Encode dict records (csv.DictReader rows) into ``CTRRows`` (OOV items as -1 for now)."""
    users, targets, hist, lengths = array("q"), array("q"), array("q"), array("q")
    labels, times = array("f"), array("d")
    for i, rec in enumerate(records):
        if None in rec or None in rec.values():  # csv.DictReader: extra fields under None, missing ones None
            given = len(rec) - (None in rec) - sum(v is None for v in rec.values()) + len(rec.get(None) or [])
            raise ValueError(
                f"{where}, row {i + 2}: expected {len(rec) - (None in rec)} comma-separated fields, found {given}. "
                "The file is truncated or malformed: fix or remove the row, or fetch the file again."
            )
        try:
            label = float(rec[fmt_label])
            if label not in (0.0, 1.0):
                raise ValueError(f"label {rec[fmt_label]!r} is not 0 or 1")
            seq = rec[fmt_history] or ""
            tokens = [t for t in (seq.split(splitter) if splitter else seq.split()) if t]
            users.append(vocab.user(rec[fmt_user]) if fmt_user else i)
            targets.append(vocab.item(rec[fmt_item]))
            for t in tokens:
                hist.append(vocab.item(t))
            lengths.append(len(tokens))
            labels.append(label)
            times.append(_time_value(rec[fmt_time], where) if fmt_time else float(i))
        except KeyError as error:
            raise ValueError(f"{where}, row {i + 2}: missing column {error}; found columns {sorted(rec)}") from None
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}, row {i + 2}: {error}. The file is not in the expected format.") from None
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(lengths, dtype=np.int64), out=indptr[1:])
    return CTRRows(
        user=np.frombuffer(users, dtype=np.int64).copy(),
        target=np.frombuffer(targets, dtype=np.int64).copy(),
        label=np.frombuffer(labels, dtype=np.float32).copy(),
        hist_indptr=indptr,
        hist_items=np.frombuffer(hist, dtype=np.int64).copy(),
        time=np.frombuffer(times, dtype=np.float64).copy(),
    )


def _resolve_oov(rows: CTRRows, oov: int) -> None:
    rows.target[rows.target < 0] = oov
    rows.hist_items[rows.hist_items < 0] = oov


def _count_items(path: Path, item: str, history: str, splitter: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for rec in csv.DictReader(handle):
            for token in [rec[item], *(t for t in (rec[history] or "").split(splitter) if t)]:
                counts[token] = counts.get(token, 0) + 1
    return counts


def parse_bars_csv(files: dict[str, Path], fmt: BARSFormat, min_item_count: int = 1) -> tuple[dict[str, CTRRows], int]:
    """Parse BARS csv files ``{"train": path, "test": path, ["valid": path]}`` -> (rows per split, num_items)."""
    counts = _count_items(files["train"], fmt.item, fmt.history, fmt.splitter) if min_item_count > 1 else None
    vocab = _Vocabulary(min_item_count, counts)
    out: dict[str, CTRRows] = {}
    for split in SPLITS:
        if split not in files:
            continue
        path = files[split]
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            needed = [c for c in (fmt.label, fmt.user, fmt.item, fmt.history, fmt.time) if c]
            missing = [c for c in needed if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(
                    f"{path}: columns {missing} are missing (header: {reader.fieldnames}); expected a BARS csv "
                    f"with columns {needed}. Is this the right dataset name?"
                )
            out[split] = _encode_rows(reader, fmt.label, fmt.user, fmt.item, fmt.history, fmt.time, fmt.splitter, vocab, str(path))
        if split == "train":
            vocab.frozen = True
    for rows in out.values():
        _resolve_oov(rows, vocab.oov)
    return out, vocab.oov


def parse_din_text(files: dict[str, Path]) -> tuple[dict[str, CTRRows], int]:
    """Parse DIN text files (``hist_items;hist_cates;target_item;target_cate;label``) -> (rows, num_items)."""
    vocab = _Vocabulary(1, None)
    out: dict[str, CTRRows] = {}
    names = ["hist_items", "hist_cates", "target_item", "target_cate", "label"]
    for split in SPLITS:
        if split not in files:
            continue
        path = files[split]
        with open(path, encoding="utf-8") as handle:
            lines = [line.rstrip("\n") for line in handle if line.strip()]
        records = []
        for i, line in enumerate(lines):
            fields = line.split(";")
            if len(fields) != len(names):
                raise ValueError(f"{path}, line {i + 1}: expected {len(names)} ';'-separated fields {names}, found {len(fields)}")
            records.append(dict(zip(names, fields)))
        out[split] = _encode_rows(records, "label", None, "target_item", "hist_items", None, None, vocab, str(path))
        if split == "train":
            vocab.frozen = True
    for rows in out.values():
        _resolve_oov(rows, vocab.oov)
    log.warning("DIN text has no user column: every row is its own user, so GAUC is undefined (NaN)")
    return out, vocab.oov


class BARS(CTRRowSource):
    """A BARS/FuxiCTR CTR dataset (``BARS_FORMATS``): csv files found locally or downloaded.

    Files, in order: ``files`` (split -> path), a ``root`` folder holding ``train.csv`` / ``test.csv``
    (and ``valid.csv`` if present), a cached copy in ``<cache>/raw/bars/<dataset>/``, or the published zip
    (huggingface.co/datasets/reczoo/<dataset>), whose csv files are checked against the published md5.
    Parsed rows are cached as ``.npy`` (keyed by the files' sha256 and ``min_item_count``).
    """

    def __init__(
        self,
        dataset: str,
        root: str | None = None,
        files: dict[str, str] | None = None,
        min_item_count: int = 1,
        cache_dir: str | None = None,
    ) -> None:
        if dataset not in BARS_FORMATS:
            raise ValueError(f"unknown BARS dataset {dataset!r}: known ones are {sorted(BARS_FORMATS)}")
        if min_item_count < 1:
            raise ValueError(f"min_item_count must be >= 1, got {min_item_count}")
        self.name, self.dataset, self.format = dataset, dataset, BARS_FORMATS[dataset]
        self.root = Path(root).expanduser() if root else None
        self.files = {k: Path(v).expanduser() for k, v in (files or {}).items()}
        unknown = set(self.files) - set(SPLITS)
        if unknown:
            raise ValueError(f"files keys must be among {SPLITS}, got {sorted(unknown)}")
        self.min_item_count, self.cache_dir = min_item_count, cache_dir
        self._paths: dict[str, Path] | None = None
        self._sha: dict[str, str] = {}
        self.num_items = 0

    def describe(self) -> str:
        """One line for logs."""
        return f"BARS({self.dataset!r})"

    def _raw_dir(self) -> Path:
        return resolve_cache_dir(self.cache_dir) / "raw" / "bars" / self.dataset

    def _from_folder(self, folder: Path) -> dict[str, Path] | None:
        found = {s: folder / f"{s}.csv" for s in SPLITS if (folder / f"{s}.csv").is_file()}
        return found if {"train", "test"} <= set(found) else None

    def _download(self) -> dict[str, Path]:
        raw = self._raw_dir()
        if self.format.url is None:
            raise FileNotFoundError(f"{self.dataset} has no download location: pass root= or files=")
        try:
            archive = fetch(self.format.url, raw.parent / f"{self.dataset}.zip")
        except DownloadError as error:
            raise DownloadError(f"{error} Alternatively pass root= to a folder holding train.csv and test.csv.") from error
        try:
            return self._extract(archive, raw)
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise ValueError(f"{archive} is corrupt ({error}); delete it and fetch it again.") from None

    def _extract(self, archive: Path, raw: Path) -> dict[str, Path]:
        """The split csv files of the zip, extracted beside it (each through a temporary file)."""
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                base = Path(member).name
                if base in {f"{s}.csv" for s in SPLITS}:
                    raw.mkdir(parents=True, exist_ok=True)
                    fd, name = tempfile.mkstemp(dir=raw, prefix=f".{base}.", suffix=".part")
                    tmp = Path(name)
                    try:
                        with zf.open(member) as src, os.fdopen(fd, "wb") as dst:
                            while chunk := src.read(1 << 24):
                                dst.write(chunk)
                        want = self.format.md5.get(base)
                        if want is not None and md5_of(tmp) != want:
                            raise ValueError(f"{base} in {archive} does not match the published md5 {want}; delete the zip and retry")
                        os.chmod(tmp, 0o644)
                        tmp.replace(raw / base)
                    finally:
                        tmp.unlink(missing_ok=True)
        found = self._from_folder(raw)
        if found is None:
            raise FileNotFoundError(f"{archive} holds no train.csv and test.csv")
        return found

    def prepare(self) -> None:
        """Locate (or download) the csv files and hash them."""
        if self._paths is not None:
            return
        if self.files:
            if not {"train", "test"} <= set(self.files):
                raise ValueError(f"files must name at least 'train' and 'test', got {sorted(self.files)}")
            for split, path in self.files.items():
                if not path.is_file():
                    raise FileNotFoundError(f"{self.dataset}: expected the {split} csv at {path}, found nothing")
            paths = dict(self.files)
        elif self.root is not None:
            paths = self._from_folder(self.root)
            if paths is None:
                raise FileNotFoundError(f"{self.dataset}: expected train.csv and test.csv in {self.root}")
        else:
            paths = self._from_folder(self._raw_dir()) or self._download()
        self._paths = paths
        self._sha = {split: sha256_of(path) for split, path in paths.items()}

    def fingerprint(self) -> str:
        """``BARS:<dataset>:<sha256 per split>:<min_item_count>``."""
        self.prepare()
        files = ",".join(f"{k}={v}" for k, v in sorted(self._sha.items()))
        return f"BARS:{self.dataset}:{files}:{self.min_item_count}"

    def load_rows(self) -> dict[str, CTRRows]:
        """Rows per split from the cache, or parsed from the csv files and cached."""
        key = hashlib.sha256(self.fingerprint().encode()).hexdigest()[:20]
        directory = resolve_cache_dir(self.cache_dir) / "bars" / f"{self.dataset}-{key}"
        if directory.exists():
            try:
                arrays, meta = load_arrays(directory)
                self.num_items = int(meta["num_items"])
                return {s: CTRRows.from_arrays(arrays, f"{s}_") for s in meta["splits"]}
            except (ValueError, KeyError) as error:
                log.warning("%s; parsing the csv files again", error)
        assert self._paths is not None
        rows, self.num_items = parse_bars_csv(self._paths, self.format, self.min_item_count)
        arrays: dict[str, np.ndarray] = {}
        for split, part in rows.items():
            arrays.update(part.arrays(f"{split}_"))
        save_arrays(directory, arrays, {"num_items": self.num_items, "splits": sorted(rows)})
        log.info("%s: %s rows, %d items (incl. OOV)", self.describe(),
                 {s: len(r) for s, r in rows.items()}, self.num_items)
        return rows


class DINText(CTRRowSource):
    """DIN-style text files ``hist_items;hist_cates;target_item;target_cate;label`` (no user column)."""

    def __init__(self, files: dict[str, str], name: str = "din_text") -> None:
        self.name = name
        self.files = {k: Path(v).expanduser() for k, v in files.items()}
        if not {"train", "test"} <= set(self.files):
            raise ValueError(f"files must name at least 'train' and 'test', got {sorted(self.files)}")
        self.num_items = 0

    def prepare(self) -> None:
        """Check the files exist."""
        for split, path in self.files.items():
            if not path.is_file():
                raise FileNotFoundError(f"{self.name}: expected the {split} file at {path}, found nothing")

    def fingerprint(self) -> str:
        """``DINText:<sha256 per split>``."""
        self.prepare()
        return "DINText:" + ",".join(f"{k}={sha256_of(v)}" for k, v in sorted(self.files.items()))

    def load_rows(self) -> dict[str, CTRRows]:
        """Parse the files (small; not cached)."""
        self.prepare()
        rows, self.num_items = parse_din_text(self.files)
        return rows
