"""Peak memory and per-user serving state, logged as ``cost/*``.

- ``cost/peak_accelerator_memory_mib``: ``torch.cuda.max_memory_allocated`` since the stage started
  (training: reset when fitting starts, logged every training epoch; test: reset when the test starts).
  Only on CUDA; the maximum over ranks.
- ``cost/peak_rss_mib``: the process's peak resident set size (``getrusage`` ru_maxrss: a lifetime
  peak that cannot be reset), the maximum over ranks.
  Both peaks vary from run to run: at test time they go to the loggers (metrics.csv, wandb) but not into
  ``trainer.test``'s returned metrics / test_metrics.json, which hold only reproducible values.
- ``cost/state_bytes_per_user``: bytes one served user's state takes (KV cache for attention models,
  recurrent state for LRU/GRU, stored hidden states where a model keeps them; ``seqrec.cost.state``
  states the rules and the model protocol ``state_bytes()`` / ``kept_lengths()``), for a history of the
  data's ``max_len`` events; ``cost/state_mib_all_users`` multiplies it by the users evaluated.
"""

from __future__ import annotations

import logging
import resource
import sys
from typing import Any, Protocol, runtime_checkable

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from seqrec.callbacks.throughput import log_reduced
from seqrec.cost.state import StateBytes, state_bytes_per_user
from seqrec.datamodules.base import RecommendationData
from seqrec.tasks.base import RecommendationTask

log = logging.getLogger(__name__)
MIB = 2**20


@runtime_checkable
class HasWindow(Protocol):
    """A network with a fixed input window (SASRec's position table, a CTR transformer; None: any length)."""

    max_len: int | None


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _dtype(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"state_dtype must name a torch dtype such as 'float32' or 'bfloat16', got {name!r}")
    return dtype


class MemoryCallback(Callback):
    """Logs peak accelerator memory, peak RSS and per-user state bytes (see the module docstring).

    Args:
        state_dtype: dtype of the served state (e.g. "bfloat16"); default: the model's weight dtype.
        seq_len: history length for the state; default: the data's ``max_len`` (``RecommendationData``; else the
            model's window).
    """

    def __init__(self, state_dtype: str | None = None, seq_len: int | None = None) -> None:
        self.state_dtype = _dtype(state_dtype)
        self.seq_len = seq_len
        self.state: StateBytes | None = None
        self.test_peaks: dict[str, float] = {}
        self._test_users = 0

    # --- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _cuda(pl_module: L.LightningModule) -> torch.device | None:
        device = pl_module.device
        return device if device.type == "cuda" and torch.cuda.is_available() else None

    def _history_length(self, trainer: L.Trainer, model: torch.nn.Module) -> int | None:
        """``seq_len``, else the data's ``max_len`` (``RecommendationData``), else the model's window if it has one."""
        if self.seq_len is not None:
            return self.seq_len
        if isinstance(trainer.datamodule, RecommendationData):
            return trainer.datamodule.max_len
        if isinstance(model, HasWindow) and isinstance(model.max_len, int):
            return model.max_len
        return None

    def measure_state(self, trainer: L.Trainer, pl_module: L.LightningModule) -> StateBytes | None:
        """Per-user state bytes of the task's network (``RecommendationTask.net``) for the configured history length."""
        if not isinstance(pl_module, RecommendationTask):
            return None
        model = pl_module.net
        seq_len = self._history_length(trainer, model)
        if seq_len is None:
            return None
        self.state = state_bytes_per_user(model, seq_len, self.state_dtype)
        return self.state

    def _peaks(self, pl_module: L.LightningModule) -> dict[str, float]:
        values = {"cost/peak_rss_mib": peak_rss_bytes() / MIB}
        device = self._cuda(pl_module)
        if device is not None:
            values["cost/peak_accelerator_memory_mib"] = torch.cuda.max_memory_allocated(device) / MIB
        return values

    def _reset(self, pl_module: L.LightningModule) -> None:
        device = self._cuda(pl_module)
        if device is not None:
            torch.cuda.reset_peak_memory_stats(device)

    @staticmethod
    def _log(pl_module: L.LightningModule, values: dict[str, float], reduce: str) -> None:
        for name, value in values.items():
            pl_module.log(name, torch.tensor(value, dtype=torch.float64, device=pl_module.device), sync_dist=True, reduce_fx=reduce)

    # --- hooks ------------------------------------------------------------------------------------
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Reset the accelerator's peak counter."""
        self._reset(pl_module)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Send the per-user state bytes to the loggers."""
        state = self.measure_state(trainer, pl_module)
        if state is not None:
            rank_zero_info(f"per-user state: {state.per_user} bytes ({state.source}: {state.detail})")
            for logger in trainer.loggers:
                logger.log_metrics({"cost/state_bytes_per_user": float(state.per_user)}, step=trainer.global_step)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Training peaks so far (max over ranks)."""
        self._log(pl_module, self._peaks(pl_module), "max")

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Reset the peak counter and the user count."""
        self._reset(pl_module)
        self._test_users = 0

    def on_test_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Count the users evaluated (distributed padding rows, ``valid`` False, excluded)."""
        self._test_users += _real_rows(batch)

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Test peaks (max over ranks; to the loggers only), state bytes per user and for all users evaluated."""
        self.test_peaks = self._peaks(pl_module)
        log_reduced(trainer, pl_module, self.test_peaks, "max")
        state = self.measure_state(trainer, pl_module)
        if state is None:
            return
        users = torch.tensor(float(self._test_users), dtype=torch.float64, device=pl_module.device)
        users = pl_module.all_gather(users).sum() if trainer.world_size > 1 else users
        self._log(pl_module, {"cost/state_bytes_per_user": float(state.per_user)}, "mean")
        self._log(pl_module, {"cost/state_mib_all_users": state.per_user * float(users) / MIB}, "mean")


def _real_rows(batch: Any) -> int:
    """Rows of a batch dict that are real queries (``valid`` marks distributed padding)."""
    if isinstance(batch, dict):
        valid = batch.get("valid")
        if isinstance(valid, torch.Tensor):
            return int(valid.sum())
        for value in batch.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                return int(value.shape[0])
    return 0
