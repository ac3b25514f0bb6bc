"""Readers of item features kept in their own files: a MovieLens item TSV, S3Rec's attributes, Amazon metadata.

Each is an ``ItemFeatureSource`` (``seqrec.data.features``): ``raw(source)`` returns
``{feature: {raw item id: value}}`` and ``fingerprint(source)`` the identity of the file(s) read; the
tables, their vocabularies and the cache are the feature layer's. Files may be gzipped (detected by content).
"""

from __future__ import annotations

import ast
import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from seqrec.data.array_cache import resolve_cache_dir
from seqrec.data.download import DownloadError, fetch, sha256_of
from seqrec.data.features import FeatureKind, ItemFeatureSource, as_float
from seqrec.data.interactions import Source
from seqrec.data.sources.movielens import MOVIELENS_KINDS, split_title_year
from seqrec.data.text import read_maybe_gzip


def _read_text(path: Path) -> str:
    """The UTF-8 text of a (possibly gzipped) file."""
    return read_maybe_gzip(path).decode("utf-8")


def _require_file(path: Path, what: str, fix: str) -> Path:
    """``path`` when it is a file; FileNotFoundError naming ``what`` and the fix otherwise."""
    if not path.is_file():
        raise FileNotFoundError(f"{what}: expected a file at {path}, found {'a directory' if path.exists() else 'nothing'}. {fix}")
    return path


# ---------------------------------------------------------------------------------------------------
# MovieLens item table (LRURec's ml-1m_items.tsv)
# ---------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------
# S3Rec item attributes (<Name>_item2attributes.json)
# ---------------------------------------------------------------------------------------------------

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
        bad = next((k for k, v in table.items() if not isinstance(v, list)), None)
        if bad is not None:
            raise ValueError(f"{path}: item {bad!r} maps to {table[bad]!r}, expected a list of attribute ids")
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


def _metadata_lines(path: Path, opener: Any) -> Iterator[tuple[int, str]]:
    """(line number, line) of the non-empty lines of a (gzipped) metadata file, streamed; ValueError naming
    the file when it cannot be decompressed or decoded."""
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for n, line in enumerate(handle, start=1):
                if line.strip():
                    yield n, line
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as error:
        raise ValueError(f"{path} cannot be read ({error}): the file is corrupt or truncated; fetch it again.") from None


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
    for n, line in _metadata_lines(path, opener):
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
        if (value := as_float(record.get("price"))) is not None:
            price[asin] = value
        ranks = record.get("salesRank")
        if isinstance(ranks, dict) and ranks:
            chosen = ranks.get(sales_rank_category) if sales_rank_category in ranks else next(iter(ranks.values()))
            if (value := as_float(chosen)) is not None:
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
