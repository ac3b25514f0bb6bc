"""Throughput: training samples/s and tokens/s, evaluation users/s, in the progress bar and the logs.

- ``train/samples_per_s``, ``train/tokens_per_s`` (progress bar, every step): this process's rate over the
  last ``window`` batches, wall clock between consecutive batch ends (data loading, forward, backward
  and optimizer step included). Tokens are the non-padding ids of ``batch[tokens_key]``.
- ``train/samples_per_s_epoch``, ``train/tokens_per_s_epoch``: the epoch's examples over its wall time,
  summed over ranks (ranks run concurrently, so the sum is the job's throughput). An epoch resumed from a
  mid-epoch checkpoint counts this process's part of it: Lightning does not call ``on_train_epoch_start``
  for it, so the clock also starts at ``on_train_start`` (it read the time since boot before).
- ``val/users_per_s``, ``test/users_per_s``: evaluation queries (one per user) over the loop's wall
  time, summed over ranks; distributed padding rows (``valid`` False) are not counted. The test value
  goes to the loggers only, not into ``trainer.test``'s returned (reproducible) metrics.

Written by hand rather than with Lightning's ``ThroughputMonitor``, which logs rank 0's rate times the
world size, not to the progress bar, and counts a batch's padded length rather than its real tokens.
On CUDA the clock is read after ``torch.cuda.synchronize`` so that queued kernels are counted.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor


def log_reduced(trainer: L.Trainer, pl_module: L.LightningModule, values: dict[str, float], reduce: str) -> None:
    """Send ``values`` reduced over ranks ("sum" or "max") straight to the loggers, at the current step.

    For measurements that vary from run to run (rates, peaks): logged, but kept out of ``trainer.test``'s
    returned metrics (and so out of test_metrics.json), which hold only reproducible values.
    Every rank must call it (it gathers).
    """
    if not values:
        return
    keys = list(values)
    tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=pl_module.device)
    if trainer.world_size > 1:
        gathered = pl_module.all_gather(tensor).reshape(trainer.world_size, len(keys))
        tensor = gathered.sum(0) if reduce == "sum" else gathered.max(0).values
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(dict(zip(keys, tensor.tolist())), step=trainer.global_step)


def batch_rows(batch: Any) -> int:
    """Examples in a batch: real rows when ``valid`` marks distributed padding, else the first dimension."""
    if isinstance(batch, dict):
        valid = batch.get("valid")
        if isinstance(valid, Tensor):
            return int(valid.sum())
        values = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        values = list(batch)
    else:
        values = [batch]
    for value in values:
        if isinstance(value, Tensor) and value.dim() > 0:
            return int(value.shape[0])
    return 0


def batch_tokens(batch: Any, key: str) -> int:
    """Non-padding ids (id != 0) of ``batch[key]``; 0 when the batch has no such tensor."""
    if isinstance(batch, dict) and isinstance(batch.get(key), Tensor):
        return int((batch[key] != 0).sum())
    return 0


class ThroughputCallback(Callback):
    """Logs samples/s, tokens/s (training) and users/s (evaluation); see the module docstring.

    Args:
        window: batches in the rolling step-level rate.
        tokens_key: batch key of the item ids whose non-zero entries are tokens.
    """

    def __init__(self, window: int = 20, tokens_key: str = "items") -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window, self.tokens_key = window, tokens_key
        self._steps: deque[tuple[float, int, int]] = deque(maxlen=window)
        self._last = 0.0
        self._epoch_start = 0.0
        self._epoch_samples = 0
        self._epoch_tokens = 0
        self._eval_start = 0.0
        self._eval_users = 0
        self.test_users_per_s: float | None = None

    @staticmethod
    def _now(pl_module: L.LightningModule) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        return time.perf_counter()

    # --- training ---------------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the clocks: a fit resumed mid-epoch gets no ``on_train_epoch_start`` for that epoch."""
        self.on_train_epoch_start(trainer, pl_module)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the epoch clock."""
        self._epoch_start = self._last = self._now(pl_module)
        self._epoch_samples = self._epoch_tokens = 0
        self._steps.clear()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Rolling samples/s and tokens/s of this process (progress bar)."""
        now = self._now(pl_module)
        samples, tokens = batch_rows(batch), batch_tokens(batch, self.tokens_key)
        self._steps.append((now - self._last, samples, tokens))
        self._last = now
        self._epoch_samples += samples
        self._epoch_tokens += tokens
        seconds = sum(s for s, _, _ in self._steps)
        if seconds > 0:
            pl_module.log("train/samples_per_s", sum(n for _, n, _ in self._steps) / seconds, prog_bar=True)
            if self._epoch_tokens:
                pl_module.log("train/tokens_per_s", sum(t for _, _, t in self._steps) / seconds, prog_bar=True)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The epoch's samples/s and tokens/s, summed over ranks."""
        seconds = self._now(pl_module) - self._epoch_start
        if seconds <= 0 or not self._epoch_samples:
            return
        rates = {"train/samples_per_s_epoch": self._epoch_samples / seconds}
        if self._epoch_tokens:
            rates["train/tokens_per_s_epoch"] = self._epoch_tokens / seconds
        for name, value in rates.items():
            pl_module.log(name, torch.tensor(value, dtype=torch.float64, device=pl_module.device), sync_dist=True, reduce_fx="sum")

    # --- evaluation -------------------------------------------------------------------------------
    def _eval_start_clock(self, pl_module: L.LightningModule) -> None:
        self._eval_start = self._now(pl_module)
        self._eval_users = 0

    def _eval_log(self, trainer: L.Trainer, pl_module: L.LightningModule, prefix: str) -> None:
        seconds = self._now(pl_module) - self._eval_start
        if seconds <= 0 or trainer.sanity_checking:
            return
        if prefix == "test":  # kept out of the returned test metrics (not reproducible), still logged
            log_reduced(trainer, pl_module, {"test/users_per_s": self._eval_users / seconds}, "sum")
            self.test_users_per_s = self._eval_users / seconds
        else:
            value = torch.tensor(self._eval_users / seconds, dtype=torch.float64, device=pl_module.device)
            pl_module.log(f"{prefix}/users_per_s", value, sync_dist=True, reduce_fx="sum")

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the validation clock."""
        self._eval_start_clock(pl_module)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Count the users validated."""
        self._eval_users += batch_rows(batch)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Validation users/s (summed over ranks)."""
        self._eval_log(trainer, pl_module, "val")

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the test clock."""
        self._eval_start_clock(pl_module)

    def on_test_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Count the users tested."""
        self._eval_users += batch_rows(batch)

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Test users/s (summed over ranks)."""
        self._eval_log(trainer, pl_module, "test")
