"""Your own interactions: a CSV, TSV or Parquet file (optionally gzipped) with any column names.

``InteractionsFile(path, user=..., item=..., timestamp=..., rating=...)`` maps the file's columns onto the
interactions table; everything after it (rating filter, ordering by time, k-core, every split, the sequence
cache) is the shared preprocessing. Ids may be integers or strings: they are kept, with their type, in the
sequence cache (``Sequences.user_ids`` / ``item_ids`` / ``id_kinds``), so predictions come back in the
file's own ids. A CSV column of canonical integers (``0``, ``17``, ``-3``; no leading zeros) becomes int64
ids, anything else stays a string; Parquet columns keep their stored type.

Timestamps: integers or floats (any unit; the temporal split's ``seconds_per_day`` says which), Arrow
timestamps or dates, or text: ISO 8601 (``2024-03-01``, ``2024-03-01 12:30:00``, ``...T12:30:00Z``) or any
``timestamp_format`` (``%d/%m/%Y %H:%M``); text and Arrow timestamps become Unix seconds. Without a timestamp
column (``timestamp: null``) the file's order within each user is the time order.

Text ids are stripped of surrounding whitespace (`` 5``, ``5 `` and ``5`` are one id; a warning counts the ids
that were padded), whatever the format: a choice, so that ``a, b`` exports and hand-edited files do not split one
user in two; an id that is only whitespace is an empty cell.

Every problem with the input is one line naming the file, the column and the row: a missing column (with
the columns the file has), a mapped column name given twice, an empty cell, an id or timestamp that cannot be
parsed, an empty file, a truncated or corrupt file (a cut ``.gz``). Rows are counted from 1 over the data (the
header is not a row); for text files the physical line is given too.

The Arrow helpers here (``read_table_columns``, ``interactions_from_table``) are shared with the Hugging Face
source (``seqrec.data.sources.hf_dataset``).
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import logging
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from seqrec.data.download import sha256_of
from seqrec.data.interactions import Interactions, Source
from seqrec.data.sources.sasrec_text import positions_within_user

log = logging.getLogger(__name__)

FileFormat = Literal["auto", "csv", "tsv", "parquet"]
_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
_CANONICAL_INT = r"^(0|-?[1-9][0-9]{0,17})$"  # round-trips through int64 and back to the same text
_INT_TEXT = r"^[+-]?[0-9]+$"
_FLOAT_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
ID_RULES = "ids=stripped"  # part of every file source's fingerprint: a cache of unstripped ids is other data


def _pyarrow():  # noqa: ANN202 (module)
    """pyarrow, or a one-line error saying how to install it."""
    try:
        import pyarrow
        import pyarrow.compute  # noqa: F401
    except ImportError:
        raise ImportError("reading interaction files needs pyarrow: pip install pyarrow (or pip install -e .)") from None
    return pyarrow


def optional(value: str | None) -> str | None:
    """None for an unset optional text option.

    ``--data.source.timestamp null`` reaches a nested source as the text "None" (jsonargparse 4.x turns a
    null into "None" for ``str | None`` arguments of a subclass nested in a subclass), so "None" and "null"
    mean unset here; a column really named "None" cannot be mapped.
    """
    return None if value is None or str(value).strip() in ("", "None", "null", "~") else value


# --- the column mapping -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ColumnMap:
    """Which column of the input holds each field (timestamp and rating optional)."""

    user: str = "user"
    item: str = "item"
    timestamp: str | None = "timestamp"
    rating: str | None = None

    def roles(self) -> dict[str, str]:
        """``{role: column}`` of the roles that are mapped (user, item, then timestamp and rating if set)."""
        out = {"user": self.user, "item": self.item}
        if self.timestamp is not None:
            out["timestamp"] = self.timestamp
        if self.rating is not None:
            out["rating"] = self.rating
        return out

    def key(self) -> str:
        """A stable text of the mapping (part of a source's fingerprint: another mapping is other data)."""
        return ",".join(f"{role}={column}" for role, column in self.roles().items())


@dataclass(frozen=True)
class Where:
    """Where a table came from, for error messages: the file, and how a row maps to a line of text."""

    name: str
    first_line: int | None = None  # physical line of data row 1 (2 with a header); None when not a text file
    row_offset: int = 0  # rows before this table (batched reads)

    def row(self, index: int) -> str:
        """``row N`` (1-based, over the whole input), with the text line where there is one."""
        n = self.row_offset + index + 1
        return f"row {n}" if self.first_line is None else f"row {n} (line {n + self.first_line - 1})"


def input_error(where: Where, column: str, index: int | None, problem: str, fix: str = "") -> ValueError:
    """A one-line ValueError: ``file, column 'c', row N: problem; fix``."""
    at = f", {where.row(index)}" if index is not None else ""
    return ValueError(f"{where.name}, column {column!r}{at}: {problem}" + (f"; {fix}" if fix else ""))


# --- Arrow columns -> numpy ---------------------------------------------------------------------------
def _first_failure(array, convert: Callable) -> int:  # noqa: ANN001 (a pyarrow Array)
    """Index of the first element of ``array`` on which ``convert`` raises (binary search over slices)."""
    lo, hi = 0, len(array)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            convert(array.slice(lo, mid - lo))
        except Exception:  # noqa: BLE001 (any conversion error)
            hi = mid
        else:
            lo = mid
    return lo


def _convert(array, convert: Callable, where: Where, column: str, what: str, fix: str):  # noqa: ANN001, ANN202
    """``convert(array)``; on failure, a one-line error naming the first row that cannot be converted."""
    try:
        return convert(array)
    except Exception:  # noqa: BLE001 (pyarrow raises ArrowInvalid / ArrowNotImplementedError)
        bad = _first_failure(array, convert)
        raise input_error(where, column, bad, f"cannot parse {array[bad].as_py()!r} as {what}", fix) from None


def _first_true(mask) -> int:  # noqa: ANN001 (pyarrow boolean array)
    """Index of the first True of a boolean Arrow array (-1 when none)."""
    pa = _pyarrow()
    return int(pa.compute.index(mask, True).as_py())


def _unwrap(column):  # noqa: ANN001, ANN202
    """One contiguous Arrow array, dictionary-encoded columns decoded to their values."""
    pa = _pyarrow()
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def _check_nulls(array, where: Where, column: str) -> None:  # noqa: ANN001
    """A one-line error at the first empty cell."""
    if array.null_count:
        bad = _first_true(array.is_null())
        raise input_error(where, column, bad, "empty value", "every row needs a value in this column")


@contextlib.contextmanager
def reading(path: Path | str) -> Iterator[None]:
    """A read that fails on the bytes of ``path`` (a cut ``.gz``, a damaged Parquet file, an I/O error) as one
    ValueError naming it; a missing file stays a FileNotFoundError."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error) as error:
        detail = " ".join((str(error) or type(error).__name__).split())
        raise ValueError(f"{path}: cannot be read ({detail}); the file is truncated or corrupt; write or fetch it "
                         "again") from None


def stripped_ids(array, where: Where, column: str):  # noqa: ANN001, ANN201 (pyarrow arrays)
    """Text ids without surrounding whitespace (a warning counts those that had it); an id of whitespace only is an
    empty value."""
    pa = _pyarrow()
    pc = pa.compute
    trimmed = pc.utf8_trim_whitespace(array)
    changed = int(pc.sum(pc.not_equal(array, trimmed)).as_py() or 0)
    if changed:
        empty = pc.equal(trimmed, "")
        if bool(pc.any(empty).as_py()):
            raise input_error(where, column, _first_true(empty), "empty value", "every row needs a value in this column")
        log.warning("%s, column %r: %d ids had surrounding whitespace, stripped (' 5' and '5' are one id)",
                    where.name, column, changed)
    return trimmed


def id_column(array, where: Where, column: str, text_ints: bool) -> np.ndarray:  # noqa: ANN001
    """Raw ids as numpy: int64 for integer columns (and, with ``text_ints``, text of canonical integers), else str
    stripped of surrounding whitespace (``stripped_ids``)."""
    pa = _pyarrow()
    pc = pa.compute
    array = _unwrap(array)
    _check_nulls(array, where, column)
    kind = array.type
    if pa.types.is_integer(kind):
        return array.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(kind):
        values = array.to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)))
        if len(bad):
            raise input_error(where, column, int(bad[0]), f"id {values[bad[0]]!r} is not an integer",
                              "ids must be integers or text")
        return values.astype(np.int64)
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        array = array.cast(pa.string())
    array = stripped_ids(array, where, column)
    if text_ints and len(array) and bool(pc.all(pc.match_substring_regex(array, _CANONICAL_INT)).as_py()):
        return array.cast(pa.int64()).to_numpy(zero_copy_only=False)
    values = array.to_numpy(zero_copy_only=False)
    return values.astype(str) if len(values) else np.zeros(0, dtype="<U1")


def timestamp_column(array, where: Where, column: str, fmt: str | None) -> np.ndarray:  # noqa: ANN001
    """Timestamps as numpy: numbers as they are (int64 or float64); datetimes and dates as Unix seconds."""
    pa = _pyarrow()
    pc = pa.compute
    array = _unwrap(array)
    _check_nulls(array, where, column)
    fix = "timestamps must be numbers, ISO 8601 dates/times, or match --data.source.timestamp_format"
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if fmt is not None:
            array = _convert(array, lambda a: pc.strptime(a, format=fmt, unit="us"), where, column,
                             f"a time in the format {fmt!r}", fix)
        elif len(array) and bool(pc.match_substring_regex(array.slice(0, 1), _FLOAT_TEXT)[0].as_py()):
            numeric = pc.match_substring_regex(array, _FLOAT_TEXT)  # numbers as text: all of them must be
            if not bool(pc.all(numeric).as_py()):
                bad = _first_true(pc.invert(numeric))
                raise input_error(where, column, bad, f"cannot parse {array[bad].as_py()!r} as a number (row 1 holds "
                                  "one)", fix)
            if bool(pc.all(pc.match_substring_regex(array, _INT_TEXT)).as_py()):
                return array.cast(pa.int64()).to_numpy(zero_copy_only=False)
            return array.cast(pa.float64()).to_numpy(zero_copy_only=False)
        else:
            array = _parse_datetimes(array, where, column, fix)
        kind = array.type
    if pa.types.is_integer(kind):
        return array.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        values = array.cast(pa.float64()).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            raise input_error(where, column, int(bad[0]), f"timestamp {values[bad[0]]!r} is not a finite number", fix)
        return values
    if pa.types.is_date(kind):
        array = array.cast(pa.timestamp("s"))
        kind = array.type
    if pa.types.is_timestamp(kind):
        micros = array.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64()).to_numpy(zero_copy_only=False)
        if np.all(micros % 1_000_000 == 0):
            return micros // 1_000_000
        return micros / 1e6
    raise input_error(where, column, None, f"holds {kind} values, not timestamps", fix)


def _parse_datetimes(array, where: Where, column: str, fix: str):  # noqa: ANN001, ANN202
    """ISO 8601 text as Arrow timestamps: all without a zone (taken as UTC), or all with one (``Z``, ``+02:00``)."""
    pa = _pyarrow()
    naive, zoned = pa.timestamp("us"), pa.timestamp("us", tz="UTC")
    for kind in (naive, zoned):
        try:
            return array.cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    try:  # the first value's style decides which row is the bad one
        array.slice(0, 1).cast(naive)
        kind = naive
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        kind = zoned
    what = "a timestamp " + ("without a zone (as the first row)" if kind is naive else "with a zone (as the first row)")
    return _convert(array, lambda a: a.cast(kind), where, column, what, fix)


def rating_column(array, where: Where, column: str) -> np.ndarray:  # noqa: ANN001
    """Ratings as float32."""
    pa = _pyarrow()
    array = _unwrap(array)
    _check_nulls(array, where, column)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        array = _convert(array, lambda a: a.cast(pa.float64()), where, column, "a number", "ratings must be numbers")
    elif not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type) or pa.types.is_decimal(array.type)):
        raise input_error(where, column, None, f"holds {array.type} values, not numbers", "ratings must be numbers")
    return array.cast(pa.float64()).to_numpy(zero_copy_only=False).astype(np.float32)


def check_columns(
    names: list[str], columns: ColumnMap, where: str, header: str = "row 1 (the header)", prefix: str = "--data.source."
) -> None:
    """A one-line error naming the first mapped column the input lacks (the columns it has and the flag to set) or
    names twice (which of the two holds the role is ambiguous)."""
    for role, column in columns.roles().items():
        positions = [i + 1 for i, name in enumerate(names) if name == column]
        if len(positions) > 1:
            listed = ", ".join(str(p) for p in positions[:-1]) + f" and {positions[-1]}"
            raise ValueError(f"{where}, column {column!r}, {header}: {len(positions)} columns are named {column!r} "
                             f"(columns {listed}), so which holds the {role} is ambiguous; rename the other one")
        if column not in names:
            shown = ", ".join(repr(n) for n in names[:20]) + (", ..." if len(names) > 20 else "")
            optional = " (or null for none)" if role in ("timestamp", "rating") else ""
            raise ValueError(
                f"{where}, column {column!r}, {header}: no such column for the {role}; the columns are "
                f"{shown}: set {prefix}{role} COLUMN{optional}"
            )


def interactions_from_table(
    table, columns: ColumnMap, where: Where, text_ints: bool = False, timestamp_format: str | None = None  # noqa: ANN001
) -> Interactions:
    """An Arrow table's mapped columns as ``Interactions`` (columnar: Arrow -> numpy, no Python loop over rows).

    Without a timestamp column, ``times`` is each event's position within its user in table order.
    """
    users = id_column(table.column(columns.user), where, columns.user, text_ints)
    items = id_column(table.column(columns.item), where, columns.item, text_ints)
    if columns.timestamp is not None:
        times = timestamp_column(table.column(columns.timestamp), where, columns.timestamp, timestamp_format)
    else:
        times = positions_within_user(users)
    ratings = None if columns.rating is None else rating_column(table.column(columns.rating), where, columns.rating)
    return Interactions(users=users, items=items, times=times, ratings=ratings)


def concat_interactions(parts: list[Interactions]) -> Interactions:
    """Batches of one input as one table: ids of one kind throughout (text wins), float times if any batch has them."""
    if len(parts) == 1:
        return parts[0]

    def joined(name: str) -> np.ndarray:
        arrays = [getattr(p, name) for p in parts]
        if any(a.dtype.kind in "UO" for a in arrays):
            arrays = [a.astype(str) for a in arrays]
        return np.concatenate(arrays)

    times = [np.asarray(p.times) for p in parts]
    dtype = np.float64 if any(t.dtype.kind == "f" for t in times) else np.int64
    return Interactions(
        users=joined("users"),
        items=joined("items"),
        times=np.concatenate([t.astype(dtype) for t in times]),
        ratings=None if parts[0].ratings is None else np.concatenate([p.ratings for p in parts]),
    )


# --- reading files ------------------------------------------------------------------------------------
def _magic(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(4)


def detect_format(path: Path) -> tuple[str, bool]:
    """(``csv`` | ``tsv`` | ``parquet`` | ``text``, gzipped) from the name (``.csv``, ``.tsv``, ``.parquet``, ``.gz``) or content."""
    if path.is_dir():
        return "parquet", False
    gz = _magic(path)[:2] == _GZIP_MAGIC
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in (".gz", ".gzip"):
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last in (".parquet", ".pq") or (not gz and _magic(path) == _PARQUET_MAGIC):
        return "parquet", gz
    if last in (".tsv", ".tab"):
        return "tsv", gz
    if last == ".csv":
        return "csv", gz
    return "text", gz


def _open_text(path: Path, gz: bool):  # noqa: ANN202
    """A pyarrow input stream of the (decompressed) file."""
    pa = _pyarrow()
    return pa.input_stream(str(path), compression="gzip" if gz else None)


def _sniff_delimiter(path: Path, gz: bool) -> str:
    """The delimiter of a text file of unknown kind (``,`` ``\\t`` ``;`` ``|`` or a space), from its first lines."""
    opener = gzip.open if gz else open
    with opener(path, "rb") as handle:
        head = handle.read(1 << 16).decode("utf-8", errors="replace")
    try:
        return csv.Sniffer().sniff("\n".join(head.splitlines()[:20]), delimiters=",\t;| ").delimiter
    except csv.Error:
        return ","


def _check_not_empty(path: Path, gz: bool) -> None:
    """A one-line error for a file with no bytes (or, gzipped, nothing inside)."""
    empty = path.stat().st_size == 0
    if not empty and gz:
        with gzip.open(path, "rb") as handle:
            empty = not handle.read(1).strip()
    if empty:
        raise ValueError(f"{path}: the file is empty; expected a header line and one row per interaction")


def _csv_parse_error(path: Path, gz: bool, read_options, parse_options, convert_options, error: Exception) -> ValueError:  # noqa: ANN001
    """Re-read single-threaded to find the physical line pyarrow's CSV error is about; a one-line ValueError."""
    pa = _pyarrow()
    from pyarrow import csv as pa_csv

    found: list = []

    def handler(row) -> str:  # noqa: ANN001 (pyarrow InvalidRow)
        found.append(row)
        return "error"

    options = pa_csv.ParseOptions(delimiter=parse_options.delimiter, invalid_row_handler=handler)
    single = pa_csv.ReadOptions(use_threads=False, column_names=read_options.column_names,
                                autogenerate_column_names=read_options.autogenerate_column_names)
    try:
        pa_csv.read_csv(_open_text(path, gz), read_options=single, parse_options=options, convert_options=convert_options)
    except (pa.ArrowInvalid, ValueError):
        pass
    message = str(error).replace("\n", " ")
    if found:
        row = found[0]
        text = (row.text or "")[:200]
        return ValueError(f"{path}, line {row.number}: expected {row.expected_columns} fields separated by "
                          f"{parse_options.delimiter!r}, found {row.actual_columns}: {text!r}")
    return ValueError(f"{path}: cannot read as delimited text ({message})")


def read_table_columns(
    path: Path, columns: ColumnMap, file_format: FileFormat = "auto", delimiter: str | None = None, header: bool = True
) -> tuple[object, Where, bool]:
    """(Arrow table of the mapped columns, where rows came from, whether text ids may become integers).

    Text files are read with every mapped column as text (conversions, and their errors, are ours);
    Parquet keeps its stored types.
    """
    pa = _pyarrow()
    detected, gz = detect_format(path)
    kind = detected if file_format == "auto" else file_format
    if kind == "parquet":
        return _read_parquet(path, columns, gz), Where(str(path)), False
    from pyarrow import csv as pa_csv

    _check_not_empty(path, gz)
    sep = delimiter or {"csv": ",", "tsv": "\t"}.get(kind) or _sniff_delimiter(path, gz)
    read_options = pa_csv.ReadOptions(autogenerate_column_names=not header)
    parse_options = pa_csv.ParseOptions(delimiter=sep)
    try:
        names = pa_csv.open_csv(_open_text(path, gz), read_options=read_options, parse_options=parse_options).schema.names
    except (pa.ArrowInvalid, ValueError) as error:
        if "Empty CSV file" in str(error):
            raise ValueError(f"{path}: the file is empty; expected a header line and one row per interaction") from None
        raise _csv_parse_error(path, gz, read_options, parse_options, None, error) from None
    if not header:  # f0, f1, ...: let a mapping name columns by position ("0", "1", ...) too
        names = [str(i) for i in range(len(names))]
        read_options = pa_csv.ReadOptions(column_names=names)
    check_columns(names, columns, str(path))
    wanted = list(dict.fromkeys(columns.roles().values()))
    convert_options = pa_csv.ConvertOptions(
        include_columns=wanted, column_types={c: pa.string() for c in wanted}, strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )
    try:
        table = pa_csv.read_csv(_open_text(path, gz), read_options=read_options, parse_options=parse_options,
                                convert_options=convert_options)
    except (pa.ArrowInvalid, ValueError) as error:
        raise _csv_parse_error(path, gz, read_options, parse_options, convert_options, error) from None
    if table.num_rows == 0:
        raise ValueError(f"{path}: the file has a header but no rows; expected one row per interaction")
    return table, Where(str(path), first_line=2 if header else 1), True


def _read_parquet(path: Path, columns: ColumnMap, gz: bool):  # noqa: ANN202
    """The mapped columns of a Parquet file (or a directory of Parquet files, e.g. a Spark or pandas export)."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    source = path
    if gz:
        with gzip.open(path, "rb") as handle:
            source = pa.BufferReader(handle.read())
    try:
        names = list(pq.read_schema(source).names) if not path.is_dir() else list(pq.ParquetDataset(str(path)).schema.names)
    except (pa.ArrowInvalid, OSError) as error:
        raise ValueError(f"{path}: not a readable Parquet file ({str(error).splitlines()[0]})") from None
    check_columns(names, columns, str(path), header="the schema")
    table = pq.read_table(source if gz else str(path), columns=list(dict.fromkeys(columns.roles().values())))
    if table.num_rows == 0:
        raise ValueError(f"{path}: the file has no rows; expected one row per interaction")
    return table


def fingerprint_of_path(path: Path) -> str:
    """sha256 of a file, or of a directory's files (names and contents, sorted)."""
    if not path.is_dir():
        return sha256_of(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))):
        digest.update(f"{file.relative_to(path)}:{sha256_of(file)}\n".encode())
    return digest.hexdigest()


