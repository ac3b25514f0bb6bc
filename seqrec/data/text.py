"""Whitespace- and separator-delimited text: gzip detection by content, a fast vectorised integer parser, plain lines.

Every source that reads text shares these (MovieLens, SASRec/S3Rec, XLong, the item-feature readers, the
LM text). Integer columns are parsed with one ``np.fromstring`` pass; only when that fails does a
line-by-line pass run, to name the first bad line and field in the error.
"""

from __future__ import annotations

import gzip
import os
import warnings
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_NEWLINE, _SPACE, _TAB = 10, 32, 9
_INT64_MAX = np.iinfo(np.int64).max


def read_maybe_gzip(path: str | os.PathLike) -> bytes:
    """All bytes of ``path``, decompressed when the file is gzip (magic bytes ``1f 8b``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Expected a data file at {path}, found {'a directory' if path.exists() else 'nothing'}.")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                return f.read()
        except (OSError, EOFError, zlib.error) as e:
            raise ValueError(f"{path} looks gzipped but cannot be decompressed ({e}); fetch it again.") from None
    return path.read_bytes()


def _normalise(data: bytes) -> bytes:
    """CRLF → LF and no trailing blank lines (leading content is kept for line numbering)."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return data.rstrip(b"\n\t ")


def _line_text(data: bytes, line_index: int) -> str:
    """Line ``line_index`` (0-based) of ``data``, decoded and shortened for an error message."""
    start = 0
    for _ in range(line_index):
        start = data.index(b"\n", start) + 1
    end = data.find(b"\n", start)
    text = data[start : end if end >= 0 else len(data)].decode("latin-1")
    return text if len(text) <= 200 else text[:200] + "..."


def _fields_per_line(arr: np.ndarray, newlines: np.ndarray, sep_byte: int | None) -> np.ndarray:
    """Number of fields on each line: separator count + 1, or whitespace-separated token count."""
    n_lines = len(newlines) + 1
    if sep_byte is not None:
        seps = np.flatnonzero(arr == sep_byte)
        return np.bincount(np.searchsorted(newlines, seps), minlength=n_lines) + 1
    blank = (arr == _SPACE) | (arr == _TAB) | (arr == _NEWLINE)
    starts = np.flatnonzero(~blank & np.concatenate(([True], blank[:-1])))
    return np.bincount(np.searchsorted(newlines, starts), minlength=n_lines)


def _slow_parse(
    data: bytes,
    sep: bytes | None,
    where: str,
    names: Sequence[str],
    float_cols: Sequence[int],
    first_line: int,
) -> list[list[float | int]]:
    """Line-by-line parse used only to report the first bad field (or to accept float columns)."""
    rows: list[list[float | int]] = []
    for i, line in enumerate(data.split(b"\n")):
        fields = line.split(sep) if sep is not None else line.split()
        row: list[float | int] = []
        for j, field in enumerate(fields):
            is_float = j in float_cols
            try:
                value: float | int = float(field) if is_float else int(field)
            except ValueError:
                name = names[min(j, len(names) - 1)] if names else f"field {j + 1}"
                raise ValueError(
                    f"{where}, line {first_line + i}: field {j + 1} ({name}) is {field.decode('latin-1')!r}, "
                    f"expected {'a number' if is_float else 'an integer'}. Line: "
                    f"{_line_text(data, i)!r}. Fix or remove the line, or fetch the file again."
                ) from None
            if not is_float and not -(2**63) <= value < 2**63:
                raise ValueError(f"{where}, line {first_line + i}: field {j + 1} ({field!r}) does not fit in int64.")
            row.append(value)
        rows.append(row)
    return rows


