"""GRU4Rec as a ``RecurrentRecommender``: fed event by event it equals ``forward`` (the O(1) serving path)."""

from __future__ import annotations

import torch

from seqrec.models.base import RecurrentRecommender
from seqrec.models.next_item.gru4rec import GRU4Rec


def test_gru4rec_step_by_step_equals_forward_and_prefill():
    torch.manual_seed(0)
    model = GRU4Rec(num_items=30, d_model=8, hidden_size=12, num_layers=2).eval()
    assert isinstance(model, RecurrentRecommender)
    items = torch.tensor([[0, 0, 3, 5, 7, 9], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 4], [0, 0, 0, 0, 0, 0]])
    with torch.no_grad():
        expected = model(items)  # (B, L, d)
        state = model.init_state(len(items))
        for t in range(items.shape[1]):
            state, hidden = model.step(state, items[:, t])
            torch.testing.assert_close(hidden, expected[:, t], atol=1e-6, rtol=1e-5)
        prefilled, all_hidden = model.prefill(items)
    torch.testing.assert_close(all_hidden, expected)
    for mine, theirs in zip(state, prefilled):
        torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-5)
    assert torch.count_nonzero(prefilled[0][3]) == 0  # an all-padding row keeps the empty state
    # continuing from the prefilled state equals forward over the longer history
    with torch.no_grad():
        _, nxt = model.step(prefilled, torch.tensor([11, 12, 13, 14]))
        longer = model(torch.cat([items, torch.tensor([[11], [12], [13], [14]])], dim=1))[:, -1]
    torch.testing.assert_close(nxt, longer, atol=1e-6, rtol=1e-5)
