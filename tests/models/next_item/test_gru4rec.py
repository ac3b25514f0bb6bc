"""GRU4Rec: a reference step-by-step recurrence, padding invariance, causality, tied scores, cost formula."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from seqrec.models.next_item.gru4rec import GRU4Rec, rotate_rows


@pytest.fixture
def one_thread():
    """Training tests run on one thread: on a small shared machine two threads can be many times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

N, D, H = 25, 8, 12


def model(**kw) -> GRU4Rec:
    torch.manual_seed(0)
    return GRU4Rec(num_items=N, d_model=D, hidden_size=H, dropout=0.0, **kw).eval()


def gru_cell_of(m: GRU4Rec) -> nn.GRUCell:
    """An ``nn.GRUCell`` holding layer 0 of ``m``'s GRU (its biases too, where it has them): the step-by-step reference."""
    names = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if m.gru.bias else ())
    cell = nn.GRUCell(D, H, bias=m.gru.bias)
    with torch.no_grad():
        for name in names:
            getattr(cell, name).copy_(getattr(m.gru, f"{name}_l0"))
    return cell


def test_rotate_rows():
    x = torch.tensor([[0, 0, 1, 2], [3, 4, 5, 6]])
    assert rotate_rows(x, torch.tensor([2, 0])).tolist() == [[1, 2, 0, 0], [3, 4, 5, 6]]
    assert rotate_rows(rotate_rows(x, torch.tensor([2, 1])), torch.tensor([2, 3])).tolist() == x.tolist()


def test_matches_a_step_by_step_gru_cell():
    m = model()
    cell = gru_cell_of(m)
    items = torch.tensor([[0, 0, 0, 4, 9, 2, 7], [3, 1, 4, 1, 5, 9, 2]])
    hidden = m(items)
    for b in range(2):
        h = torch.zeros(1, H)
        for t in range(items.shape[1]):
            if items[b, t] == 0:
                assert torch.all(hidden[b, t] == 0)  # padded positions output zero
                continue
            h = cell(m.item_embedding.weight[items[b, t]].unsqueeze(0), h)  # the state starts at the first real item
            assert torch.allclose(hidden[b, t], m.dense(h)[0], atol=1e-5)


def test_padding_amount_never_changes_the_states():
    m = model(num_layers=2)
    short = torch.tensor([[0, 5, 6, 7]])
    long = torch.tensor([[0, 0, 0, 0, 0, 5, 6, 7]])
    assert torch.allclose(m(short)[0, 1:], m(long)[0, 5:], atol=1e-6)
    with torch.no_grad():
        m.item_embedding.weight[0].normal_()  # garbage in the padding row changes nothing
    assert torch.allclose(m(short)[0, 1:], m(long)[0, 5:], atol=1e-6)


def test_causal_and_tied_scores():
    m = model()
    a = torch.tensor([[0, 1, 2, 3, 4]])
    b = a.clone()
    b[0, -1] = 20
    ha, hb = m(a), m(b)
    assert torch.allclose(ha[0, :-1], hb[0, :-1]) and not torch.allclose(ha[0, -1], hb[0, -1])
    scores = m.score(ha[:, -1])
    assert scores.shape == (1, N + 1)
    assert torch.allclose(scores[0, 7], ha[0, -1] @ m.item_embedding.weight[7])


def test_hidden_dropout_drops_the_output_not_the_recurrence():
    """hidden_dropout q: o_t = W Dropout_q(h_t) + b in training, the GRU itself sees the clean state; none in eval."""
    torch.manual_seed(0)
    m = GRU4Rec(num_items=N, d_model=D, hidden_size=D, dropout=0.0, hidden_dropout=0.5)
    with torch.no_grad():  # the dense map as the identity: the output is the (dropped) GRU output itself
        m.dense.weight.copy_(torch.eye(D))
        m.dense.bias.zero_()
    items = torch.tensor([[0, 0, 3, 4, 9, 2, 7, 1], [3, 1, 4, 1, 5, 9, 2, 6]])
    clean = m.eval()(items)  # (2, 8, D)
    recbole = GRU4Rec(num_items=N, d_model=D, hidden_size=D, dropout=0.0)
    recbole.load_state_dict(m.state_dict())  # no parameters of its own: the same checkpoint loads in both forms
    assert torch.equal(clean, recbole.eval()(items))  # eval: no dropout, RecBole's output
    dropped = m.train()(items)
    kept = dropped != 0
    assert 0.3 < kept[items != 0].float().mean() < 0.7  # about half the units dropped
    # every kept unit is the clean state's, scaled by 1/(1-q), at every position: the dropped state never fed back
    assert torch.allclose(dropped[kept], 2 * clean[kept], atol=1e-6)


