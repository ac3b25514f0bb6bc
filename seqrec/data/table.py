"""An Arrow table -> the interactions table: the column mapping, id / time / rating conversion, one-line errors.

The generic converter behind every tabular source (``seqrec.data.sources.interactions_file`` reads CSV, TSV and
Parquet files into an Arrow table; ``seqrec.data.sources.hf_dataset`` reads a Hugging Face dataset's Arrow cache)
and the id files of ``seqrec predict``. Columnar throughout: Arrow -> numpy, no Python loop over rows.

Ids: integer columns stay int64; with ``text_ints`` (text files, whose columns are read as text) a column of
canonical integers (``0``, ``17``, ``-3``; no leading zeros) becomes int64 ids, anything else stays a string.
Text ids are stripped of surrounding whitespace (`` 5``, ``5 `` and ``5`` are one id; a warning counts the ids
that were padded); an id that is only whitespace is an empty cell.

Timestamps: integers or floats as they are (any unit), Arrow timestamps or dates as Unix seconds, or text:
numbers, ISO 8601 (``2024-03-01``, ``2024-03-01 12:30:00``, ``...T12:30:00Z``) or any ``strptime`` format;
without a timestamp column each event's time is its position within its user in table order.

Every problem is one line naming the input, the column and the row (``Where``): rows are counted from 1 over the
data (a header is not a row); for text files the physical line is given too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqrec.data.interactions import Interactions, positions_within_user

log = logging.getLogger(__name__)

_CANONICAL_INT = r"^(0|-?[1-9][0-9]{0,17})$"  # round-trips through int64 and back to the same text
_INT_TEXT = r"^[+-]?[0-9]+$"
_FLOAT_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
ID_RULES = "ids=stripped"  # part of every tabular source's fingerprint: a cache of unstripped ids is other data


def require_pyarrow():  # noqa: ANN202 (module)
    """pyarrow, or a one-line error saying how to install it."""
    try:
        import pyarrow
        import pyarrow.compute  # noqa: F401
    except ImportError:
        raise ImportError("reading interaction files needs pyarrow: pip install pyarrow (or pip install -e .)") from None
    return pyarrow


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
    pa = require_pyarrow()
    return int(pa.compute.index(mask, True).as_py())


def _unwrap(column):  # noqa: ANN001, ANN202
    """One contiguous Arrow array, dictionary-encoded columns decoded to their values."""
    pa = require_pyarrow()
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def _check_nulls(array, where: Where, column: str) -> None:  # noqa: ANN001
    """A one-line error at the first empty cell."""
    if array.null_count:
        bad = _first_true(array.is_null())
        raise input_error(where, column, bad, "empty value", "every row needs a value in this column")


def stripped_ids(array, where: Where, column: str):  # noqa: ANN001, ANN201 (pyarrow arrays)
    """Text ids without surrounding whitespace (a warning counts those that had it); an id of whitespace only is an
    empty value."""
    pa = require_pyarrow()
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
    pa = require_pyarrow()
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
            raise input_error(where, column, int(bad[0]), f"id {values[bad[0]].item()!r} is not an integer",
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
    pa = require_pyarrow()
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
            raise input_error(where, column, int(bad[0]), f"timestamp {values[bad[0]].item()!r} is not a finite number", fix)
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
    pa = require_pyarrow()
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
    pa = require_pyarrow()
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

