"""Item-feature tables aligned with remapped item ids: token, token-sequence and float features.

A feature table has one row per item id of a ``Sequences`` catalogue: row ``i`` describes item ``i``
(raw id ``sequences.item_ids[i]``) and row 0, the padding id, is all zeros. Three kinds:

- ``token`` (brand, a year read as a category): int64 ``(N + 1,)``; vocabulary ids ``0`` = padding
  (row 0 only), ``1`` = unknown (the item has no value), ``2..`` = the values seen on catalogue items,
  in sorted order;
- ``token_seq`` (genres, title words, categories): int64 ``(N + 1, T)``, left-aligned, 0-padded; the
  same vocabulary layout. A string value is split on whitespace (title words, RecBole's ``token_seq``
  convention); a list keeps its elements in order (duplicates kept). An item without a value gets the
  single token ``[1]`` (unknown, a learnable embedding, like RecBole's token 0; None, NaN and blank
  strings count as missing); a value that is an empty list gets no token (it pools to the zero vector). ``T`` is the longest list, capped at
  ``max_tokens`` (longer lists keep their first ``max_tokens`` tokens);
- ``float`` (price, year, sales rank): float32 ``(N + 1,)``, min-max normalised over the catalogue's
  known values, ``(v - min) / (max - min)`` (0 when max == min); an item without a value (missing,
  None, NaN, blank or not a number) gets the mean of the normalised known values, as RecBole fills a float
  field's NaN with the column mean.

Where the raw values come from is an ``ItemFeatureSource`` (``class_path`` in YAML, the datamodule's
``features`` option): the data source's own ``Interactions.item_features`` (MovieLens: title, year,
genres), a MovieLens-style item TSV (LRURec's ``ml-1m_items.tsv``), S3Rec's ``item2attributes.json``
or the Amazon product metadata (brand, categories, price, salesRank). The built tables are cached on
disk (``<cache>/features/``), keyed by the raw feature files, the catalogue and the options.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import logging
import math
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from seqrec.data.download import DownloadError, fetch, sha256_of
from seqrec.data.sequences import Sequences
from seqrec.data.sources.base import Source, resolve_cache_dir
from seqrec.data.sources.movielens import split_title_year

log = logging.getLogger(__name__)

FeatureKind = Literal["token", "token_seq", "float"]
KINDS = ("token", "token_seq", "float")
PAD, UNKNOWN = 0, 1  # reserved vocabulary ids of token and token_seq features
_FORMAT_VERSION = 1


# ---------------------------------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------------------------------


@dataclass
class ItemFeatures:
    """Feature tables of one catalogue, in a fixed feature order.

    ``tables[name]``: ``(N + 1,)`` int64 (token), ``(N + 1, T)`` int64 (token_seq) or ``(N + 1,)``
    float32 (float); row 0 is the padding item and is zero. ``vocabularies[name][j]`` is the string of
    token id ``j`` (``""`` for padding, ``"[unknown]"`` for 1); float features have an empty vocabulary
    and ``float_stats[name] = (min, max, fill)`` (min and max in raw units, the fill normalised);
    ``known[name]`` is the fraction of catalogue items that had a value.
    """

    names: list[str]
    kinds: list[str]
    tables: dict[str, np.ndarray]
    vocabularies: dict[str, np.ndarray] = field(default_factory=dict)
    float_stats: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    known: dict[str, float] = field(default_factory=dict)

    @property
    def num_items(self) -> int:
        """Catalogue size N (tables have N + 1 rows)."""
        return len(next(iter(self.tables.values()))) - 1 if self.tables else 0

    def spec(self) -> list[dict[str, Any]]:
        """Plain-dict description a model is built from: name, kind, vocab_size (0 for float), max_tokens."""
        out = []
        for name, kind in zip(self.names, self.kinds):
            table = self.tables[name]
            out.append({
                "name": name,
                "kind": kind,
                "vocab_size": 0 if kind == "float" else len(self.vocabularies[name]),
                "max_tokens": int(table.shape[1]) if kind == "token_seq" else 1,
            })
        return out

    def tensors(self) -> dict[str, torch.Tensor]:
        """The tables as torch tensors (int64 or float32), keyed by feature name."""
        return {name: torch.from_numpy(np.ascontiguousarray(self.tables[name])) for name in self.names}

    # --- cache --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write all tables to one ``.npz`` atomically (temp file, then ``os.replace``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {
            "meta": np.array(json.dumps({
                "version": _FORMAT_VERSION, "names": self.names, "kinds": self.kinds,
                "float_stats": {k: list(v) for k, v in self.float_stats.items()}, "known": self.known,
            }))
        }
        for i, name in enumerate(self.names):
            arrays[f"table_{i}"] = self.tables[name]
            if name in self.vocabularies:
                arrays[f"vocab_{i}"] = self.vocabularies[name].astype(str)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path) -> ItemFeatures:
        """Read a file written by ``save``; ValueError when it is unreadable or of another format."""
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                if meta.get("version") != _FORMAT_VERSION:
                    raise ValueError(f"format {meta.get('version')}, need {_FORMAT_VERSION}")
                names, kinds = meta["names"], meta["kinds"]
                tables = {name: data[f"table_{i}"] for i, name in enumerate(names)}
                vocabularies = {name: data[f"vocab_{i}"] for i, name in enumerate(names) if f"vocab_{i}" in data}
        except (OSError, KeyError, ValueError, json.JSONDecodeError) as error:
            raise ValueError(f"item-feature cache {path} is unreadable ({error})") from error
        stats = {k: tuple(v) for k, v in meta["float_stats"].items()}
        return cls(names=names, kinds=kinds, tables=tables, vocabularies=vocabularies, float_stats=stats,
                   known=meta.get("known", {}))


def _is_missing(value: Any) -> bool:
    """None, NaN and blank strings count as missing (an empty list does not: it is a value with no tokens)."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str) and not value.strip())