# --- the source ----------------------------------------------------------------------------------------
class InteractionsFile(Source):
    """Interactions from one CSV / TSV / Parquet file (gzip allowed) or a directory of Parquet files.

    Args:
        path: the file (``events.csv``, ``events.tsv.gz``, ``events.parquet``, ``part-*.parquet`` directory).
        user, item: the columns holding user and item ids (integers or text).
        timestamp: the column holding event times (numbers, datetimes or text dates); None: file order.
        rating: an optional numeric column (``preprocessing.min_rating`` filters on it).
        format: "auto" (from the name: ``.csv``, ``.tsv``, ``.parquet``, else the content), or forced.
        delimiter: the field separator of a text file (default: from the format, or sniffed).
        header: whether a text file's first line names the columns (without one, name columns "0", "1", ...).
        timestamp_format: a ``strptime`` format for text timestamps that are not ISO 8601 (``%d/%m/%Y``).
        name: the name of the cached sequences (default: the file's stem).
    """

    def __init__(
        self,
        path: str,
        user: str = "user",
        item: str = "item",
        timestamp: str | None = "timestamp",
        rating: str | None = None,
        format: FileFormat = "auto",  # noqa: A002 (the config key users write)
        delimiter: str | None = None,
        header: bool = True,
        timestamp_format: str | None = None,
        name: str | None = None,
    ) -> None:
        self.path = Path(path).expanduser()
        self.columns = ColumnMap(user, item, optional(timestamp), optional(rating))
        if format not in ("auto", "csv", "tsv", "parquet"):
            raise ValueError(f"InteractionsFile: format must be auto, csv, tsv or parquet, got {format!r}")
        self.format, self.delimiter, self.header = format, optional(delimiter), header
        self.timestamp_format = optional(timestamp_format)
        stem = self.path.name.split(".")[0] or "interactions"
        self.name = optional(name) or re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)
        self._sha256: str | None = None

    def describe(self) -> str:
        """One line for logs."""
        return f"InteractionsFile({self.path}, {self.columns.key()})"

    def prepare(self) -> None:
        """Check the file exists and hash it (the cache key)."""
        if self._sha256 is not None:
            return
        if not self.path.exists():
            raise FileNotFoundError(
                f"InteractionsFile: no file at {self.path} (from {Path.cwd()}): point --data.source.path at your "
                "CSV, TSV or Parquet file of interactions"
            )
        if self.path.is_dir() and not any(self.path.rglob("*.parquet")):
            raise FileNotFoundError(f"InteractionsFile: {self.path} is a directory without .parquet files; "
                                    "point --data.source.path at a file")
        self._sha256 = fingerprint_of_path(self.path)

    def fingerprint(self) -> str:
        """The file's sha256 and everything that changes how it is read (columns, format, delimiter, ...)."""
        self.prepare()
        options = f"{self.format}:{self.delimiter!r}:{self.header}:{self.timestamp_format!r}"
        return f"InteractionsFile:{self.columns.key()}:{ID_RULES}:{options}:{self._sha256}"

    def load(self) -> Interactions:
        """Read the mapped columns and convert them (one-line errors naming file, column and row)."""
        self.prepare()
        with reading(self.path):
            table, where, text_ints = read_table_columns(self.path, self.columns, self.format, self.delimiter, self.header)
        result = interactions_from_table(table, self.columns, where, text_ints, self.timestamp_format)
        log.info("%s: %d interactions, %d users, %d items", self.describe(), len(result),
                 len(np.unique(result.users)), len(np.unique(result.items)))
        return result