def test_original_biases_start_at_zero_then_enter_the_gates_and_the_scores():
    """gate_bias: h_t = GRUCell with biases; output_bias: s_i = o_t · E_i + c_i; both zero at init, absent by default."""
    plain = model()
    assert not any("bias_" in k for k in plain.state_dict()) and "output_bias" not in plain.state_dict()
    m = model(gate_bias=True, output_bias=True)
    assert all(torch.all(p == 0) for n, p in m.gru.named_parameters() if n.startswith("bias"))
    assert torch.all(m.output_bias == 0)
    missing, unexpected = m.load_state_dict(plain.state_dict(), strict=False)  # a RecBole-form checkpoint loads
    assert not unexpected and set(missing) == {"gru.bias_ih_l0", "gru.bias_hh_l0", "output_bias"}
    items = torch.tensor([[0, 0, 0, 4, 9, 2, 7], [3, 1, 4, 1, 5, 9, 2]])
    assert torch.allclose(m(items), plain(items), atol=1e-6)  # zero biases: the RecBole form's output
    with torch.no_grad():
        for name, param in m.gru.named_parameters():
            if name.startswith("bias"):
                param.normal_()
        m.output_bias.normal_()
    cell = gru_cell_of(m)
    hidden = m(items)
    h = torch.zeros(1, H)
    for t in range(items.shape[1]):
        h = cell(m.item_embedding.weight[items[1, t]].unsqueeze(0), h)
        assert torch.allclose(hidden[1, t], m.dense(h)[0], atol=1e-5)
    assert not torch.allclose(hidden, plain(items), atol=1e-3)  # the gate biases are used
    scores = m.score(hidden[:, -1])  # (2, N + 1)
    assert torch.allclose(scores, hidden[:, -1] @ m.item_embedding.weight.T + m.output_bias, atol=1e-5)
    state = m.init_state(2)
    for t in range(items.shape[1]):  # the serving path folds events in with the same biased GRU
        state, out = m.step(state, items[:, t])
    assert torch.allclose(out, hidden[:, -1], atol=1e-5)


def test_recbole_structure_and_cost_formula():
    m = model(num_layers=2)
    assert m.gru.bias is False and m.gru.num_layers == 2
    assert m.dense.in_features == H and m.dense.out_features == D
    from torch.utils.flop_counter import FlopCounterMode

    one = GRU4Rec(num_items=N, d_model=D, hidden_size=H, dropout=0.0).eval()
    with FlopCounterMode(display=False) as counter:
        one(torch.tensor([[3]]))
    matmul_macs = counter.get_total_flops() // 2  # the counter sees the matrix products only
    # one position: the gates r, z and the candidate each take W x (d·H) and U h (H·H), then the dense map H·d
    assert matmul_macs == 3 * (D * H + H * H) + H * D


def test_learns_next_item_ring(one_thread):
    torch.manual_seed(0)
    m = GRU4Rec(num_items=N, d_model=16, hidden_size=32, dropout=0.0)
    opt = torch.optim.Adam(m.parameters(), lr=2e-2)
    for _ in range(40):
        start = torch.randint(1, N + 1, (32, 1))
        seq = (start + torch.arange(7)) % N + 1  # (32, 7): next = previous + 1 (mod N)
        hidden = m(seq[:, :-1])  # (32, 6, d)
        logits = m.score(hidden)[..., 1:]
        loss = nn.functional.cross_entropy(logits.reshape(-1, N), (seq[:, 1:] - 1).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    seq = (torch.arange(1, N + 1).unsqueeze(1) + torch.arange(7)) % N + 1
    predicted = m.score(m(seq[:, :-1])[:, -1])[:, 1:].argmax(-1) + 1
    assert (predicted == seq[:, -1]).float().mean() > 0.9
