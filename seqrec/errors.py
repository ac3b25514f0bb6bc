"""How a command fails: one line ``error: ...`` with the fix, exit status 2 for bad input, 1 otherwise,
128 + signal when stopped by one; ``--debug`` or ``SEQREC_DEBUG=1`` shows the traceback instead."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import TypeVar

from jsonargparse import ArgumentError

from seqrec.callbacks.checkpoint_io import CheckpointWriteError
from seqrec.callbacks.signals import Interrupted
from seqrec.child_process import Stopped

T = TypeVar("T")
DEBUG_FLAG = "--debug"
BAD_INPUT = (ValueError, FileNotFoundError, NotADirectoryError, PermissionError, ArgumentError)


def debugging(argv: list[str]) -> bool:
    """True with ``--debug`` among the arguments or ``SEQREC_DEBUG`` set (to anything but 0/false)."""
    env = os.environ.get("SEQREC_DEBUG", "").strip().lower()
    return DEBUG_FLAG in argv or env not in ("", "0", "false", "no")


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line; for jsonargparse's wrapped instantiation errors, the cause's."""
    root = error
    wrapped = type(error).__module__.startswith("jsonargparse") or "Given value:" in str(error)
    while wrapped and (root.__cause__ or root.__context__) is not None:
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    if isinstance(root, OSError) and root.strerror and root.filename:
        text = f"{root.strerror}: {root.filename}"
    else:
        text = str(root) or type(root).__name__
    if isinstance(root, KeyError) and len(root.args) == 1:
        text = f"missing key {root.args[0]!r}"
    text = " ".join(text.split())
    return text if len(text) <= 2000 else text[:2000] + " ..."


def run_command(command: Callable[[list[str]], T], argv: list[str] | None = None) -> T:
    """Run ``command(argv)``; report a failure as one line on stderr and exit (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debugging(argv)
    argv = [a for a in argv if a != DEBUG_FLAG]
    try:
        return command(argv)
    except SystemExit:
        raise
    except (Interrupted, Stopped) as stop:  # a signal's stop at a resume point: its own line, 128 + the signal
        if debug:
            traceback.print_exc()
        print(f"{stop}", file=sys.stderr, flush=True)
        raise SystemExit(stop.exit_code) from None
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("error: interrupted (SIGINT)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except Exception as error:  # noqa: BLE001 (every failure a user sees is one line)
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (--debug shows the traceback)"
        code = 2 if isinstance(error, BAD_INPUT) and not isinstance(error, CheckpointWriteError) else 1
        kind = "" if isinstance(error, BAD_INPUT + (CheckpointWriteError, OSError)) else f"{type(error).__name__}: "
        print(f"error: {kind}{one_line(error)}{hint if code == 1 and kind else ''}", file=sys.stderr, flush=True)
        raise SystemExit(code) from None
