"""Random-number-generator state in checkpoints, so that a resumed run continues exactly where it stopped."""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback


class RNGStateCheckpoint(Callback):
    """Saves Python, NumPy and torch (CPU and CUDA) RNG states with every checkpoint and restores them.

    Lightning restores model, optimiser, loops and callbacks but not the global generators that drive
    dropout; without them a resumed run diverges from an uninterrupted one with the same seed. (Written by
    hand: Lightning 2.x has no built-in for this since fault-tolerant training was removed.)

    The states are those of the moment the checkpoint is written, which is always at a training-batch
    boundary (after a batch, after a validation, at a signal). They are put back just before the first
    training batch of the resumed sitting rather than when the checkpoint is loaded: whatever draws from
    the generators in between (a cost callback's probe input, a sanity check) then cannot shift the
    stream. The data order does not depend on them (``seqrec.datamodules.loaders``).
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The current global RNG states (the loaded ones while they wait to be restored)."""
        if self._pending is not None:
            return self._pending
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        # plain tensors and numbers only, so checkpoints load with torch.load(weights_only=True)
        numpy_state = {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached": float(cached)}
        state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep the saved states; they are restored before the next training batch (``restore``)."""
        self._pending = state_dict

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        """Restore the loaded states before the first training batch after a resume."""
        if self._pending is not None:
            self.restore(self._pending)
            self._pending = None

    @staticmethod
    def restore(state_dict: dict[str, Any]) -> None:
        """Set the global generators to the states saved by ``state_dict``."""
        random.setstate(state_dict["python"])
        n = state_dict["numpy"]
        np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
        torch.set_rng_state(state_dict["torch"])
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])
