"""The item-feature file readers on fixtures in their real formats, and on the shared real data."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from seqrec.data.features import ItemFeatures, ItemFeatureSource, build_item_features, load_item_features
from seqrec.data.interactions import Source
from seqrec.data.preprocess import NO_FILTERS, load_sequences
from seqrec.data.sources.item_features import (
    AmazonMetadata,
    MovieLensItemTable,
    S3RecAttributes,
    parse_amazon_metadata,
)
from seqrec.data.sources.sasrec_text import S3RecText
from tests.data.test_features import decode


def features_of(source: Source, features: ItemFeatureSource) -> tuple[ItemFeatures, np.ndarray]:
    """The tables built for ``source``'s catalogue (no filters), and the catalogue's raw item ids."""
    sequences = load_sequences(source, NO_FILTERS, None)
    return load_item_features(features, source, sequences, None), sequences.item_ids


def test_s3rec_attributes_align_with_s3rec_text(tmp_path):
    lines = ["1 3 5 7 3 5", "2 5 7 9 3 7", "3 3 9 5 7 9", "4 7 3 9 5 3", "5 9 5 3 7 9"]
    (tmp_path / "Beauty.txt").write_text("\n".join(lines) + "\n")
    attributes = {"3": [1, 2], "5": [2], "7": [3, 4, 1], "9": [], "11": [5]}
    with gzip.open(tmp_path / "attrs.json.gz", "wt") as handle:
        json.dump(attributes, handle)
    f, item_ids = features_of(S3RecText("beauty", path=str(tmp_path / "Beauty.txt")),
                              S3RecAttributes(path=str(tmp_path / "attrs.json.gz")))
    assert item_ids.tolist() == ["", "3", "5", "7", "9"]
    for i, raw_id in enumerate(item_ids[1:], start=1):
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
    f, item_ids = features_of(source, S3RecAttributes(path=str(shared_data / "s3rec" / "Beauty_item2attributes.json.gz")))
    assert f.num_items == 12_101
    assert f.known["attributes"] == 1.0
    assert len(f.vocabularies["attributes"]) <= 637 + 2
    raw = json.loads(gzip.open(shared_data / "s3rec" / "Beauty_item2attributes.json.gz", "rt").read())
    for i in (1, 500, 12_101):
        assert decode(f, "attributes", i) == [str(a) for a in raw[item_ids[i]]]


def test_real_lrurec_ml1m_item_table(shared_data):
    table = MovieLensItemTable(str(shared_data / "lrurec" / "ml-1m_items.tsv"))
    ids = np.array([""] + [str(i) for i in range(1, 3417)])
    f = build_item_features(table.raw(source=None), table.kinds, ids)  # type: ignore[arg-type]
    assert f.known == {"genres": 1.0, "title": 1.0, "year": 1.0}
    assert decode(f, "title", 1) == ["Toy", "Story"]
    assert decode(f, "genres", 1) == ["Animation", "Children's", "Comedy"]
    assert len(f.vocabularies["genres"]) == 18 + 2


def test_amazon_metadata_with_corrupt_compression_names_the_file(tmp_path):
    path = tmp_path / "meta_Beauty.json.gz"
    data = bytearray(gzip.compress(("\n".join(AMAZON_LINES * 200) + "\n").encode()))
    for i in range(40, 200, 5):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"meta_Beauty.json.gz cannot be read .*corrupt or truncated"):
        parse_amazon_metadata(path)
