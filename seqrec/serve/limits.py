"""Bounds on what one request may ask of the server, checked before any work is done for it.

A request is parsed and answered in bounded time and memory whatever a client sends:

- the body: at most ``max_body_bytes`` (default 256 KiB, ``serve --max_body_bytes``); a declared larger body is
  refused (HTTP 413) before a byte of it is read, an undeclared (chunked) one as soon as the bytes read pass the limit;
- ids: a user or item id longer than ``max_id_length`` characters (default 512, ``serve --max_id_length``) is
  refused (HTTP 422) before any lookup: the catalogue is a hash map (``seqrec.data.item_map.ItemMap``), so a
  lookup costs O(key length), never the catalogue's size times it;
- JSON nested past the parser's recursion limit is a 422 (the request bodies are 3 levels deep);
- an error message shows at most ``SHOWN_CHARACTERS`` of an id the client sent, and its length (``shown``);
- a body of ``screen_bytes`` or more (default 64 KiB, ``serve --screen_bytes``) is parsed and checked in a process of
  its own first (``seqrec.serve.screen``): one the server would refuse never takes its GIL.

The body size bounds the work and the memory of one request, and so how long a body the server serves holds its
GIL in one piece (a request thread's C calls, parsing above all, are not interrupted for the event loop that answers ``/health``):
the worst body, short ids, costs ~6.5 ms to parse and ~10 MB of peak RSS per MiB (``python -m benchmarks.serve``
part 3), so the default is 256 KiB (~21,000 ids of 8 characters: a history of ~20,000 events in one
request); long id lists are validated, length-checked and looked up in slices of ``CHUNK`` for the same reason.
Clients send more in several requests (event numbers, ``seq``, make that safe).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from seqrec.serve.errors import IdTooLong, UnknownItem

if TYPE_CHECKING:
    from seqrec.data.item_map import ItemMap

DEFAULT_MAX_BODY_BYTES = 256 << 10
DEFAULT_MAX_ID_LENGTH = 512
DEFAULT_SCREEN_BYTES = 64 << 10  # bodies screened in a process of their own (``seqrec.serve.screen``)
SHOWN_CHARACTERS = 40
CHUNK = 4096  # ids handled per C call (``chunks``)


@dataclass(frozen=True)
class Limits:
    """The bounds of one request (module docstring)."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_id_length: int = DEFAULT_MAX_ID_LENGTH
    screen_bytes: int = DEFAULT_SCREEN_BYTES

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1 or self.max_id_length < 1:
            raise ValueError(f"--max_body_bytes and --max_id_length must be >= 1, got {self.max_body_bytes} and "
                             f"{self.max_id_length}")
        if self.screen_bytes < 0:
            raise ValueError(f"--screen_bytes must be >= 0 (0: no screening), got {self.screen_bytes}")


def shown(value: Any, limit: int = SHOWN_CHARACTERS) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters plus the length when longer."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(value)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def id_length(value: Any) -> int:
    """The length of an id's text, without writing out a huge integer (its digit count from its bit length)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, int) and value.bit_length() > 64:
        return int(value.bit_length() * 0.30103) + 1  # log10(2): digits, to within one
    return len(str(value))


def chunks(values: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    """``values`` in slices of ``size``: work on each slice is one C call, and between slices another thread (the
    event loop answering /health) may take the GIL."""
    for start in range(0, len(values), size):
        yield values[start:start + size]


def too_long(ids: Sequence[Any], what: str, limit: int) -> str | None:
    """``what: N characters, more than ...`` for the first of ``ids`` longer than ``limit``, else None."""
    try:
        if all(max(map(len, part), default=0) <= limit for part in chunks(ids)):  # text ids, the usual case
            return None
    except TypeError:  # integers among them
        pass
    for value in ids:
        length = id_length(value)
        if length > limit:
            return f"{what}: {length:,} characters, more than the {limit:,} an id may have (serve --max_id_length)"
    return None



def check_length(ids: Sequence[Any], what: str, limit: int) -> None:
    """``IdTooLong`` for the first of ``ids`` longer than ``limit`` (before anything looks it up)."""
    problem = too_long(ids, what, limit)
    if problem is not None:
        raise IdTooLong(problem)


def item_rows(catalogue: ItemMap, raw: Sequence[Any], limit: int) -> np.ndarray:
    """(n,) catalogue rows of raw items: ``IdTooLong`` before any lookup, ``UnknownItem`` naming the first the
    catalogue lacks. The one check of items, in the server (``Serving.item_ids``) and its screening process."""
    check_length(raw, "item", limit)
    rows = catalogue.rows(raw)
    if (rows == 0).any():
        bad = raw[int(np.flatnonzero(rows == 0)[0])]
        raise UnknownItem(f"unknown item {shown(bad)}: not in this model's catalogue of {catalogue.size:,} items")
    return rows
