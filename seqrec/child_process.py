"""A fit run as a child process that stops with its parent, at its resume point.

``seqrec repro`` and the benchmark grids (``benchmarks.fit_grid``) run each fit as its own ``python -m seqrec fit``
process. ``subprocess.run`` alone loses in both ways a user stops such a command:

- a signal to the parent alone (``kill PID``, a scheduler's SIGTERM) ends the parent and leaves the fit running,
  orphaned: it trains on for the rest of its sitting, its result never joins the ledger, and it competes with
  whatever runs next on the machine (seen on 2026-12-05: a killed ``repro`` left its fit training beside the next
  cell for 9 minutes);
- Ctrl-C reaches the parent and the child (the terminal signals the whole foreground process group); the parent's
  ``KeyboardInterrupt`` makes ``subprocess.run`` wait 0.25 s and then SIGKILL the child, before it reaches the
  end of its batch (or validation) and writes its resume point (``seqrec.callbacks.signals``).

``run`` starts the child in its own session, so no terminal or process-group signal reaches it directly, and
while it lives the parent forwards each SIGINT and SIGTERM it gets to every live child, then keeps waiting: the
child stops at its next exact resume point and exits 130 or 143, and the caller sees that status. A second signal
is forwarded too (the fit then exits at once; its previous ``last.ckpt`` is whole). After a signal no new child
starts (``run`` returns 128 + the signal at once) and ``stopped_by`` names it, so a loop over cells ends.

Handlers can be installed only by the main thread: a caller that runs children from worker threads (a thread pool)
holds ``forwarding_signals()`` in the main thread around the pool, and ``run`` refuses to start a child from a
worker thread without it (the child, in its own session, would then outlive a Ctrl-C). Not covered: a signal that
arrives while a child is being started (between its fork and its registration, about a millisecond) is not passed
on to it; the parent still waits for it and starts no other, and the next signal reaches it. A parent killed
without a chance to forward (SIGKILL, a crash) leaves the child running, as before; stop it by its own PID (it then
saves its resume point as usual).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

FORWARDED = (signal.SIGINT, signal.SIGTERM)
SIGNAL_EXITS = tuple(128 + signum for signum in FORWARDED)  # a fit's status after stopping at one: 130, 143

_children: set[subprocess.Popen] = set()
_received: list[int] = []  # the signals forwarded since the outermost forwarding_signals began, in order
_depth = 0  # nesting of forwarding_signals in the main thread (handlers installed by the outermost)


class Stopped(Exception):
    """A child stopped at its resume point by a forwarded signal. The parent command reports it as one line and exits
    with the child's status, ``exit_code`` (130 or 143), as ``seqrec fit`` does (``seqrec.errors.run_command``)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _forward(signum: int, _frame: FrameType | None) -> None:
    """Signal handler: pass ``signum`` on to every live child; the parent itself carries on waiting."""
    _received.append(signum)
    for child in list(_children):  # list() copies under the GIL: a worker thread may add or remove one meanwhile
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)


@contextlib.contextmanager
def forwarding_signals() -> Iterator[None]:
    """While inside, SIGINT and SIGTERM to this process are forwarded to the children ``run`` starts (from any
    thread). Main thread only; nested uses share the outermost's handlers and its record of signals, which the
    outermost starts empty."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("forwarding_signals() installs signal handlers: enter it in the main thread")
    if _depth == 0:
        _received.clear()
        previous = {signum: signal.signal(signum, _forward) for signum in FORWARDED}
    else:
        previous = {}
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stopped_by() -> int | None:
    """The first signal forwarded inside the current (or last) outermost ``forwarding_signals`` (None if none)."""
    return _received[0] if _received else None


def run(command: Sequence[str], **popen: Any) -> int:  # noqa: ANN401 (Popen's keyword arguments, as subprocess.run)
    """Run ``command`` to its end in its own session, forwarding this process's SIGINT/SIGTERM to it; its exit
    status (128 + the signal's number when it stopped at a forwarded signal, as ``seqrec fit`` does). After a
    signal it starts nothing and returns 128 + that signal."""
    in_main = threading.current_thread() is threading.main_thread()
    if not in_main and _depth == 0:
        raise RuntimeError("child_process.run from a worker thread: hold forwarding_signals() in the main thread "
                           "around the threads, or a signal would leave the child running")
    with forwarding_signals() if in_main else contextlib.nullcontext():
        if stopped_by() is not None:
            return 128 + stopped_by()
        child = subprocess.Popen(list(command), start_new_session=True, **popen)
        _children.add(child)
        try:
            return child.wait()
        finally:
            _children.discard(child)
