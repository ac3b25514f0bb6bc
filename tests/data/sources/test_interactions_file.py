"""``InteractionsFile``: CSV / TSV / Parquet (gz) with any column names, typed raw ids through the cache, one-line errors."""

from __future__ import annotations

import datetime as dt
import gzip
from pathlib import Path

import numpy as np
import pytest

from seqrec.data.preprocess import Preprocessing, load_sequences
from seqrec.data.sequences import Sequences
from seqrec.data.sources.interactions_file import InteractionsFile
from seqrec.datamodules.next_item import NextItemDataModule

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def write_events(
    path: Path, num_users: int = 60, num_items: int = 40, length: int = 25, seed: int = 0,
    columns: tuple[str, str, str] = ("user_id", "item_id", "timestamp"),
) -> list[tuple[str, str, str]]:
    """A CSV of ``user_id,item_id,timestamp`` (text ids ``alice``, ``bob``, ``u002``...; items ``m1``..; ISO times).

    Each user walks a ring of items (usually the next id, sometimes a jump) without repeats, so a sequence
    model learns it. Returns the rows.
    """
    rng = np.random.default_rng(seed)
    names = ["alice", "bob"] + [f"u{u:03d}" for u in range(2, num_users)]
    rows = []
    for name in names:
        item, seen = int(rng.integers(num_items)), set()
        t = dt.datetime(2024, 1, 1) + dt.timedelta(hours=int(rng.integers(1000)))
        for _ in range(length):
            while item in seen:
                item = (item + 1) % num_items
            seen.add(item)
            t += dt.timedelta(minutes=int(rng.integers(1, 600)))
            rows.append((name, f"m{item + 1}", f"{t:%Y-%m-%d %H:%M:%S}"))
            item = (item + 1) % num_items if rng.random() < 0.85 else int(rng.integers(num_items))
    path.write_text(",".join(columns) + "\n" + "\n".join(",".join(r) for r in rows) + "\n")
    return rows


def source(path: Path, **kw) -> InteractionsFile:
    return InteractionsFile(str(path), user="user_id", item="item_id", **kw)