def parse_int_columns(
    data: bytes,
    n_cols: int,
    *,
    sep: bytes | None = None,
    where: str = "<data>",
    names: Sequence[str] = (),
    float_cols: Sequence[int] = (),
    first_line: int = 1,
) -> list[np.ndarray]:
    """Parse delimited integer text (one record per line) into ``n_cols`` int64 columns, vectorised.

    ``sep=None`` splits on runs of spaces/tabs; otherwise on exactly ``sep`` (e.g. ``b"\\t"``,
    ``b"::"``). Columns in ``float_cols`` may hold non-integers, in which case they come back float64.
    A line with the wrong number of fields or a non-integer id raises ``ValueError`` naming the line.
    """
    data = _normalise(data)
    if not data:
        return [np.zeros(0, dtype=np.int64) for _ in range(n_cols)]
    data, split = _unify_sep(data, sep)
    counts = _check_fields(data, split, where, first_line, sep, exact=n_cols)
    values = _fast_ints(data, split, int(counts.sum()))
    if values is not None:
        table = values.reshape(-1, n_cols)
        return [table[:, j].copy() for j in range(n_cols)]
    rows = _slow_parse(data, split, where, names, float_cols, first_line)
    columns = []
    for j in range(n_cols):
        column = [row[j] for row in rows]
        is_int = all(isinstance(v, int) for v in column)
        columns.append(np.array(column, dtype=np.int64 if is_int else np.float64))
    return columns


def parse_int_lines(
    data: bytes,
    *,
    where: str = "<data>",
    min_fields: int = 1,
    first_line: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Parse variable-length whitespace-separated integer lines: (flat int64 values, fields per line)."""
    data = _normalise(data)
    if not data:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    counts = _check_fields(data, None, where, first_line, None, minimum=min_fields)
    values = _fast_ints(data, None, int(counts.sum()))
    if values is None:
        rows = _slow_parse(data, None, where, (), (), first_line)
        values = np.fromiter((v for row in rows for v in row), dtype=np.int64, count=int(counts.sum()))
    return values, counts


def _unify_sep(data: bytes, sep: bytes | None) -> tuple[bytes, bytes | None]:
    """Rewrite a multi-byte separator (``::``) as a tab so every separator is one byte."""
    if sep is not None and len(sep) > 1:
        return data.replace(sep, b"\t"), b"\t"
    return data, sep


def _check_fields(
    data: bytes,
    split: bytes | None,
    where: str,
    first_line: int,
    sep: bytes | None,
    *,
    exact: int | None = None,
    minimum: int = 1,
) -> np.ndarray:
    """Fields per line; ValueError naming the first line whose count is wrong."""
    arr = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(arr == _NEWLINE)
    counts = _fields_per_line(arr, newlines, None if split is None else split[0])
    bad = np.flatnonzero(counts != exact) if exact is not None else np.flatnonzero(counts < minimum)
    if len(bad):
        i = int(bad[0])
        expected = f"{exact} fields" if exact is not None else f"at least {minimum} field(s)"
        sep_name = "whitespace" if sep is None else repr(sep.decode("latin-1"))
        raise ValueError(
            f"{where}, line {first_line + i}: expected {expected} separated by {sep_name}, found "
            f"{int(counts[i])} (line: {_line_text(data, i)!r}). The file is truncated, malformed or not in "
            f"this format; fix or remove the line, or fetch the file again."
        )
    return counts


def _fast_ints(data: bytes, split: bytes | None, total: int) -> np.ndarray | None:
    """All integers of ``data`` via ``np.fromstring``; None when anything is not a plain int64."""
    text = data.decode("latin-1")
    if split is not None and split not in (b" ", b"\t"):
        text = text.replace(split.decode("latin-1"), " ")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            values = np.fromstring(text, dtype=np.int64, sep=" ")
    except (ValueError, DeprecationWarning):
        return None
    if len(values) != total or (total and values.max() == _INT64_MAX):
        return None
    return values


def read_sentences(path: str | os.PathLike) -> list[str]:
    """Non-empty lines of a (possibly gzipped) UTF-8 text file, stripped.

    ValueError naming the file and line when the text is not UTF-8 or holds NUL bytes (a corrupt or
    binary file read as text).
    """
    data = read_maybe_gzip(path)
    nul = data.find(b"\x00")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{path}, line {line}: not UTF-8 text (byte {data[error.start]:#04x}); the file is corrupt or not "
            "in this format: fetch it again or fix the line."
        ) from None
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise ValueError(f"{path}, line {line}: holds NUL bytes, not text; the file is corrupt: fetch it again.")
    return [line.strip() for line in text.splitlines() if line.strip()]
