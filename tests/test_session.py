"""``RecurrentSession``: the one streaming path (``TrainedRun.update``, serving's recurrent adapter) equals the model
on the whole history; an unknown item (0) changes nothing; a model that cannot step is refused in one line."""

from __future__ import annotations

import pytest
import torch

from seqrec.models.next_item.gru4rec import GRU4Rec
from seqrec.models.next_item.lru import LRURec
from seqrec.models.next_item.sasrec import SASRec
from seqrec.session import RecurrentSession

N = 30


@pytest.mark.parametrize("make", [lambda: LRURec(N, d_model=16, num_layers=2),
                                  lambda: GRU4Rec(N, d_model=8, hidden_size=12, num_layers=2)])
def test_stepping_equals_the_model_on_the_history_and_unknown_items_change_nothing(make):
    torch.manual_seed(0)
    model = make().eval()
    session = RecurrentSession(model)
    histories = torch.tensor([[3, 17, 5, 9, 22], [4, 4, 8, 1, 30]])  # (B, L)
    with torch.inference_mode():
        state, hidden = session.start(2)
        assert hidden.shape == (2, session.d_model) and not hidden.any() and len(state) == session.layers
        hidden = None
        for t in range(histories.shape[1]):
            state, hidden = session.step(state, hidden, histories[:, t])
            torch.testing.assert_close(hidden, model.query_hidden(histories[:, : t + 1]), atol=2e-5, rtol=1e-4)
        kept_state, kept_hidden = session.step(state, hidden, torch.tensor([0, 7]))  # row 0: an unknown item
        assert torch.equal(kept_hidden[0], hidden[0]) and all(torch.equal(a[0], b[0]) for a, b in zip(kept_state, state))
        assert not torch.equal(kept_hidden[1], hidden[1])
        prefilled_state, prefilled = session.prefill(histories)
        torch.testing.assert_close(prefilled, hidden, atol=2e-5, rtol=1e-4)
        assert len(prefilled_state) == session.layers


def test_a_model_without_a_recurrent_state_is_refused():
    with pytest.raises(TypeError, match=r"^SASRec is not a recurrent model \(init_state/step\); use recommend\(\)$"):
        RecurrentSession(SASRec(N, max_len=5, d_model=8, num_heads=2))
