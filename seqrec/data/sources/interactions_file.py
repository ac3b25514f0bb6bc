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

Reading a file into an Arrow table is here; mapping and converting its columns is ``seqrec.data.table``, shared
with the Hugging Face source (``seqrec.data.sources.hf_dataset``).
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import logging
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np

from seqrec.data.download import sha256_of
from seqrec.data.interactions import Interactions, Source, optional
from seqrec.data.table import (
    ID_RULES,
    ColumnMap,
    Where,
    check_columns,
    interactions_from_table,
    require_pyarrow,
)

log = logging.getLogger(__name__)

FileFormat = Literal["auto", "csv", "tsv", "parquet"]
_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"


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
    pa = require_pyarrow()
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
    pa = require_pyarrow()
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
    pa = require_pyarrow()
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
    pa = require_pyarrow()
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
