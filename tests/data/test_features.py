"""Item-feature tables: alignment with remapped ids, padding row, unknown handling, caching, the source's own features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from seqrec.data.features import (
    UNKNOWN,
    ItemFeatures,
    SourceItemFeatures,
    build_item_features,
    load_item_features,
)
from seqrec.data.interactions import Interactions, Source
from seqrec.data.preprocess import Preprocessing, load_sequences
from seqrec.data.sequences import Sequences
from seqrec.data.sources.movielens import MovieLens100K

ITEM_IDS = np.array(["", "10", "7", "42"])  # remapped item i has raw id ITEM_IDS[i]


def decode(features: ItemFeatures, name: str, row: int) -> list[str]:
    """The token strings of one row of a token_seq table."""
    vocab = features.vocabularies[name]
    return [str(vocab[t]) for t in features.tables[name][row] if t != 0]


def test_rows_follow_remapped_ids_and_padding_row_is_zero():
    raw = {
        "genres": {"7": ["Drama"], "10": ["Comedy", "Drama"], "42": [], "99": ["Horror"]},  # 99: not in catalogue
        "brand": {10: "acme", "42": "zeta"},  # int keys compare as strings; item 7 has no brand
        "year": {"10": 1990, "7": "2000", "42": None},  # 42: missing
    }
    f = build_item_features(raw, {"genres": "token_seq", "brand": "token", "year": "float"}, ITEM_IDS)
    assert f.names == ["genres", "brand", "year"] and f.num_items == 3
    # row i describes raw item ITEM_IDS[i]
    assert decode(f, "genres", 1) == ["Comedy", "Drama"]
    assert decode(f, "genres", 2) == ["Drama"]
    assert decode(f, "genres", 3) == []  # an empty list is a value with no tokens (pools to zero)
    assert list(f.vocabularies["genres"]) == ["", "[unknown]", "Comedy", "Drama"]  # catalogue items only, sorted
    assert f.vocabularies["brand"][f.tables["brand"][1]] == "acme"
    assert f.tables["brand"][2] == UNKNOWN  # no value -> the unknown id 1
    assert f.vocabularies["brand"][f.tables["brand"][3]] == "zeta"
    # float: min-max over known values (1990 -> 0, 2000 -> 1), missing -> mean of the normalised known values
    assert f.tables["year"].tolist() == pytest.approx([0.0, 0.0, 1.0, 0.5])
    assert f.float_stats["year"] == pytest.approx((1990.0, 2000.0, 0.5))
    for name in f.names:  # padding row zero everywhere
        assert not np.any(f.tables[name][0])
    assert f.known == pytest.approx({"genres": 1.0, "brand": 2 / 3, "year": 2 / 3})
    spec = {s["name"]: s for s in f.spec()}
    assert spec["genres"] == {"name": "genres", "kind": "token_seq", "vocab_size": 4, "max_tokens": 2}
    assert spec["year"]["vocab_size"] == 0 and spec["brand"]["max_tokens"] == 1


def test_token_seq_strings_split_missing_is_unknown_and_max_tokens_cuts():
    raw = {"title": {"10": "the big  lebowski", "7": "  ", "42": "heat"}}  # blank -> missing
    f = build_item_features(raw, {"title": "token_seq"}, ITEM_IDS, max_tokens=2)
    assert f.tables["title"].shape == (4, 2)
    assert decode(f, "title", 1) == ["the", "big"]  # first max_tokens tokens kept
    assert f.tables["title"][2].tolist() == [UNKNOWN, 0]
    assert decode(f, "title", 3) == ["heat"]


def test_constant_float_and_bad_inputs():
    f = build_item_features({"p": {"10": 3.0, "7": 3.0, "42": "n/a"}}, {"p": "float"}, ITEM_IDS)
    assert f.tables["p"].tolist() == [0.0, 0.0, 0.0, 0.0]  # max == min -> 0
    with pytest.raises(ValueError, match="kind 'tokens'"):
        build_item_features({"p": {}}, {"p": "tokens"}, ITEM_IDS)
    with pytest.raises(ValueError, match=r"'colour' is not provided.*\['p'\]"):
        build_item_features({"p": {}}, {"colour": "token"}, ITEM_IDS)
    with pytest.raises(ValueError, match="none of the 3 catalogue items has a value.*B0001"):
        build_item_features({"brand": {"B0001": "acme"}}, {"brand": "token"}, ITEM_IDS)


def test_save_load_round_trip(tmp_path):
    raw = {"g": {"10": ["a"], "7": ["b", "a"], "42": ["c"]}, "y": {"10": 1.0, "7": 2.0}}
    f = build_item_features(raw, {"g": "token_seq", "y": "float"}, ITEM_IDS)
    f.save(tmp_path / "f")
    g = ItemFeatures.load(tmp_path / "f")
    assert g.names == f.names and g.kinds == f.kinds and g.spec() == f.spec()
    assert g.float_stats == f.float_stats and g.known == f.known
    for name in f.names:
        assert np.array_equal(g.tables[name], f.tables[name])
        assert g.tables[name].dtype == f.tables[name].dtype
    assert list(g.vocabularies["g"]) == list(f.vocabularies["g"])
    table = tmp_path / "f" / "table_0.npy"
    table.write_bytes(table.read_bytes()[:-4] + b"\x07" * 4)  # same size, altered content: the CRC catches it
    with pytest.raises(ValueError, match="unreadable.*does not match its manifest"):
        ItemFeatures.load(tmp_path / "f")
    with pytest.raises(ValueError, match="unreadable"):
        ItemFeatures.load(tmp_path / "missing")


# --- the data source's own features --------------------------------------------------------------


def ml100k_sequences(root: Path) -> tuple[MovieLens100K, Sequences]:
    source = MovieLens100K(root=str(root))
    options = Preprocessing(min_item_interactions=5, min_user_interactions=5, kcore="iterative")
    return source, load_sequences(source, options, None)


def test_source_features_default_to_the_source_kinds(ml100k_root):
    source, sequences = ml100k_sequences(ml100k_root)
    assert source.item_feature_kinds == {"genres": "token_seq", "title": "token_seq", "year": "float"}
    f = load_item_features(SourceItemFeatures(), source, sequences, None)
    assert f.names == ["genres", "title", "year"] and f.kinds == ["token_seq", "token_seq", "float"]
    # the same key as naming the kinds explicitly: one cache entry, the same tables
    explicit = SourceItemFeatures(kinds={"genres": "token_seq", "title": "token_seq", "year": "float"})
    assert explicit.key(source) == SourceItemFeatures().key(source)


def test_year_as_token_like_recbole(ml100k_root):
    source, sequences = ml100k_sequences(ml100k_root)
    f = load_item_features(SourceItemFeatures(kinds={"year": "token"}), source, sequences, None)
    assert f.kinds == ["token"]
    assert set(f.vocabularies["year"][2:]) <= {f"199{k}" for k in range(10)}


class NoFeatures(Source):
    """A source whose interactions carry no item features."""

    name = "plain"

    def prepare(self) -> None:
        """Nothing to fetch."""

    def load(self) -> Interactions:
        """Two events."""
        return Interactions(np.array([1, 1]), np.array([5, 6]), np.array([0, 1]))

    def fingerprint(self) -> str:
        """Constant."""
        return "plain"


def test_a_source_without_features_is_a_clear_error():
    with pytest.raises(ValueError, match="declares no item features.*pass kinds="):
        SourceItemFeatures().feature_kinds(NoFeatures())
    with pytest.raises(ValueError, match="provides no item features.*seqrec.data.sources.item_features"):
        SourceItemFeatures(kinds={"genres": "token_seq"}).raw(NoFeatures())
    with pytest.raises(ValueError, match="kinds must name at least one feature"):
        SourceItemFeatures(kinds={})


def test_load_item_features_rebuilds_a_corrupt_cache(ml100k_root, isolated_cache, caplog):
    source, sequences = ml100k_sequences(ml100k_root)
    features = SourceItemFeatures(kinds={"genres": "token_seq"})
    first = load_item_features(features, source, sequences, None)
    [entry] = list((isolated_cache / "features").iterdir())
    assert entry.name.startswith("ml-100k-") and (entry / "manifest.json").is_file()
    table = entry / "table_0.npy"
    table.write_bytes(table.read_bytes()[:-8])
    second = load_item_features(features, source, sequences, None)
    assert "does not match its manifest" in caplog.text
    assert np.array_equal(first.tables["genres"], second.tables["genres"])
    assert ItemFeatures.load(entry).names == ["genres"]
