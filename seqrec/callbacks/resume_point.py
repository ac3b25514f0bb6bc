"""The callbacks that make a fit's sitting resumable exactly; ``seqrec.fit`` adds them to every fit.

- ``RNGStateCheckpoint``: every RNG stream in each checkpoint, so a resumed run draws what the whole run would;
- ``SignalCheckpoint``: ``last.ckpt`` after every validation; at SIGINT/SIGTERM, or after ``--sitting_time``
  DD:HH:MM:SS, a checkpoint at an exact resume point and exit 130/143/75;
- ``SittingMarker``: where a resumed sitting starts, in the run's metrics.csv.

They hold live process state (signal handlers, the sitting's clock), so they are built for the fit that runs
rather than from the config; configs/trainer/default.yaml names them and a run's config.yaml header lists them.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from seqrec.callbacks.rng import RNGStateCheckpoint
from seqrec.callbacks.signals import SignalCheckpoint, sitting_seconds
from seqrec.loggers.run_logger import SittingMarker


def resume_callbacks(sitting_time: str | None) -> list[Callback]:
    """RNG state, signal and sitting-time checkpoints, and the sitting marker, in the order they run."""
    limit = sitting_seconds(sitting_time) if sitting_time is not None else None
    return [RNGStateCheckpoint(), SignalCheckpoint(limit), SittingMarker()]
