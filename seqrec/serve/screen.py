"""Large request bodies screened in a process of their own before the server spends its GIL on them.

Why a process: a request thread holds the GIL while it parses, validates, length-checks and looks up a body (~5 ms
for 256 KiB of short ids, the JSON parse ~1 ms in one C call), and the event loop answering ``/health`` waits
behind it. Measured on a quiet 2-core machine (``python -m benchmarks.serve`` part 3): /health p99 3.9x its idle
p99 while such bodies were sent back to back, against 1.08x beside a process that only keeps a core busy, so the
wait was the GIL, not the CPU. Threads cannot fix that; a second interpreter can.

How: a body of at least ``screen_bytes`` (``serve --screen_bytes``, default 64 KiB; 0: none) goes first to the
screening process, which parses and checks it exactly as the request thread would (``verdict``: the same
functions, in ``Serving``'s order: parse and validate; the user's id length; the items' id lengths; the catalogue
lookup). A body it refuses (malformed JSON, an id too long, an unknown item: the hostile cases) is answered from
its verdict and the server never parses it. A body it accepts is served as any other, parsed again in a request
thread: a valid large body costs the server what it cost before, plus the screening's few ms of latency.

The process is spawned (a fork of a threaded server is unsafe) when the app starts (the app answers once it is
up), imports pydantic and numpy but
not torch (``seqrec.serve.bodies``, ``errors``, ``limits``, ``seqrec.data.item_map``), and holds the catalogue's
ids. If it dies (killed, out of memory), the body in hand is served unscreened with a warning and the next one
starts a new process.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from seqrec.data.item_map import ItemMap
from seqrec.serve.bodies import BODIES, BatchEventsIn, EventsIn, ScoreIn, parse
from seqrec.serve.errors import ServingError
from seqrec.serve.limits import check_length, item_rows

log = logging.getLogger("seqrec.serve.screen")
MODELS = {model.__name__: model for model in BODIES}  # the endpoints' bodies by name (a picklable key)

_catalogue: ItemMap | None = None  # in the screening process: the server's catalogue and id bound (``_start``)
_max_id_length = 0


def _start(item_ids: list[str], max_id_length: int) -> None:
    """The screening process's initializer: the catalogue (ids of rows 1..N) and the id bound."""
    global _catalogue, _max_id_length
    _catalogue = ItemMap(np.array(["", *item_ids]), lambda rows: rows)
    _max_id_length = max_id_length


def verdict(kind: str, body: bytes, user: str | None) -> tuple[int, str] | None:
    """(HTTP status, message) of the refusal the server would give ``body`` at endpoint ``kind`` (the body's model
    name; ``user``: the path's user, for ``EventsIn``), or None where it would serve it. Runs in the screening
    process (module docstring); TopKIn bodies are parsed and validated only (their users are checked by ``Serving``
    after other work)."""
    assert _catalogue is not None, "verdict runs in the screening process (_start)"
    try:
        document = parse(MODELS[kind], body)
        if isinstance(document, EventsIn):
            check_length([user], "user", _max_id_length)
            items = [document.item] if document.items is None else document.items
        elif isinstance(document, BatchEventsIn):
            check_length(list(dict.fromkeys(e.user for e in document.events)), "user", _max_id_length)
            items = [e.item for e in document.events]
        elif isinstance(document, ScoreIn):
            items = document.items
        else:
            return None
        item_rows(_catalogue, items, _max_id_length)
    except ServingError as error:
        return error.status, str(error)
    return None


class Screened(ServingError):
    """A refusal decided by the screening process (its status and message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Screen:
    """The server's side of the screening process (module docstring)."""

    def __init__(self, catalogue: ItemMap, max_id_length: int, screen_bytes: int) -> None:
        self.catalogue = catalogue
        self.max_id_length = max_id_length
        self.screen_bytes = screen_bytes
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self.counters = {"screened": 0, "refused": 0, "restarts": 0}

    def pool(self) -> ProcessPoolExecutor:
        """The screening process, started on first use (and again after it died)."""
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start, initargs=(list(self.catalogue.index), self.max_id_length))
            return self._pool

    async def start(self) -> None:
        """Start the process and wait until it has screened a first body (the app's startup, ~1 s): a server that
        answers is screening, and no request waits for the process or counts the memory of its start."""
        if self.screen_bytes <= 0:
            return
        try:
            await asyncio.wrap_future(self.pool().submit(verdict, "TopKIn", b'{"users": ["u"]}', None))
        except BrokenProcessPool:
            log.warning("the screening process did not start; bodies are served unscreened until one does")
            with self._lock:
                self._pool = None

    async def check(self, kind: str, body: bytes, user: str | None = None) -> None:
        """``Screened`` where the screening process refuses a body of at least ``screen_bytes``; else nothing."""
        if self.screen_bytes <= 0 or len(body) < self.screen_bytes:
            return
        pool = self.pool()
        try:
            result = await asyncio.wrap_future(pool.submit(verdict, kind, body, user))
        except BrokenProcessPool:
            log.warning("the screening process died; this request is served unscreened and the next starts a new one")
            with self._lock:
                if self._pool is pool:
                    self._pool = None
                    self.counters["restarts"] += 1
            return
        self.counters["screened"] += 1
        if result is not None:
            self.counters["refused"] += 1
            raise Screened(*result)

    def close(self) -> None:
        """Stop the screening process (the app's shutdown)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
