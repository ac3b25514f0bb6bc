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
``features`` option): the data source's own ``Interactions.item_features`` (``SourceItemFeatures``;
MovieLens: title, year, genres), or a reader of a separate feature file in
``seqrec.data.sources.item_features`` (a MovieLens-style item TSV, S3Rec's ``item2attributes.json``,
the Amazon product metadata). The built tables are cached on disk (``<cache>/features/<name>-<key>/``,
an ``array_cache`` directory, so a corrupt entry is detected and rebuilt), keyed by the raw feature
files, the catalogue and the options.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from seqrec.data.array_cache import load_arrays, resolve_cache_dir, save_arrays
from seqrec.data.interactions import Source
from seqrec.data.sequences import Sequences

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
    def save(self, directory: str | Path) -> None:
        """Write all tables to an ``array_cache`` directory atomically (CRC-checked on load)."""
        arrays: dict[str, np.ndarray] = {}
        for i, name in enumerate(self.names):
            arrays[f"table_{i}"] = self.tables[name]
            if name in self.vocabularies:
                arrays[f"vocab_{i}"] = self.vocabularies[name].astype(str)
        meta = {
            "version": _FORMAT_VERSION, "names": self.names, "kinds": self.kinds,
            "float_stats": {k: list(v) for k, v in self.float_stats.items()}, "known": self.known,
        }
        save_arrays(directory, arrays, meta)

    @classmethod
    def load(cls, directory: str | Path) -> ItemFeatures:
        """Read a directory written by ``save``; ValueError when it is missing, corrupt or of another format."""
        try:
            arrays, meta = load_arrays(directory)
            if meta.get("version") != _FORMAT_VERSION:
                raise ValueError(f"format {meta.get('version')}, need {_FORMAT_VERSION}")
            names, kinds = meta["names"], meta["kinds"]
            tables = {name: arrays[f"table_{i}"] for i, name in enumerate(names)}
            vocabularies = {name: arrays[f"vocab_{i}"] for i, name in enumerate(names) if f"vocab_{i}" in arrays}
            stats = {k: tuple(v) for k, v in meta["float_stats"].items()}
        except (KeyError, ValueError) as error:
            raise ValueError(f"item-feature cache {directory} is unreadable ({error})") from error
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


def as_float(value: Any) -> float | None:
    """A float feature value: numbers as is, strings without ``,`` and a leading ``$``; None when missing or not finite."""
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
            numbers = np.array([np.nan if (x := as_float(v)) is None else x for v in values], dtype=np.float64)
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
    ``max_tokens`` caps token_seq widths. Sub-classes implement ``raw`` and ``fingerprint``; the
    readers of separate feature files live in ``seqrec.data.sources.item_features``.
    """

    def __init__(self, kinds: dict[str, FeatureKind], max_tokens: int | None = None) -> None:
        if not kinds:
            raise ValueError("kinds must name at least one feature (name: token | token_seq | float)")
        self.kinds = dict(kinds)
        self.max_tokens = max_tokens

    def feature_kinds(self, source: Source) -> dict[str, FeatureKind]:
        """The features to build, name → kind in channel order (``kinds``)."""
        return self.kinds

    @abstractmethod
    def raw(self, source: Source) -> dict[str, dict[str, Any]]:
        """``{feature: {raw item id (str): value}}`` for (at least) the features in ``kinds``."""

    @abstractmethod
    def fingerprint(self, source: Source) -> str:
        """Identity of the raw feature data (changes whenever ``raw`` could)."""

    def key(self, source: Source) -> str:
        """Cache identity: fingerprint, kinds and options."""
        kinds = json.dumps(self.feature_kinds(source))
        return f"{type(self).__name__}|{self.fingerprint(source)}|{kinds}|{self.max_tokens}"

    def build(self, source: Source, item_ids: np.ndarray) -> ItemFeatures:
        """The aligned tables for the catalogue ``item_ids``."""
        return build_item_features(self.raw(source), self.feature_kinds(source), item_ids, self.max_tokens)


def load_item_features(
    features: ItemFeatureSource, source: Source, sequences: Sequences, cache_dir: str | Path | None
) -> ItemFeatures:
    """The tables from the cache, or built and cached atomically (keyed by features, catalogue and options).

    The entry is an ``array_cache`` directory ``<cache>/features/<source name>-<key>``; a corrupt or
    mismatching entry is reported and rebuilt.
    """
    catalogue = hashlib.sha256("\n".join(sequences.item_ids.astype(str).tolist()).encode()).hexdigest()
    key = hashlib.sha256(f"{features.key(source)}|{catalogue}|{_FORMAT_VERSION}".encode()).hexdigest()[:20]
    directory = resolve_cache_dir(cache_dir) / "features" / f"{source.name}-{key}"
    if directory.exists():
        try:
            cached = ItemFeatures.load(directory)
            if cached.num_items == sequences.num_items and cached.names == list(features.feature_kinds(source)):
                return cached
            log.warning("item-feature cache %s does not match the catalogue; rebuilding it", directory)
        except ValueError as error:
            log.warning("%s; rebuilding it", error)
    built = features.build(source, sequences.item_ids)
    built.save(directory)
    return built


class SourceItemFeatures(ItemFeatureSource):
    """The features the data source itself parses (``Interactions.item_features``).

    MovieLens-100k/1M give ``title`` (the title without its year), ``year`` and ``genres``, from the
    same raw files as the interactions (RecBole's ml-100k ``movie_title``, ``release_year``, ``class``).
    ``kinds=None`` takes the source's own defaults (``Source.item_feature_kinds``; MovieLens: genres and
    title words as token sequences, year as a float; RecBole loads ``release_year`` as a token: pass
    ``year: token`` for that).
    """

    def __init__(self, kinds: dict[str, FeatureKind] | None = None, max_tokens: int | None = None) -> None:
        if kinds is not None:
            super().__init__(kinds, max_tokens)
        else:
            self.kinds, self.max_tokens = {}, max_tokens

    def feature_kinds(self, source: Source) -> dict[str, FeatureKind]:
        """``kinds`` when given, else the source's ``item_feature_kinds``; ValueError when both are empty."""
        kinds = self.kinds or dict(source.item_feature_kinds)
        if not kinds:
            raise ValueError(
                f"{source.describe()} declares no item features (item_feature_kinds); pass kinds= or use a feature "
                "source that reads them from their own file (seqrec.data.sources.item_features: MovieLensItemTable, "
                "S3RecAttributes, AmazonMetadata)"
            )
        return kinds  # type: ignore[return-value]

    def raw(self, source: Source) -> dict[str, dict[str, Any]]:
        """``source.load().item_features`` with string keys."""
        source.prepare()
        found = source.load().item_features
        if not found:
            raise ValueError(
                f"{source.describe()} provides no item features; use a feature source that reads them from "
                "their own file (seqrec.data.sources.item_features: MovieLensItemTable, S3RecAttributes, AmazonMetadata)"
            )
        return {name: {str(k): v for k, v in values.items()} for name, values in found.items()}

    def fingerprint(self, source: Source) -> str:
        """The data source's fingerprint (its raw files hold the features)."""
        return source.fingerprint()