def test_text_ids_and_iso_times_reach_the_sequences_and_survive_the_cache(tmp_path, isolated_cache):
    rows = write_events(tmp_path / "events.csv")
    inter = source(tmp_path / "events.csv").load()
    assert inter.users.dtype.kind == "U" and inter.items.dtype.kind == "U" and inter.times.dtype == np.int64
    first = dt.datetime.strptime(rows[0][2], "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
    assert inter.times[0] == int(first.timestamp())  # Unix seconds

    data = NextItemDataModule(source(tmp_path / "events.csv"), max_len=10)
    built = data.sequences
    assert built.id_kinds == ("str", "str")
    [entry] = (isolated_cache / "sequences").glob("events-*")
    cached = Sequences.load(entry)
    assert cached.id_kinds == ("str", "str") and list(cached.user_ids) == list(built.user_ids)
    # alice's sequence in time order, in her own ids
    alice = int(np.flatnonzero(cached.raw_user_ids() == "alice")[0])
    assert list(cached.raw_item_ids(cached.sequence(alice))) == [item for user, item, _ in rows if user == "alice"]


def test_integer_ids_come_back_as_integers_and_leading_zeros_stay_text(tmp_path, isolated_cache):
    (tmp_path / "ints.csv").write_text("user,item,timestamp\n10,7,1\n10,8,2\n10,9,3\n2,7,1\n2,9,2\n2,8,3\n")
    seqs = load_sequences(InteractionsFile(str(tmp_path / "ints.csv")), Preprocessing(), None)
    assert seqs.id_kinds == ("int", "int")
    assert seqs.raw_user_ids().dtype == np.int64 and list(seqs.raw_user_ids()) == [2, 10]  # numeric order
    assert list(seqs.raw_item_ids()) == [7, 8, 9]
    (tmp_path / "zeros.csv").write_text("user,item,timestamp\n007,1,1\n7,1,2\n")
    inter = InteractionsFile(str(tmp_path / "zeros.csv")).load()
    assert list(inter.users) == ["007", "7"] and inter.items.dtype == np.int64


def test_csv_tsv_gz_parquet_and_a_parquet_directory_give_the_same_sequences(tmp_path, isolated_cache):
    write_events(tmp_path / "events.csv")
    from pyarrow import csv as pa_csv

    table = pa_csv.read_csv(tmp_path / "events.csv")
    text = (tmp_path / "events.csv").read_text()
    (tmp_path / "events.tsv.gz").write_bytes(gzip.compress(text.replace(",", "\t").encode()))
    pq.write_table(table, tmp_path / "events.parquet")  # timestamps typed by Arrow (timestamp[s])
    (tmp_path / "parts").mkdir()
    pq.write_table(table.slice(0, 700), tmp_path / "parts" / "part-0.parquet")
    pq.write_table(table.slice(700), tmp_path / "parts" / "part-1.parquet")
    results = [
        load_sequences(source(tmp_path / name), Preprocessing(), None)
        for name in ("events.csv", "events.tsv.gz", "events.parquet", "parts")
    ]
    for other in results[1:]:
        assert np.array_equal(other.items, results[0].items) and np.array_equal(other.indptr, results[0].indptr)
        assert list(other.user_ids) == list(results[0].user_ids) and np.array_equal(other.times, results[0].times)


def test_rating_filter_no_timestamp_and_custom_time_format(tmp_path):
    (tmp_path / "r.csv").write_text("u,i,stars,when\na,x,5,02/01/2024\na,y,1,01/01/2024\nb,x,4,03/01/2024\n")
    inter = InteractionsFile(str(tmp_path / "r.csv"), user="u", item="i", rating="stars", timestamp="when",
                             timestamp_format="%d/%m/%Y").load()
    assert list(inter.ratings) == [5.0, 1.0, 4.0]
    assert inter.times[1] < inter.times[0] < inter.times[2]  # 1 Jan < 2 Jan < 3 Jan
    kept = load_sequences_of(InteractionsFile(str(tmp_path / "r.csv"), user="u", item="i", rating="stars",
                                              timestamp="when", timestamp_format="%d/%m/%Y"), Preprocessing(min_rating=4))
    assert kept.num_interactions == 2
    ordered = InteractionsFile(str(tmp_path / "r.csv"), user="u", item="i", timestamp="null").load()  # CLI's null
    assert list(ordered.times) == [0, 1, 0]  # the file's order within each user


def load_sequences_of(src: InteractionsFile, options: Preprocessing) -> Sequences:
    from seqrec.data.preprocess import preprocess

    return preprocess(src.load(), options)


def test_fingerprint_changes_with_the_mapping_and_the_content(tmp_path):
    write_events(tmp_path / "events.csv")
    a = source(tmp_path / "events.csv").fingerprint()
    assert a == source(tmp_path / "events.csv").fingerprint()
    assert a != source(tmp_path / "events.csv", timestamp=None).fingerprint()
    write_events(tmp_path / "events.csv", seed=1)
    assert a != source(tmp_path / "events.csv").fingerprint()


BAD_FILES = {
    "missing column": ("user,item,time\n1,2,3\n", {}, "column 'timestamp', row 1 (the header): no such column"),
    "bad timestamp": ("user,item,timestamp\n1,2,2024-01-01\n1,3,2024-13-45\n", {},
                      "column 'timestamp', row 2 (line 3): cannot parse '2024-13-45'"),
    "number then text": ("user,item,timestamp\n1,2,17\n1,3,soon\n", {}, "column 'timestamp', row 2 (line 3): cannot parse 'soon'"),
    "empty cell": ("user,item,timestamp\n1,2,3\n1,,4\n", {}, "column 'item', row 2 (line 3): empty value"),
    "empty file": ("", {}, "the file is empty"),
    "header only": ("user,item,timestamp\n", {}, "has a header but no rows"),
    "short row": ("user,item,timestamp\n1,2,3\n4,5\n", {}, "line 3: expected 3 fields separated by ',', found 2"),
    "bad rating": ("user,item,timestamp,r\n1,2,3,4.5\n1,3,4,good\n", {"rating": "r"}, "column 'r', row 2 (line 3): cannot parse 'good'"),
    "bad format": ("user,item,timestamp\n1,2,01/02/2024\n", {"timestamp_format": "%Y-%m-%d"},
                   "column 'timestamp', row 1 (line 2): cannot parse '01/02/2024' as a time in the format"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_input_is_one_line_naming_file_column_and_row(tmp_path, case):
    text, options, expected = BAD_FILES[case]
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        InteractionsFile(str(path), **options).load()
    message = str(error.value)
    assert "\n" not in message and message.startswith(str(path)) and expected in message, message


def test_missing_parquet_column_and_missing_file(tmp_path):
    pq.write_table(pa.table({"u": ["a"], "i": [1], "t": [1]}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=r"x\.parquet, column 'user', the schema: no such column .* 'u', 'i', 't': set --data.source.user"):
        InteractionsFile(str(tmp_path / "x.parquet")).load()
    with pytest.raises(FileNotFoundError, match="point --data.source.path at your"):
        InteractionsFile(str(tmp_path / "nope.csv")).load()


def test_real_ml1m_as_a_headerless_space_separated_file(shared_data):
    """LRURec's ML-1M file (``user item`` lines, gzipped, no header, file order = time order) read as your own file."""
    src = InteractionsFile(str(shared_data / "lrurec" / "ml-1m.txt.gz"), user="0", item="1", timestamp=None, header=False)
    seqs = load_sequences(src, Preprocessing(sort_by="time"), None)
    assert (seqs.num_users, seqs.num_items, seqs.num_interactions) == (6040, 3416, 999_611)
    assert seqs.id_kinds == ("int", "int") and seqs.raw_user_ids()[0] == 1


def test_a_cache_written_before_id_kinds_still_loads_with_text_ids(tmp_path):
    seqs = Sequences(np.array([0, 2]), np.array([1, 2]), np.zeros(2), np.array(["7"]), np.array(["", "3", "4"]))
    seqs.save(tmp_path / "old")
    back = Sequences.load(tmp_path / "old")
    assert back.id_kinds is None and list(back.raw_user_ids()) == ["7"] and list(back.raw_item_ids()) == ["3", "4"]
    seqs.id_kinds = ("int", "int")
    seqs.save(tmp_path / "new")
    assert list(Sequences.load(tmp_path / "new").raw_item_ids(np.array([2, 1]))) == [4, 3]


def test_ids_are_stripped_of_surrounding_whitespace_with_a_warning(tmp_path, caplog):
    """`` 5`` and ``5`` are one user (the README's choice: strip, not refuse); ids that were padded are counted."""
    (tmp_path / "spaced.csv").write_text("user,item,timestamp\n 5,m1,1\n5,m2,2\n5 , m3,3\n7,\tm1,4\n")
    with caplog.at_level("WARNING"):
        inter = InteractionsFile(str(tmp_path / "spaced.csv")).load()
    assert inter.users.dtype == np.int64 and list(inter.users) == [5, 5, 5, 7]
    assert list(inter.items) == ["m1", "m2", "m3", "m1"]
    assert "column 'user': 2 ids had surrounding whitespace" in caplog.text
    assert "column 'item': 2 ids had surrounding whitespace" in caplog.text
    pq.write_table(pa.table({"user": [" a", "a "], "item": ["x", "y"], "timestamp": [1, 2]}), tmp_path / "s.parquet")
    assert list(InteractionsFile(str(tmp_path / "s.parquet")).load().users) == ["a", "a"]
    (tmp_path / "blank.csv").write_text("user,item,timestamp\n1,m1,1\n  ,m2,2\n")
    with pytest.raises(ValueError, match=r"blank\.csv, column 'user', row 2 \(line 3\): empty value"):
        InteractionsFile(str(tmp_path / "blank.csv")).load()


def test_a_stripped_file_does_not_reuse_a_cache_of_its_unstripped_ids(tmp_path):
    write_events(tmp_path / "events.csv")
    assert ":ids=stripped:" in source(tmp_path / "events.csv").fingerprint()


def test_a_repeated_column_name_is_an_error_naming_it(tmp_path):
    (tmp_path / "twice.csv").write_text("U,I,T,I\na,x,1,y\nb,z,2,w\n")
    with pytest.raises(ValueError) as error:
        InteractionsFile(str(tmp_path / "twice.csv"), user="U", item="I", timestamp="T").load()
    assert str(error.value) == (f"{tmp_path / 'twice.csv'}, column 'I', row 1 (the header): 2 columns are named 'I' "
                                "(columns 2 and 4), so which holds the item is ambiguous; rename the other one")
    unmapped = InteractionsFile(str(tmp_path / "twice.csv"), user="U", item="T", timestamp=None).load()
    assert list(unmapped.items) == [1, 2]  # a repeated name no role uses is harmless


def test_a_truncated_gzip_names_the_file(tmp_path):
    write_events(tmp_path / "events.csv", num_users=1000)
    whole = gzip.compress((tmp_path / "events.csv").read_bytes())
    path = tmp_path / "events.csv.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError) as error:
        source(path).load()
    assert str(error.value).startswith(f"{path}: cannot be read (")
    assert "the file is truncated or corrupt; write or fetch it again" in str(error.value)
