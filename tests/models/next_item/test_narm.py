"""NARM: every position equals the reference's output on that prefix (written out step by step), padding never
reaches a real position, the paper's variant, the cost formula, and parity with the reference implementation
(Yueeeeeeee/RecSys-Extraction-Attack) on LRURec's ML-1M test queries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqrec.cost.flops import count_macs
from seqrec.models.base import RecurrentRecommender
from seqrec.models.next_item.narm import NARM
from tests.models.next_item.reference import checkout, compare, import_module, ml1m_test_queries

N, D = 30, 8


def _model(**kwargs) -> NARM:
    torch.manual_seed(0)
    model = NARM(N, d_model=D, embedding_dropout=0.0, output_dropout=0.0, **kwargs)
    with torch.no_grad():  # weights far from the ±0.04 draw, so that the gate and attention are not near-linear
        for param in model.parameters():
            param.normal_(0.0, 0.5)
    return model.eval()


def prefix_output(model: NARM, prefix: list[int], gate=F.hardsigmoid, normalize: bool = True) -> torch.Tensor:
    """The reference's computation for one unpadded prefix, written out: GRU cell by cell, then the encoders."""
    cell = nn.GRUCell(D, model.hidden_size)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(getattr(model.gru, f"{name}_l0"))
        h = torch.zeros(1, model.hidden_size)
        states = []
        for item in prefix:
            h = cell(model.item_embedding.weight[item].unsqueeze(0), h)
            states.append(h[0])
        states = torch.stack(states)  # (t, H)
        scores = torch.stack([model.score_vector.weight[0] @ gate(model.query.weight @ h[0] + model.key.weight @ s)
                              for s in states])  # (t,)
        weights = torch.softmax(scores, 0) if normalize else scores
        local = (weights.unsqueeze(1) * states).sum(0)
        context = torch.cat([h[0], local])  # (2H,)
        return model.bilinear.weight.T @ context  # (d,) = Bᵀ c


