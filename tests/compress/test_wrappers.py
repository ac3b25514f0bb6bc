"""Compression wrappers: exact at a 100% budget, kept lengths equal the budget, the methods' selections."""

from __future__ import annotations

import math

import pytest
import torch

from seqrec.compress import METHODS, build, kept_budget
from seqrec.compress.merge import bipartite_matching, merge_weighted
from seqrec.models.ctr.transformer import CTRTransformer

N_ITEMS, L = 60, 20
LENGTHS = [20, 13, 1, 7, 2, 19]


def histories(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    items = torch.randint(1, N_ITEMS + 1, (len(LENGTHS), L), generator=g)
    slot = torch.arange(L)
    return torch.where(slot[None, :] >= L - torch.tensor(LENGTHS)[:, None], items, torch.zeros_like(items))


@pytest.fixture(scope="module")
def backbone() -> CTRTransformer:
    torch.manual_seed(0)
    model = CTRTransformer(N_ITEMS, max_len=L, d_model=16, num_layers=3, num_heads=2, dropout=0.1).eval()
    for block in model.blocks:  # a trained-looking recency bias (it starts at zero)
        torch.nn.init.normal_(block.recency.bias.weight)
    return model


def test_budget_rounds_up_and_clamps():
    n = torch.tensor([0, 1, 7, 30, 200])
    assert kept_budget(n, 0.1, None).tolist() == [0, 1, 1, 3, 20]
    assert kept_budget(n, 0.25, None).tolist() == [0, 1, 2, 8, 50]
    assert kept_budget(n, None, 5).tolist() == [0, 1, 5, 5, 5]


@pytest.mark.parametrize("method", METHODS)
def test_full_budget_equals_backbone_exactly(backbone, method):
    history = histories()
    targets = torch.randint(1, N_ITEMS + 1, (len(LENGTHS), 1), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = backbone(history, targets)
        got = build(method, backbone, ratio=1.0)(history, targets)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("method", [m for m in METHODS if m not in ("uncompressed", "prune-target")])
@pytest.mark.parametrize("ratio", [0.5, 0.25, 0.1])
def test_kept_lengths_equal_budget(backbone, method, ratio):
    wrapper = build(method, backbone, ratio=ratio)
    history = histories()
    with torch.no_grad():
        state = wrapper.prefill(history)
        logits = wrapper.score_state(state, torch.randint(1, N_ITEMS + 1, (len(LENGTHS), 3)))
    want = [max(1, math.ceil(ratio * n - 1e-9)) for n in LENGTHS]
    for layer in state.layers:
        per_head = layer.mask.sum(dim=-1)  # (B, 1 or h)
        assert (per_head == torch.tensor(want)[:, None]).all(), (method, per_head, want)
    assert torch.isfinite(logits).all()
    costs = wrapper.costs()
    assert costs["kept_layer0"] == pytest.approx(sum(want) / len(want))
    assert wrapper.kept_lengths(200) == [math.ceil(ratio * 200)] * 3


def test_target_aware_pruning_keeps_budget_and_depends_on_target(backbone):
    wrapper = build("prune-target", backbone, ratio=0.25)
    history = histories()
    targets = torch.randint(1, N_ITEMS + 1, (len(LENGTHS), 2), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        logits = wrapper(history, targets)
        single = torch.stack([wrapper(history, targets[:, c]) for c in range(2)], dim=1)
    torch.testing.assert_close(logits, single, rtol=1e-5, atol=1e-6)
    costs = wrapper.costs()
    want = [max(1, math.ceil(0.25 * n - 1e-9)) for n in LENGTHS]
    assert costs["kept_layer2"] == pytest.approx(sum(want) / len(want))
    with pytest.raises(RuntimeError, match="no stored state"):
        wrapper.prefill(history)


def test_streaming_keeps_sinks_and_recent(backbone):
    wrapper = build("streaming", backbone, tokens=8)
    history = torch.arange(1, L + 1)[None, :]  # one user with 20 events, item id = position + 1
    with torch.no_grad():
        state = wrapper.prefill(history)
        k_full = backbone.prefill(history).layers[0].keys
    keys = state.layers[0].keys[0, 0]  # (8, d/h)
    # sinks = min(4, 8 // 2) = 4 oldest (slots 0..3) + 4 newest (slots 16..19)
    expected = k_full[0, 0, [0, 1, 2, 3, 16, 17, 18, 19]]
    torch.testing.assert_close(keys, expected, rtol=0, atol=0)


def test_h2o_and_snapkv_select_per_head_from_attention(backbone):
    history = histories()[:1]  # 20 events
    with torch.no_grad():
        h2o = build("h2o", backbone, tokens=6)
        state = h2o.prefill(history)
        tokens = backbone.embed_history(history)
        _, _, trace = backbone.history_layer(backbone.blocks[0], tokens)
        full = backbone.prefill(history).layers[0]
    acc = trace.weights.sum(dim=2)[0]  # (h, 20): attention each key received
    for head in range(2):
        heavy = set(torch.topk(acc[head, :17], 3).indices.tolist())  # 3 heavy among all but the 3 recent
        chosen = sorted(heavy | {17, 18, 19})
        torch.testing.assert_close(state.layers[0].keys[0, head], full.keys[0, head, chosen], rtol=0, atol=0)
    with torch.no_grad():
        snap = build("snapkv", backbone, tokens=6)
        snap.window, snap.kernel_size = 4, 1
        state = snap.prefill(history)
    votes = trace.weights[0, :, 16:, :].sum(dim=1)  # last 4 queries
    for head in range(2):
        top = set(torch.topk(votes[head, :17], 3).indices.tolist())  # window keeps min(4, 6 // 2) = 3 newest
        chosen = sorted(top | {17, 18, 19})
        torch.testing.assert_close(state.layers[0].keys[0, head], full.keys[0, head, chosen], rtol=0, atol=0)


def test_bipartite_matching_merges_identical_tokens_by_size():
    # slots 0..5 all real; A = slots 0, 2, 4 (odd distance from the newest), B = 1, 3, 5
    metric = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8], [0.6, 0.8]])[None]
    real = torch.ones(1, 6, dtype=torch.bool)
    dest, removed, macs = bipartite_matching(metric, real, torch.tensor([2]))
    # A slot 0 ~ B slot 3 (sim 1), A slot 2 ~ B slot 1 (sim 1), A slot 4 ~ B slot 5 (sim 1): a 3-way tie, top 2 by order
    assert int(removed.sum()) == 2 and macs.item() == 3 * 3 * 2
    merged_slots = torch.nonzero(removed[0]).squeeze(1).tolist()
    assert all(int(dest[0, s]) in (1, 3, 5) for s in merged_slots)
    values = torch.arange(6.0)[None, :, None]
    sizes = torch.tensor([[1.0, 2.0, 1.0, 1.0, 1.0, 1.0]])
    out = merge_weighted(values, sizes, torch.tensor([[3, 1, 1, 3, 4, 5]]))
    assert out[0, 1, 0].item() == pytest.approx((2 * 1 + 1 * 2) / 3)  # size-weighted
    assert out[0, 3, 0].item() == pytest.approx((0 + 3) / 2)


def test_tome_proportional_attention_in_state(backbone):
    wrapper = build("tome", backbone, ratio=0.25)
    with torch.no_grad():
        state = wrapper.prefill(histories())
    sizes = torch.exp(state.layers[0].log_size[:, 0]) * state.layers[0].mask[:, 0]
    # merged sizes add up to the original history lengths, in every layer
    assert sizes.sum(dim=1).round().long().tolist() == LENGTHS
    assert torch.equal(state.layers[1].log_size, state.layers[0].log_size)


@pytest.mark.parametrize("method", [m for m in METHODS if m != "prune-target"])
def test_prefill_from_shared_layers_equals_prefill(backbone, method):
    history = histories(seed=5)
    targets = torch.randint(1, N_ITEMS + 1, (len(LENGTHS), 3))
    wrapper = build(method, backbone, ratio=0.25)
    with torch.no_grad():
        direct = wrapper.score_state(wrapper.prefill(history), targets)
        costs = wrapper.costs()
        wrapper.reset_costs()
        shared = backbone.prefill_layers(history)
        resumed = wrapper.score_state(wrapper.prefill_from(history, shared), targets)
    assert torch.equal(direct, resumed)
    assert wrapper.costs() == costs
