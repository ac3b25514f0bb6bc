"""``python -m tests.reliability.faulty FAULT -- <command> <args>``: ``python -m seqrec`` with one fault injected.

The reliability suite's entry point for faults that need a real process: a kill -9 or a signal at a chosen
point, a full disk in a chosen writer. FAULT is ``none`` or ``WHAT@WHERE``:

- WHAT: ``kill`` (SIGKILL, as ``kill -9``), ``SIGTERM``, ``SIGINT`` (the process sends it to itself), or
  ``enospc`` (the write fails with "No space left on device" halfway, as on a full disk);
- WHERE: ``train_batch=N`` (after the N-th training batch of this sitting), ``val_batch=N`` (during the
  N-th validation batch of this sitting), ``checkpoint=NAME`` (halfway through writing the checkpoint file
  NAME, e.g. ``last.ckpt``), ``cache`` (every cache-entry write).
"""

from __future__ import annotations

import errno
import io
import os
import signal
import sys
from typing import Any

from lightning.pytorch.callbacks import Callback

import seqrec.callbacks.checkpoint_io as checkpoint_io
import seqrec.data.array_cache as array_cache
import seqrec.fit
from seqrec.__main__ import main as seqrec_main


def strike(what: str) -> None:
    """Deliver the fault now: a signal to this process, or (enospc) the OSError of a full disk."""
    if what == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL if what == "kill" else getattr(signal, what))


class FaultAt(Callback):
    """Strikes after the N-th training batch or during the N-th validation batch of this sitting."""

    def __init__(self, what: str, where: str, n: int) -> None:
        self.what, self.where, self.n = what, where, n
        self.train_batches = self.val_batches = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.train_batches += 1
        if self.where == "train_batch" and self.train_batches == self.n:
            strike(self.what)

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if trainer.sanity_checking or not trainer.training and trainer.state.fn != "fit":
            return
        self.val_batches += 1
        if self.where == "val_batch" and self.val_batches == self.n:
            strike(self.what)


def inject(fault: str) -> None:
    """Patch the fault in (see the module docstring)."""
    if fault == "none":
        return
    what, _, place = fault.partition("@")
    where, _, arg = place.partition("=")
    if where in ("train_batch", "val_batch"):
        build = seqrec.fit.build

        def build_with_fault(*args: Any, **kwargs: Any) -> Any:
            run = build(*args, **kwargs)
            run.trainer.callbacks.append(FaultAt(what, where, int(arg)))
            return run

        seqrec.fit.build = build_with_fault
    elif where == "checkpoint":
        write = checkpoint_io._write

        def write_with_fault(checkpoint: dict, tmp: str) -> None:
            if not os.path.basename(tmp).startswith(f".{arg}."):
                return write(checkpoint, tmp)
            import torch

            buffer = io.BytesIO()
            torch.save(checkpoint, buffer)
            with open(tmp, "wb") as handle:  # half the bytes reach the disk, then the fault
                handle.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
                handle.flush()
                os.fsync(handle.fileno())
                strike(what)

        checkpoint_io._write = write_with_fault
    elif where == "cache":
        def full(path: Any) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

        array_cache._fsync = full
    else:
        raise SystemExit(f"unknown fault {fault!r}")


if __name__ == "__main__":
    fault, separator, *command = sys.argv[1:]
    assert separator == "--", "usage: python -m tests.reliability.faulty FAULT -- <command> <args>"
    inject(fault)
    seqrec_main(command)