@pytest.mark.parametrize(("gate", "normalize"), [("hardsigmoid", True), ("sigmoid", False)])
def test_every_position_is_the_reference_computation_on_its_prefix(gate, normalize):
    model = _model(gate=gate, normalize=normalize)
    items = torch.tensor([[0, 0, 0, 4, 9, 2, 7], [3, 1, 4, 1, 5, 9, 2]])
    with torch.no_grad():
        hidden = model(items)
        last = model.last_hidden(items)
    function = F.hardsigmoid if gate == "hardsigmoid" else torch.sigmoid
    for b in range(2):
        real = [int(i) for i in items[b] if i > 0]
        offset = items.shape[1] - len(real)
        assert torch.all(hidden[b, :offset] == 0)  # padded positions output zero
        for t in range(len(real)):
            expected = prefix_output(model, real[: t + 1], function, normalize)
            torch.testing.assert_close(hidden[b, offset + t], expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(last[b], hidden[b, -1], rtol=1e-5, atol=1e-5)


def test_padding_never_reaches_a_real_position():
    model = _model()
    history = torch.randint(1, N + 1, (3, 6))
    short = torch.cat([torch.zeros(3, 2, dtype=torch.long), history], dim=1)
    long = torch.cat([torch.zeros(3, 9, dtype=torch.long), history], dim=1)
    with torch.no_grad():
        bare = model(history)
        model.item_embedding.weight[0].normal_(0.0, 5.0)  # garbage in the padding row changes nothing
        torch.testing.assert_close(model(short)[:, 2:], bare, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model(long)[:, 9:], bare, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model.query_hidden(long), bare[:, -1], rtol=1e-5, atol=1e-5)
        assert torch.all(model.last_hidden(torch.zeros(2, 5, dtype=torch.long)) == 0)
    assert model.left_padding_invariant and model.causal


def test_scores_are_the_bilinear_form_against_the_item_table():
    model = _model()
    items = torch.randint(1, N + 1, (2, 5))
    with torch.no_grad():
        hidden = model.last_hidden(items)  # Bᵀ c
        context = hidden @ torch.linalg.pinv(model.bilinear.weight)  # c, recovered (B has full column rank)
        reference = context @ model.bilinear(model.item_embedding.weight).T  # the reference's c · (B E_i)
        torch.testing.assert_close(model.score(hidden), reference, rtol=1e-4, atol=1e-4)


def test_init_and_served_by_recomputing():
    torch.manual_seed(0)
    model = NARM(500, d_model=64)
    assert model.hidden_size == 128
    for name, param in model.named_parameters():
        assert param.abs().max() <= 0.04 + 1e-7 and param.std() > 0.01, name  # N(0, 0.02²) truncated at ±0.04
    assert not isinstance(model, RecurrentRecommender)  # the local encoder needs every past state: recompute
    with pytest.raises(ValueError, match="gate must be one of"):
        NARM(5, gate="relu")


@pytest.mark.parametrize("backend", ["fvcore", "flop_counter"])
@pytest.mark.parametrize("L", [6, 17])
def test_macs_formula(backend, L):
    """GRU 3·L·(dH + H²) + A₁, A₂ 2·L·H² + v over pairs L²·H + α·h L²·H + decoder 2·L·H·d."""
    model = NARM(N, d_model=D, hidden_size=12).eval()
    H = 12
    hand = 3 * L * (D * H + H * H) + 2 * L * H * H + 2 * L * L * H + 2 * L * H * D
    assert model.macs_per_sequence(L) == hand
    items = torch.randint(1, N + 1, (3, L))
    with torch.no_grad():
        assert count_macs(model, (items,), backend, owner=model).total == 3 * hand


# --- parity with the reference implementation --------------------------------------------------------

REFERENCE = ("SEQREC_RECSYS_EXTRACTION_ATTACK_REPO", "Yueeeeeeee/RecSys-Extraction-Attack")


def load_reference_weights(model: NARM, reference: nn.Module) -> None:
    """Copy the reference's weights into ours, name by name."""
    theirs = reference.state_dict()
    mapping = {"item_embedding.weight": "embedding.token.weight", "query.weight": "model.a_global.weight",
               "key.weight": "model.a_local.weight", "score_vector.weight": "model.v_vector.weight",
               "bilinear.weight": "model.b_vetor.weight"}
    mapping |= {f"gru.{p}": f"model.gru.{p}" for p in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")}
    model.load_state_dict({ours: theirs[name] for ours, name in mapping.items()}, strict=True)


def test_parity_with_the_reference_on_ml1m(shared_data):
    root = checkout(*REFERENCE)
    narm = import_module(root, "model/narm.py")
    queries = ml1m_test_queries(shared_data)
    torch.manual_seed(0)
    args = SimpleNamespace(num_items=queries.num_items, bert_hidden_units=64, bert_dropout=0.2, bert_attn_dropout=0.2)
    reference = narm.NARM(args).eval()
    with torch.no_grad():  # sharpen the test: weights far from the ±0.04 draw (the gate leaves its linear range)
        for param in reference.parameters():
            param.normal_(0.0, 0.15)
    ours = NARM(queries.num_items, d_model=64).eval()
    load_reference_weights(ours, reference)
    logits = []
    with torch.no_grad():
        for start in range(0, len(queries.target), 512):
            items = queries.items[start:start + 512]
            lengths = (items > 0).sum(1)
            right = torch.stack([torch.cat([row[row > 0], row[row == 0]]) for row in items])  # its right padding
            logits.append(reference(right, lengths))
    parity = compare(ours, torch.cat(logits), queries)
    print(f"NARM vs RecSys-Extraction-Attack on {parity.queries} ML-1M test queries: {parity.line()}")
    assert parity.max_abs_logit_diff <= 1e-4 * max(parity.logit_scale, 1.0)
    assert parity.equal_ranks >= 0.999 * parity.queries
