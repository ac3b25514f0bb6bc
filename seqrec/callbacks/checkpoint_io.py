"""Checkpoints written atomically beside their destination, and checked before a run resumes from one.

Lightning's own writer serialises into memory and then lets fsspec write the file through a temporary
file under ``$TMPDIR`` that is moved over the destination: across file systems that move is a copy, so a
full disk or a kill during it leaves a truncated ``last.ckpt``. ``AtomicCheckpointIO`` (installed on every
run by ``seqrec.build``) writes a temporary file in the checkpoint's own folder, fsyncs it and renames it
over the destination (``seqrec.atomic``): whatever happens, the previous checkpoint stays whole until the
new one is complete.

``check_checkpoint`` reads a checkpoint's zip container and verifies every member's CRC32 (torch would load
a checkpoint with a flipped byte in a tensor without noticing), so that ``--ckpt_path`` fails with one line
naming the file and what to use instead before anything in the run directory is touched.
"""

from __future__ import annotations

import errno
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from seqrec.atomic import atomic_write

_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (missing, truncated, corrupt); the message names the file and the fix."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint that could not be written (``errno`` as the OSError had it); the previous file is intact."""

    def __init__(self, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno_


def _write(checkpoint: dict[str, Any], tmp: str) -> None:
    """``torch.save`` through a Python file, so a failing write raises its OSError (ENOSPC, ...).

    torch reports a write that failed under it as a RuntimeError ("unexpected pos ..."); the OSError it
    hit is in the exception's context and is raised instead.
    """
    try:
        with open(tmp, "wb") as handle:
            torch.save(checkpoint, handle)
    except RuntimeError as error:
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from error


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose saves are atomic in the destination folder (see the module docstring)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` to ``path`` via a temporary file beside it (flush, fsync, rename)."""
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        path = Path(path)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed mid-write
            stale.unlink(missing_ok=True)
        try:
            atomic_write(path, lambda tmp: _write(checkpoint, tmp))
        except OSError as error:
            reason = "the disk is full" if error.errno in _FULL else (error.strerror or str(error))
            if path.exists():
                previous, resume = f"the previous {path.name} is intact", f"--ckpt_path {path.parent.parent}"
            else:
                others = alternatives(path)
                previous = f"no {path.name} was written"
                resume = f"--ckpt_path {others[0]}" if others else "a new run"
            raise CheckpointWriteError(
                f"could not write checkpoint {path} ({reason}); {previous}. Free space (or point "
                f"--trainer.logger.init_args.save_dir at another disk) and resume with {resume}", error.errno,
            ) from error

    def load_checkpoint(self, path: Any, map_location: Any | None = None, weights_only: bool | None = None) -> dict[str, Any]:
        """Check the file (``check_checkpoint``), then load it as ``TorchCheckpointIO`` does."""
        check_checkpoint(path)
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)


def checkpoint_problem(path: str | Path) -> str | None:
    """Why ``path`` is not a usable torch checkpoint (missing, truncated, a corrupt member), or None when it is."""
    path = Path(path)
    if not path.is_file():
        return "it does not exist" if not path.exists() else "it is not a file"
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()  # reads every member and checks its CRC32
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError) as error:
        return f"truncated or not a checkpoint: {error}"
    if bad is not None:
        return f"corrupt: member {bad} fails its CRC check"
    return None


def alternatives(path: str | Path) -> list[Path]:
    """Other usable checkpoints beside ``path``, newest first (best-*.ckpt, older saves)."""
    path = Path(path)
    others = [p for p in path.parent.glob("*.ckpt") if p.name != path.name]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return [p for p in others if checkpoint_problem(p) is None]


def check_checkpoint(path: str | Path) -> None:
    """CheckpointError naming ``path``, what is wrong and what to use instead, unless it is a usable checkpoint."""
    problem = checkpoint_problem(path)
    if problem is None:
        return
    others = alternatives(path) if Path(path).parent.is_dir() else []
    if others:
        fix = f"resume from the newest usable checkpoint beside it with --ckpt_path {others[0]}"
    else:
        fix = "no other usable checkpoint is beside it: start a new run (leave out --ckpt_path)"
    raise CheckpointError(f"checkpoint {path} cannot be used ({problem}); nothing was changed. To continue, {fix}")
