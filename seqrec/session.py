"""Recurrent (per-user streaming) sessions: a ``RecurrentRecommender`` fed one event at a time, O(1) state per user.

The one implementation of streaming inference: ``TrainedRun.init_state`` / ``update`` / ``topk`` (raw ids) and
serving's recurrent adapter (``seqrec.serve.state.RecurrentAdapter``: per-user states in a store) both step through
a ``RecurrentSession``. A batch of users is a ``(state, hidden)`` pair: the model's per-layer state (B, ...) and
the output after each row's newest event (B, d), the vector the catalogue is scored from.

Exact: stepping a history event by event from ``start`` gives, in eval mode, the hidden state the model computes
for the whole (left-padded) history at once (``RecurrentRecommender``'s contract; tests/serve/test_state.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqrec.models.base import RecurrentRecommender, RecurrentState, SequenceRecommender


class RecurrentSession:
    """Streaming inference of one recurrent next-item model (module docstring)."""

    def __init__(self, model: SequenceRecommender) -> None:
        """TypeError when the model cannot step a recurrent state (serve or rank it by re-encoding its window)."""
        if not isinstance(model, RecurrentRecommender):
            raise TypeError(f"{type(model).__name__} is not a recurrent model (init_state/step); use recommend()")
        self.net = model
        self.layers = len(model.init_state(1))
        self.d_model = int(model.item_embeddings().shape[1])

    def start(self, batch_size: int) -> tuple[RecurrentState, Tensor]:
        """The empty state of ``batch_size`` users and a zero output (B, d)."""
        state = self.net.init_state(batch_size)
        device = self.net.item_embeddings().device
        return state, torch.zeros(batch_size, self.d_model, device=device)

    def step(self, state: RecurrentState, hidden: Tensor | None, items: Tensor) -> tuple[RecurrentState, Tensor]:
        """One event per user, items (B,) item rows -> (new state, output (B, d)); O(1) per event.

        Item 0 (an item the catalogue does not know) leaves the row's state unchanged (the model's contract for
        padding) and its output as it was (``hidden``; None before any event: the model's output at padding).
        """
        new_state, new_hidden = self.net.step(state, items)
        if hidden is not None:
            new_hidden = torch.where((items > 0).unsqueeze(1), new_hidden, hidden)
        return new_state, new_hidden

    def prefill(self, items: Tensor) -> tuple[RecurrentState, Tensor]:
        """Left-padded histories (B, L) at once -> (state after the newest event, output (B, d))."""
        state, hidden = self.net.prefill(items)
        return state, hidden[:, -1]
