"""The shared text parser: integer columns and lines (vectorised, errors naming the line), gzip by content, sentences."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from seqrec.data.text import parse_int_columns, parse_int_lines, read_maybe_gzip, read_sentences


def test_parse_int_columns_accepts_float_columns() -> None:
    users, ratings = parse_int_columns(b"1\t3.5\n2\t4\n", 2, sep=b"\t", float_cols=(1,))
    assert users.dtype == np.int64 and ratings.dtype == np.float64
    np.testing.assert_array_equal(ratings, [3.5, 4.0])


def test_parse_int_columns_crlf_and_trailing_blank_lines() -> None:
    users, items = parse_int_columns(b"1 2\r\n3 4\r\n\r\n", 2)
    np.testing.assert_array_equal(users, [1, 3])
    np.testing.assert_array_equal(items, [2, 4])


def test_parse_int_columns_multi_byte_separator_and_errors() -> None:
    users, items = parse_int_columns(b"1::10\n2::20\n", 2, sep=b"::")
    np.testing.assert_array_equal(items, [10, 20])
    with pytest.raises(ValueError, match=r"f\.txt, line 2: expected 2 fields separated by '::', found 1"):
        parse_int_columns(b"1::10\n2\n", 2, sep=b"::", where="f.txt")
    with pytest.raises(ValueError, match=r"line 1: field 2 \(item\) is 'x', expected an integer"):
        parse_int_columns(b"1 x\n", 2, names=("user", "item"))


def test_parse_int_lines_gives_flat_values_and_counts() -> None:
    values, counts = parse_int_lines(b"1 2 3\n4 5\n")
    assert values.tolist() == [1, 2, 3, 4, 5] and counts.tolist() == [3, 2]
    with pytest.raises(ValueError, match="line 2: expected at least 2 field"):
        parse_int_lines(b"1 2\n3\n", min_fields=2)


def test_gzip_is_detected_by_content_and_sentences_are_stripped(tmp_path) -> None:
    path = tmp_path / "text.data"
    path.write_bytes(gzip.compress(b" a b \n\n c\n"))
    assert read_maybe_gzip(path) == b" a b \n\n c\n"
    assert read_sentences(path) == ["a b", "c"]
    with pytest.raises(FileNotFoundError, match="found nothing"):
        read_maybe_gzip(tmp_path / "missing.txt")
    (tmp_path / "broken.gz").write_bytes(b"\x1f\x8bnot gzip")
    with pytest.raises(ValueError, match="cannot be decompressed"):
        read_maybe_gzip(tmp_path / "broken.gz")


def test_corrupt_gzip_and_binary_text_name_the_file_and_line(tmp_path) -> None:
    data = bytearray(gzip.compress(bytes(range(256)) * 64 + b"1 2\n" * 5000))
    for i in range(30, 300, 7):
        data[i] ^= 0xFF  # corrupt deflate data: zlib.error, not an OSError
    (tmp_path / "bad.txt.gz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"bad.txt.gz looks gzipped but cannot be decompressed .*fetch it again"):
        read_maybe_gzip(tmp_path / "bad.txt.gz")
    (tmp_path / "latin.txt").write_bytes(b"a b\nc \xff d\n")
    with pytest.raises(ValueError, match=r"latin.txt, line 2: not UTF-8 text \(byte 0xff\)"):
        read_sentences(tmp_path / "latin.txt")
    (tmp_path / "binary.txt").write_bytes(b"a b\nc d\n\x00\x00\x01")
    with pytest.raises(ValueError, match=r"binary.txt, line 3: holds NUL bytes"):
        read_sentences(tmp_path / "binary.txt")
