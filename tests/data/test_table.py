"""An Arrow table -> interactions (``seqrec.data.table``): ids, times and ratings converted column by column, and every
problem one line naming the input, the column and the row. The file source's end-to-end tests (CSV / TSV / Parquet,
gzip, the cache) are in tests/data/sources/test_interactions_file.py."""

from __future__ import annotations

import datetime as dt
import logging

import numpy as np
import pytest

from seqrec.data.interactions import Interactions
from seqrec.data.table import (
    ColumnMap,
    Where,
    check_columns,
    concat_interactions,
    id_column,
    interactions_from_table,
    rating_column,
    timestamp_column,
)

pa = pytest.importorskip("pyarrow")
TEXT = Where("events.csv", first_line=2)  # a text file with a header: data row 1 is line 2


def test_rows_are_counted_from_one_over_the_whole_input_with_the_text_line_where_there_is_one():
    assert TEXT.row(0) == "row 1 (line 2)"
    assert Where("events.parquet").row(4) == "row 5"
    assert Where("hub:ml", row_offset=1000).row(0) == "row 1001"  # a later batch of a batched read


def test_text_ids_become_integers_only_when_every_one_is_a_canonical_integer():
    assert id_column(pa.array(["10", "-3", "0"]), TEXT, "user", text_ints=True).dtype == np.int64
    kept = id_column(pa.array(["007", "7"]), TEXT, "user", text_ints=True)  # a leading zero is not an integer's text
    assert kept.dtype.kind == "U" and list(kept) == ["007", "7"]
    assert id_column(pa.array(["10", "11"]), TEXT, "user", text_ints=False).dtype.kind == "U"  # Parquet text stays text
    assert list(id_column(pa.array([3.0, 4.0]), TEXT, "item", text_ints=False)) == [3, 4]
    dictionary = pa.array(["a", "b", "a"]).dictionary_encode()
    assert list(id_column(dictionary, TEXT, "item", text_ints=False)) == ["a", "b", "a"]


def test_a_fractional_id_and_an_empty_id_name_their_row():
    with pytest.raises(ValueError, match=r"^events\.csv, column 'item', row 2 \(line 3\): id 2\.5 is not an integer"):
        id_column(pa.array([1.0, 2.5]), TEXT, "item", text_ints=False)
    with pytest.raises(ValueError, match=r"^events\.csv, column 'user', row 3 \(line 4\): empty value"):
        id_column(pa.array(["a", "b", None]), TEXT, "user", text_ints=True)


def test_surrounding_whitespace_is_stripped_and_counted_and_whitespace_alone_is_empty(caplog):
    with caplog.at_level(logging.WARNING):
        ids = id_column(pa.array([" 5", "5 ", "5", "\tm"]), TEXT, "user", text_ints=True)
    assert list(ids) == ["5", "5", "5", "m"]  # "m" keeps the column text; the three 5s are one id
    assert "column 'user': 3 ids had surrounding whitespace" in caplog.text
    with pytest.raises(ValueError, match=r"row 2 \(line 3\): empty value"):
        id_column(pa.array(["a", "   "]), TEXT, "user", text_ints=True)


def test_timestamps_numbers_iso_text_formats_and_arrow_times_become_numbers():
    def convert(values, fmt=None):  # noqa: ANN001, ANN202
        return timestamp_column(pa.array(values), TEXT, "timestamp", fmt)

    assert convert(["17", "18"]).dtype == np.int64 and list(convert(["17", "18"])) == [17, 18]
    assert list(convert(["1.5", "2"])) == [1.5, 2.0]
    day = int(dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc).timestamp())
    assert list(convert(["2024-03-01", "2024-03-01 00:00:10"])) == [day, day + 10]  # no zone: UTC
    assert list(convert(["2024-03-01T02:00:00+02:00"])) == [day]
    assert list(convert(["01/03/2024"], fmt="%d/%m/%Y")) == [day]
    assert list(convert([dt.date(2024, 3, 1)])) == [day]
    assert list(convert([dt.datetime(2024, 3, 1, 0, 0, 0, 500_000)])) == [day + 0.5]  # sub-second: float seconds


