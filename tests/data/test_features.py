"""Item-feature tables: alignment with remapped ids, padding row, unknown handling, caching, and every feature source."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from seqrec.data.features import (
    UNKNOWN,
    AmazonMetadata,
    ItemFeatures,
    MovieLensItemTable,
    S3RecAttributes,
    SourceItemFeatures,
    build_item_features,
    load_item_features,
    parse_amazon_metadata,
)
from seqrec.data.preprocess import Preprocessing
from seqrec.data.sources.movielens import ML100K_GENRES, MovieLens100K
from seqrec.data.sources.sasrec_text import S3RecText
from seqrec.datamodules.next_item import NextItemDataModule

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
    f.save(tmp_path / "f.npz")
    g = ItemFeatures.load(tmp_path / "f.npz")
    assert g.names == f.names and g.kinds == f.kinds and g.spec() == f.spec()
    assert g.float_stats == f.float_stats and g.known == f.known
    for name in f.names:
        assert np.array_equal(g.tables[name], f.tables[name])
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="unreadable"):
        ItemFeatures.load(tmp_path / "bad.npz")


# --- MovieLens through the datamodule ------------------------------------------------------------


def ml100k_datamodule(root: Path, features=None, **kw) -> NextItemDataModule:
    return NextItemDataModule(
        MovieLens100K(root=str(root)),
        preprocessing=Preprocessing(min_item_interactions=5, min_user_interactions=5, kcore="iterative"),
        max_len=20, train_mode="prefix", eval_negatives=10, negative_sampler="popularity", features=features, **kw,
    )


def test_datamodule_tables_match_the_raw_u_item(ml100k_root, isolated_cache):
    dm = ml100k_datamodule(ml100k_root, SourceItemFeatures())
    f = dm.item_features
    assert f is not None and f.names == ["genres", "title", "year"]
    lines = (ml100k_root / "u.item").read_bytes().decode("latin-1").splitlines()
    by_id = {line.split("|")[0]: line.split("|") for line in lines}
    years = []
    for i in range(1, dm.num_items + 1):
        fields = by_id[dm.sequences.item_ids[i]]  # the raw u.item line of remapped item i
        flags = fields[5:]
        assert decode(f, "genres", i) == [g for g, flag in zip(ML100K_GENRES, flags) if flag == "1"]
        assert decode(f, "title", i) == fields[1].rsplit(" (", 1)[0].split()  # "Movie 7 (1997)" -> Movie, 7
        years.append(int(fields[1][-5:-1]))
    years = np.array(years, dtype=float)
    expected = (years - years.min()) / (years.max() - years.min())
    assert f.tables["year"][1:] == pytest.approx(expected)
    for name in f.names:
        assert not np.any(f.tables[name][0])
    assert dm.item_feature_spec == f.spec()
    tables = dm.item_feature_tables()
    assert tables["title"].dtype == torch.int64 and tables["year"].dtype == torch.float32
    assert tables["genres"].shape[0] == dm.num_items + 1
    # built once, cached on disk; a new datamodule reads the same tables back
    cached = list((isolated_cache / "features").glob("*.npz"))
    assert len(cached) == 1
    again = ml100k_datamodule(ml100k_root, SourceItemFeatures()).item_features
    assert again is not None and all(np.array_equal(again.tables[n], f.tables[n]) for n in f.names)


def test_features_are_opt_in(ml100k_root):
    dm = ml100k_datamodule(ml100k_root)
    assert dm.item_features is None and dm.item_feature_spec == [] and dm.item_feature_tables() == {}
    dm.setup("fit")
    assert set(dm.datasets["train"][0]) == {"items", "labels"}  # batches carry item ids only


def test_year_as_token_like_recbole(ml100k_root):
    dm = ml100k_datamodule(ml100k_root, SourceItemFeatures(kinds={"year": "token"}))
    f = dm.item_features
    assert f is not None and f.kinds == ["token"]
    assert set(f.vocabularies["year"][2:]) <= {f"199{k}" for k in range(10)}


# --- other sources -------------------------------------------------------------------------------


def test_s3rec_attributes_align_with_s3rec_text(tmp_path):
    lines = ["1 3 5 7 3 5", "2 5 7 9 3 7", "3 3 9 5 7 9", "4 7 3 9 5 3", "5 9 5 3 7 9"]
    (tmp_path / "Beauty.txt").write_text("\n".join(lines) + "\n")
    attributes = {"3": [1, 2], "5": [2], "7": [3, 4, 1], "9": [], "11": [5]}
    with gzip.open(tmp_path / "attrs.json.gz", "wt") as handle:
        json.dump(attributes, handle)
    dm = NextItemDataModule(
        S3RecText("beauty", path=str(tmp_path / "Beauty.txt")), max_len=5,
        features=S3RecAttributes(path=str(tmp_path / "attrs.json.gz")),
    )
    f = dm.item_features
    assert f is not None and dm.sequences.item_ids.tolist() == ["", "3", "5", "7", "9"]
    for i, raw_id in enumerate(dm.sequences.item_ids[1:], start=1):
        assert decode(f, "attributes", i) == [str(a) for a in attributes[raw_id]]
    assert "5" not in f.vocabularies["attributes"]  # only item 11 has it, and 11 is not in the catalogue


def test_movielens_item_table(tmp_path):
    (tmp_path / "items.tsv").write_text(
        "item\tmovie_id\ttitle\tgenres\n1\t1\tToy Story (1995)\tAnimation|Children's|Comedy\n"
        "2\t2\tJumanji (1995)\tAdventure\n3\t5\tNo Year\t\n"
    )
    table = MovieLensItemTable(str(tmp_path / "items.tsv"))
    raw = table.raw(source=None)  # type: ignore[arg-type]  # the table does not need the interactions source
    f = build_item_features(raw, table.kinds, np.array(["", "2", "1", "3"]))
    assert decode(f, "title", 2) == ["Toy", "Story"] and decode(f, "genres", 2) == ["Animation", "Children's", "Comedy"]
    assert decode(f, "genres", 3) == [] and f.tables["year"][3] == pytest.approx(0.0)  # no year: the mean fill
    (tmp_path / "bad.tsv").write_text("id\ttitle\n1\tx\n")
    with pytest.raises(ValueError, match="missing.*genres"):
        MovieLensItemTable(str(tmp_path / "bad.tsv")).raw(source=None)  # type: ignore[arg-type]


AMAZON_LINES = [
    # the 2014 release: Python dict literals (single quotes), one product per line
    "{'asin': '0205616461', 'salesRank': {'Beauty': 10486}, 'categories': [['Beauty', 'Skin Care', 'Face'], "
    "['Beauty', 'Makeup']], 'title': 'Bio-Active Anti-Aging Serum', 'price': 15.99, 'brand': 'Bio-Active'}",
    "{'asin': '0558925278', 'related': {'also_bought': ['B003VWKPHC']}, 'categories': [['Beauty', 'Makeup']], "
    "'salesRank': {'Health & Personal Care': 402875}}",
    '{"asin": "0733001998", "brand": "Eco", "price": 4.5, "salesRank": {"Beauty": 200}, "categories": []}',
]


def test_amazon_metadata_parser_on_the_real_format(tmp_path):
    path = tmp_path / "meta_Beauty.json.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("\n".join(AMAZON_LINES) + "\n")
    raw = parse_amazon_metadata(path)
    assert raw["brand"] == {"0205616461": "Bio-Active", "0733001998": "Eco"}
    assert raw["categories"]["0205616461"] == ["Beauty", "Skin Care", "Face", "Makeup"]  # flattened, deduplicated
    assert raw["price"] == {"0205616461": 15.99, "0733001998": 4.5}
    assert raw["sales_rank"] == {"0205616461": 10486.0, "0558925278": 402875.0, "0733001998": 200.0}
    # re-keyed to a source's ids through item_map, then built like any other feature
    (tmp_path / "map.tsv").write_text("1\t0733001998\n2\t0205616461\n3\t0558925278\n")
    meta = AmazonMetadata(path=str(path), item_map=str(tmp_path / "map.tsv"))
    f = build_item_features(meta.raw(source=None), meta.kinds, np.array(["", "1", "2", "3"]))  # type: ignore[arg-type]
    assert f.names == ["sales_rank", "categories", "price", "brand"]
    assert f.tables["sales_rank"].tolist() == pytest.approx([0.0, 0.0, (10486 - 200) / (402875 - 200), 1.0])
    assert f.tables["price"][3] == pytest.approx(0.5)  # missing price: mean of the two known (0 and 1)
    assert f.vocabularies["brand"][f.tables["brand"][3]] == "[unknown]"
    (tmp_path / "broken.json").write_text("{'asin': 'x', 'price': \n")
    with pytest.raises(ValueError, match="broken.json, line 1"):
        parse_amazon_metadata(tmp_path / "broken.json")


def test_amazon_metadata_missing_file_says_where_to_get_it(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="snap.stanford.edu.*meta_Beauty.json.gz"):
        AmazonMetadata(path=str(tmp_path / "nope.json.gz")).raw(source=None)  # type: ignore[arg-type]
    monkeypatch.setenv("SEQREC_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="pass path="):
        AmazonMetadata().raw(source=None)  # type: ignore[arg-type]


# --- real data (skipped without $SEQREC_SHARED_DATA) ---------------------------------------------


def test_real_s3rec_beauty_attributes(shared_data):
    source = S3RecText("beauty", path=str(shared_data / "s3rec" / "Beauty.txt.gz"))
    dm = NextItemDataModule(source, features=S3RecAttributes(path=str(shared_data / "s3rec" / "Beauty_item2attributes.json.gz")))
    f = dm.item_features
    assert f is not None and dm.num_items == 12_101
    assert f.known["attributes"] == 1.0
    assert len(f.vocabularies["attributes"]) <= 637 + 2
    raw = json.loads(gzip.open(shared_data / "s3rec" / "Beauty_item2attributes.json.gz", "rt").read())
    for i in (1, 500, 12_101):
        assert decode(f, "attributes", i) == [str(a) for a in raw[dm.sequences.item_ids[i]]]


def test_real_lrurec_ml1m_item_table(shared_data):
    table = MovieLensItemTable(str(shared_data / "lrurec" / "ml-1m_items.tsv"))
    ids = np.array([""] + [str(i) for i in range(1, 3417)])
    f = build_item_features(table.raw(source=None), table.kinds, ids)  # type: ignore[arg-type]
    assert f.known == {"genres": 1.0, "title": 1.0, "year": 1.0}
    assert decode(f, "title", 1) == ["Toy", "Story"]
    assert decode(f, "genres", 1) == ["Animation", "Children's", "Comedy"]
    assert len(f.vocabularies["genres"]) == 18 + 2


def test_load_item_features_rebuilds_a_corrupt_cache(ml100k_root, isolated_cache):
    dm = ml100k_datamodule(ml100k_root)
    features = SourceItemFeatures(kinds={"genres": "token_seq"})
    first = load_item_features(features, dm.source, dm.sequences, None)
    [path] = list((isolated_cache / "features").glob("*.npz"))
    path.write_bytes(b"garbage")
    second = load_item_features(features, dm.source, dm.sequences, None)
    assert np.array_equal(first.tables["genres"], second.tables["genres"])
    assert ItemFeatures.load(path).names == ["genres"]
