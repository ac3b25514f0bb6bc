"""Atomic writes: a temporary file beside the destination, flushed and fsynced, then renamed over it.

A crash, a signal or a full disk at any point leaves either the old file or the new one, never a part of
either (rename within one directory is atomic on POSIX). Every file the project writes into a run
directory, a cache or a results file goes through here (arrays through ``seqrec.data.array_cache``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _umask() -> int:
    """The process umask (read without changing it for longer than one call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_directory(directory: Path) -> None:
    """Persist a rename in ``directory`` (best effort where the platform cannot open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[str], None], mode: int | None = None) -> Path:
    """Call ``write(tmp_path)``, fsync the temporary file, then rename it to ``path``; return ``path``.

    The temporary file lies in the destination's folder (same file system, so the rename is atomic). Its
    mode is ``mode``, else the existing file's, else 0o666 minus the umask (not mkstemp's 0600), so files
    shared between users stay readable. On any error the temporary file is removed and ``path`` untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    fsync_directory(path.parent)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) atomically."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path: str | Path, payload: Any) -> Path:
    """Write ``payload`` as indented, key-sorted JSON atomically."""
    return write_text(path, json.dumps(payload, indent=1, sort_keys=True))