def test_a_bad_timestamp_names_the_first_bad_row():
    with pytest.raises(ValueError, match=r"row 3 \(line 4\): cannot parse 'soon' as a number \(row 1 holds one\)"):
        timestamp_column(pa.array(["1", "2", "soon"]), TEXT, "timestamp", None)
    with pytest.raises(ValueError, match=r"row 2 \(line 3\): cannot parse '2024-13-45' as a timestamp without a zone"):
        timestamp_column(pa.array(["2024-01-01", "2024-13-45"]), TEXT, "timestamp", None)
    with pytest.raises(ValueError, match=r"row 2 \(line 3\): timestamp inf is not a finite number"):
        timestamp_column(pa.array([1.0, float("inf")]), TEXT, "timestamp", None)
    with pytest.raises(ValueError, match=r"column 'timestamp': holds bool values, not timestamps"):
        timestamp_column(pa.array([True]), TEXT, "timestamp", None)


def test_ratings_are_float32_and_text_that_is_no_number_names_its_row():
    ratings = rating_column(pa.array(["4.5", "3"]), TEXT, "stars")
    assert ratings.dtype == np.float32 and list(ratings) == [4.5, 3.0]
    with pytest.raises(ValueError, match=r"column 'stars', row 2 \(line 3\): cannot parse 'good' as a number"):
        rating_column(pa.array(["4", "good"]), TEXT, "stars")


def test_a_missing_or_repeated_mapped_column_is_one_line_naming_the_columns_and_the_flag():
    with pytest.raises(ValueError) as error:
        check_columns(["u", "i", "t"], ColumnMap(), "x.parquet", header="the schema")
    assert str(error.value) == ("x.parquet, column 'user', the schema: no such column for the user; the columns are "
                                "'u', 'i', 't': set --data.source.user COLUMN")
    with pytest.raises(ValueError, match=r"set --data.source.timestamp COLUMN \(or null for none\)"):
        check_columns(["user", "item"], ColumnMap(), "x.csv")
    with pytest.raises(ValueError, match=r"2 columns are named 'item' \(columns 2 and 3\), so which holds the item"):
        check_columns(["user", "item", "item", "timestamp"], ColumnMap(), "x.csv")
    check_columns(["user", "item", "x", "x"], ColumnMap(timestamp=None), "x.csv")  # a repeated unmapped name is harmless


def test_a_table_maps_its_columns_and_without_a_timestamp_the_order_within_each_user_is_the_time():
    table = pa.table({"who": ["b", "a", "b"], "what": ["x", "y", "z"], "when": ["3", "1", "2"], "r": [1, 2, 3]})
    mapped = interactions_from_table(table, ColumnMap("who", "what", "when", "r"), TEXT, text_ints=True)
    assert list(mapped.users) == ["b", "a", "b"] and list(mapped.times) == [3, 1, 2]
    assert mapped.ratings is not None and mapped.ratings.dtype == np.float32
    ordered = interactions_from_table(table, ColumnMap("who", "what", None), TEXT)
    assert list(ordered.times) == [0, 0, 1] and ordered.ratings is None


def test_batches_of_one_input_join_as_one_table_text_ids_and_float_times_winning():
    ints = Interactions(users=np.array([1, 2]), items=np.array([5, 6]), times=np.array([1, 2]))
    text = Interactions(users=np.array(["u"]), items=np.array([7]), times=np.array([2.5]))
    joined = concat_interactions([ints, text])
    assert list(joined.users) == ["1", "2", "u"] and joined.items.dtype == np.int64
    assert joined.times.dtype == np.float64 and list(joined.times) == [1.0, 2.0, 2.5]
    assert concat_interactions([ints]) is ints