def _tokens(value: Any) -> list[str]:
    """A token_seq value as a list of strings: strings split on whitespace, iterables kept in order."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, (list, tuple, np.ndarray)):
        return [str(v) for v in value]
    return [str(value)]


def _as_float(value: Any) -> float | None:
    if _is_missing(value):
        return None
    try:
        number = float(str(value).replace(",", "").lstrip("$")) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def build_item_features(
    raw: Mapping[str, Mapping[str, Any]],
    kinds: Mapping[str, str],
    item_ids: np.ndarray,
    max_tokens: int | None = None,
) -> ItemFeatures:
    """Tables for ``kinds`` (name → kind, in channel order) from raw values keyed by raw item id.

    ``raw[name][raw_item_id]`` is the value of feature ``name`` for that item (ids compared as
    strings); ``item_ids[i]`` is the raw id of remapped item ``i`` (``item_ids[0]`` = padding). The
    vocabularies are built from the catalogue's items only. See the module docstring for the
    unknown/missing rules.
    """
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be None or >= 1, got {max_tokens}")
    ids = [str(i) for i in item_ids[1:]]
    n = len(ids)
    names, kind_list, tables, vocabularies, stats, known_share = [], [], {}, {}, {}, {}
    for name, kind in kinds.items():
        if kind not in KINDS:
            raise ValueError(f"feature {name!r} has kind {kind!r}; expected one of {list(KINDS)}")
        if name not in raw:
            raise ValueError(
                f"feature {name!r} is not provided by the feature source; it provides {sorted(raw)}. "
                "Fix the names in `kinds`."
            )
        by_id = {str(k): v for k, v in raw[name].items()}
        values = [by_id.get(i) for i in ids]
        names.append(name)
        kind_list.append(kind)
        known_share[name] = sum(not _is_missing(v) for v in values) / n if n else 0.0
        if n and known_share[name] == 0.0:
            raise ValueError(
                f"feature {name!r}: none of the {n} catalogue items has a value; the feature source's item ids "
                f"({_sample_keys(by_id)}) do not match the data's ({ids[:3]}...). Check that both use the same ids "
                "(an id map may be needed)."
            )
        if kind == "float":
            numbers = np.array([np.nan if (x := _as_float(v)) is None else x for v in values], dtype=np.float64)
            known = ~np.isnan(numbers)
            low = float(numbers[known].min()) if known.any() else 0.0
            high = float(numbers[known].max()) if known.any() else 0.0
            scaled = (numbers - low) / (high - low) if high > low else np.where(known, 0.0, np.nan)
            fill = float(np.mean(scaled[known])) if known.any() else 0.0
            table = np.zeros(n + 1, dtype=np.float32)
            table[1:] = np.where(known, scaled, fill)
            tables[name], stats[name] = table, (low, high, fill)
            continue
        token_lists: list[list[str] | None] = []
        for v in values:
            if _is_missing(v):
                token_lists.append(None)
            elif kind == "token":
                token_lists.append([str(v)])
            else:
                token_lists.append(_tokens(v))
        vocabulary = sorted({t for tokens in token_lists if tokens for t in tokens})
        index = {t: j + 2 for j, t in enumerate(vocabulary)}
        vocabularies[name] = np.array(["", "[unknown]", *vocabulary], dtype=str)
        if kind == "token":
            table = np.zeros(n + 1, dtype=np.int64)
            table[1:] = [UNKNOWN if t is None else index[t[0]] for t in token_lists]
        else:
            width = max((len(t) for t in token_lists if t is not None), default=1)
            width = max(1, min(width, max_tokens) if max_tokens is not None else width)
            table = np.zeros((n + 1, width), dtype=np.int64)
            for row, tokens in enumerate(token_lists, start=1):
                if tokens is None:
                    table[row, 0] = UNKNOWN
                elif tokens:
                    coded = [index[t] for t in tokens[:width]]
                    table[row, : len(coded)] = coded
        tables[name] = table
    features = ItemFeatures(names, kind_list, tables, vocabularies, stats, known_share)
    log.info("item features: %s", ", ".join(f"{k} ({kind}, {known_share[k]:.1%} known)"
                                             for k, kind in zip(names, kind_list)))
    return features


def _sample_keys(values: Mapping[str, Any]) -> str:
    keys = list(values)[:3]
    return f"{keys}..." if keys else "none"


# ---------------------------------------------------------------------------------------------------
# Where raw values come from
# ---------------------------------------------------------------------------------------------------


class ItemFeatureSource(ABC):
    """Raw per-item values of some features, keyed by the data source's raw item ids.

    ``kinds`` names the features to build and their kind, in the order the model stacks them;
    ``max_tokens`` caps token_seq widths. Sub-classes implement ``raw`` and ``fingerprint``.
    """

    def __init__(self, kinds: dict[str, FeatureKind], max_tokens: int | None = None) -> None:
        if not kinds:
            raise ValueError("kinds must name at least one feature (name: token | token_seq | float)")
        self.kinds = dict(kinds)
        self.max_tokens = max_tokens

    @abstractmethod
    def raw(self, source: Source) -> dict[str, dict[str, Any]]:
        """``{feature: {raw item id (str): value}}`` for (at least) the features in ``kinds``."""

    @abstractmethod
    def fingerprint(self, source: Source) -> str:
        """Identity of the raw feature data (changes whenever ``raw`` could)."""

    def key(self, source: Source) -> str:
        """Cache identity: fingerprint, kinds and options."""
        return f"{type(self).__name__}|{self.fingerprint(source)}|{json.dumps(self.kinds)}|{self.max_tokens}"

    def build(self, source: Source, item_ids: np.ndarray) -> ItemFeatures:
        """The aligned tables for the catalogue ``item_ids``."""
        return build_item_features(self.raw(source), self.kinds, item_ids, self.max_tokens)


def load_item_features(
    features: ItemFeatureSource, source: Source, sequences: Sequences, cache_dir: str | Path | None
) -> ItemFeatures:
    """The tables from the cache, or built and cached atomically (keyed by features, catalogue and options)."""
    catalogue = hashlib.sha256("\n".join(sequences.item_ids.astype(str).tolist()).encode()).hexdigest()
    key = hashlib.sha256(f"{features.key(source)}|{catalogue}|{_FORMAT_VERSION}".encode()).hexdigest()[:20]
    path = resolve_cache_dir(cache_dir) / "features" / f"{source.name}-{key}.npz"
    if path.exists():
        try:
            cached = ItemFeatures.load(path)
            if cached.num_items == sequences.num_items and cached.names == list(features.kinds):
                return cached
            log.warning("item-feature cache %s does not match the catalogue; rebuilding it", path)
        except ValueError as error:
            log.warning("%s; rebuilding it", error)
    built = features.build(source, sequences.item_ids)
    built.save(path)
    return built


MOVIELENS_KINDS: dict[str, FeatureKind] = {"genres": "token_seq", "title": "token_seq", "year": "float"}


class SourceItemFeatures(ItemFeatureSource):
    """The features the data source itself parses (``Interactions.item_features``).

    MovieLens-100k/1M give ``title`` (the title without its year), ``year`` and ``genres``, from the
    same raw files as the interactions (RecBole's ml-100k ``movie_title``, ``release_year``, ``class``).
    Default kinds: genres and title words as token sequences, year as a float (RecBole loads
    ``release_year`` as a token: pass ``year: token`` for that).
    """

    def __init__(self, kinds: dict[str, FeatureKind] | None = None, max_tokens: int | None = None) -> None:
        super().__init__(dict(MOVIELENS_KINDS if kinds is None else kinds), max_tokens)

    def raw(self, source: Source) -> dict[str, dict[str, Any]]:
        """``source.load().item_features`` with string keys."""
        source.prepare()
        found = source.load().item_features
        if not found:
            raise ValueError(
                f"{source.describe()} provides no item features; use a feature source that reads them from "
                "their own file (MovieLensItemTable, S3RecAttributes, AmazonMetadata)"
            )
        return {name: {str(k): v for k, v in values.items()} for name, values in found.items()}

    def fingerprint(self, source: Source) -> str:
        """The data source's fingerprint (its raw files hold the features)."""
        return source.fingerprint()


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8")


def _require_file(path: Path, what: str, fix: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{what}: expected a file at {path}, found {'a directory' if path.exists() else 'nothing'}. {fix}")
    return path


class MovieLensItemTable(ItemFeatureSource):
    """A MovieLens item TSV with a header: an id column, ``title`` ("Name (Year)") and ``genres`` ("A|B").

    For LRURec's ML-1M (``lrurec/ml-1m_items.tsv``: ``item movie_id title genres``, where ``item`` is
    the id used in LRURec's ``ml-1m.txt``). Gives ``title`` (words, year removed), ``year`` (from the
    title) and ``genres``, as the MovieLens sources do.
    """

    def __init__(
        self,
        path: str,
        id_column: str = "item",
        kinds: dict[str, FeatureKind] | None = None,
        max_tokens: int | None = None,
    ) -> None:
        super().__init__(dict(MOVIELENS_KINDS if kinds is None else kinds), max_tokens)
        self.path = Path(path).expanduser()
        self.id_column = id_column

    def raw(self, source: Source) -> dict[str, dict[str, Any]]:
        """Parse the TSV."""
        path = _require_file(self.path, "MovieLensItemTable", "Pass path= to a TSV with columns "
                             f"{self.id_column}, title, genres.")
        lines = _read_text(path).splitlines()
        header = lines[0].split("\t") if lines else []
        missing = [c for c in (self.id_column, "title", "genres") if c not in header]
        if missing:
            raise ValueError(f"{path}, line 1: expected a header with columns {self.id_column}, title, genres; "
                             f"found {header} (missing {missing}).")
        col = {c: header.index(c) for c in header}
        titles, years, genres = {}, {}, {}
        for n, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != len(header):
                raise ValueError(f"{path}, line {n}: expected {len(header)} tab-separated fields, found {len(fields)}: {line[:200]!r}.")
            item = fields[col[self.id_column]].strip()
            title, year = split_title_year(fields[col["title"]])
            titles[item] = title
            if year is not None:
                years[item] = year
            genres[item] = [g for g in fields[col["genres"]].split("|") if g]
        return {"title": titles, "year": years, "genres": genres}

    def fingerprint(self, source: Source) -> str:
        """sha256 of the TSV."""
        return sha256_of(_require_file(self.path, "MovieLensItemTable", "Pass path= to an existing TSV."))


S3REC_ATTRIBUTES_URL = "https://raw.githubusercontent.com/RUCAIBox/CIKM2020-S3Rec/master/data/{name}_item2attributes.json"


class S3RecAttributes(ItemFeatureSource):
    """S3Rec's ``<Name>_item2attributes.json``: ``{"item id": [attribute ids]}`` as one token_seq feature.

    For Beauty the attributes mix brand and categories (637 ids) and the item ids are those of S3Rec's
    ``Beauty.txt`` (``S3RecText("beauty")``). ``path=None`` downloads
    ``github.com/RUCAIBox/CIKM2020-S3Rec/data/<name>_item2attributes.json`` into ``<cache>/raw/s3rec/``.
    """

    def __init__(
        self,
        path: str | None = None,
        name: str = "Beauty",
        feature: str = "attributes",
        max_tokens: int | None = None,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__({feature: "token_seq"}, max_tokens)
        self.path = Path(path).expanduser() if path is not None else None
        self.name, self.feature, self.cache_dir = name, feature, cache_dir

    def _file(self) -> Path:
        if self.path is not None:
            return _require_file(self.path, "S3RecAttributes", "Pass path= to <Name>_item2attributes.json(.gz).")
        raw = resolve_cache_dir(self.cache_dir) / "raw" / "s3rec"
        filename = f"{self.name}_item2attributes.json"
        for candidate in (raw / filename, raw / (filename + ".gz")):
            if candidate.is_file():
                return candidate
        url = S3REC_ATTRIBUTES_URL.format(name=self.name)
        try:
            return fetch(url, raw / filename)
        except DownloadError as e:
            raise DownloadError(f"{e} Alternatively pass path= to a local copy of {filename}.") from e

    def raw(self, source: Source) -> dict[str, dict[str, Any]]:
        """Parse the JSON object."""
        path = self._file()
        try:
            table = json.loads(_read_text(path))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: expected a JSON object {{item id: [attribute ids]}}, parse failed: {error}") from error
        if not isinstance(table, dict):
            raise ValueError(f"{path}: expected a JSON object {{item id: [attribute ids]}}, found {type(table).__name__}")
        return {self.feature: {str(k): [str(a) for a in v] for k, v in table.items()}}

    def fingerprint(self, source: Source) -> str:
        """sha256 of the JSON file."""
        return sha256_of(self._file())


# ---------------------------------------------------------------------------------------------------
# Amazon product metadata (McAuley et al.): brand, categories, price, salesRank
# ---------------------------------------------------------------------------------------------------

AMAZON_METADATA_URL = "http://snap.stanford.edu/data/amazon/productGraph/categoryFiles/meta_{category}.json.gz"
AMAZON_HELP = (
    "The Amazon product metadata (McAuley et al. 2015, 'Image-based recommendations on styles and substitutes') "
    "is published per category as meta_<Category>.json.gz at "
    "http://snap.stanford.edu/data/amazon/productGraph/categoryFiles/ (Beauty: meta_Beauty.json.gz; access "
    "may require the request form at https://jmcauley.ucsd.edu/data/amazon/). Download it and pass path=."
)
AMAZON_KINDS: dict[str, FeatureKind] = {
    "sales_rank": "float", "categories": "token_seq", "price": "float", "brand": "token",
}


def parse_amazon_metadata(path: str | Path, sales_rank_category: str | None = "Beauty") -> dict[str, dict[str, Any]]:
    """``meta_<Category>.json(.gz)``: one product per line → ``{feature: {asin: value}}``.

    Each line is a Python dict literal (the 2014 release; parsed with ``ast.literal_eval``) or a JSON
    object (the 2018 release) with keys ``asin`` and, when known, ``brand`` (str), ``categories`` (list
    of category paths, each a list of str; flattened, first occurrence kept), ``price`` (float) and
    ``salesRank`` (``{category: rank}``: the rank in ``sales_rank_category`` when present, else the
    first listed). Absent keys leave the product without that value.
    """
    path = Path(path)
    with open(path, "rb") as handle:
        opener = gzip.open if handle.read(2) == b"\x1f\x8b" else open
    brand, categories, price, rank = {}, {}, {}, {}
    with opener(path, "rt", encoding="utf-8") as handle:
        for n, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                try:
                    record = ast.literal_eval(line)
                except (ValueError, SyntaxError) as error:
                    raise ValueError(
                        f"{path}, line {n}: expected a Python dict literal or JSON object per line (Amazon metadata "
                        f"format), could not parse it ({error}): {line[:200]!r}"
                    ) from None
            if not isinstance(record, dict) or "asin" not in record:
                raise ValueError(f"{path}, line {n}: expected a dict with an 'asin' key, found {line[:200]!r}")
            asin = str(record["asin"])
            if record.get("brand"):
                brand[asin] = str(record["brand"]).strip()
            if "categories" in record or "category" in record:
                paths = record.get("categories", record.get("category"))
                flat = [c for group in paths for c in (group if isinstance(group, list) else [group])]
                categories[asin] = list(dict.fromkeys(str(c).strip() for c in flat if str(c).strip()))
            if (value := _as_float(record.get("price"))) is not None:
                price[asin] = value
            ranks = record.get("salesRank")
            if isinstance(ranks, dict) and ranks:
                chosen = ranks.get(sales_rank_category) if sales_rank_category in ranks else next(iter(ranks.values()))
                if (value := _as_float(chosen)) is not None:
                    rank[asin] = value
    return {"brand": brand, "categories": categories, "price": price, "sales_rank": rank}


class AmazonMetadata(ItemFeatureSource):
    """Brand, categories, price and sales rank from the Amazon product metadata (MLP4Rec's Beauty features).

    The metadata is keyed by ASIN. When the data source's raw item ids are ASINs nothing else is
    needed; otherwise ``item_map`` names a TSV (no header) of ``source item id<TAB>asin`` lines.
    ``path=None`` looks for ``<cache>/raw/amazon/meta_<category>.json.gz`` and else tries the public
    download location. Default kinds follow MLP4Rec: sales_rank and price floats, categories a token
    sequence, brand a token.
    """

    def __init__(
        self,
        path: str | None = None,
        category: str = "Beauty",
        item_map: str | None = None,
        kinds: dict[str, FeatureKind] | None = None,
        max_tokens: int | None = None,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__(dict(AMAZON_KINDS if kinds is None else kinds), max_tokens)
        self.path = Path(path).expanduser() if path is not None else None
        self.category, self.cache_dir = category, cache_dir
        self.item_map = Path(item_map).expanduser() if item_map is not None else None

    def _file(self) -> Path:
        if self.path is not None:
            if not self.path.is_file():
                raise FileNotFoundError(f"AmazonMetadata: no file at {self.path}. {AMAZON_HELP}")
            return self.path
        dest = resolve_cache_dir(self.cache_dir) / "raw" / "amazon" / f"meta_{self.category}.json.gz"
        if dest.is_file():
            return dest
        try:
            return fetch(AMAZON_METADATA_URL.format(category=self.category), dest)
        except DownloadError as e:
            raise FileNotFoundError(f"AmazonMetadata: could not fetch the metadata ({e}). {AMAZON_HELP}") from e

    def raw(self, source: Source) -> dict[str, dict[str, Any]]:
        """Parse the metadata and re-key it by the source's item ids when ``item_map`` is given."""
        by_asin = parse_amazon_metadata(self._file(), self.category)
        if self.item_map is None:
            return by_asin
        mapping = {}
        text = _read_text(_require_file(self.item_map, "AmazonMetadata item_map", "Pass a TSV of item id<TAB>asin."))
        for n, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                fields = line.split("\t")
                if len(fields) != 2:
                    raise ValueError(f"{self.item_map}, line {n}: expected 'item id<TAB>asin', found {line[:200]!r}")
                mapping[fields[0].strip()] = fields[1].strip()
        return {name: {item: values[asin] for item, asin in mapping.items() if asin in values}
                for name, values in by_asin.items()}

    def fingerprint(self, source: Source) -> str:
        """sha256 of the metadata (and of the id map)."""
        digest = sha256_of(self._file())
        return digest if self.item_map is None else f"{digest}+{sha256_of(self.item_map)}"
