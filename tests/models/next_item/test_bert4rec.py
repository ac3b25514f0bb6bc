"""BERT4Rec: bidirectional, positions within the real events, the query's [mask], the head, the init, MACs; and
parity with the PyTorch reference (same weights: logits, loss, ranks on real ML-1M), where its checkout is given."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from seqrec.cost.flops import count_macs
from seqrec.models.base import ClozeRecommender
from seqrec.models.next_item.bert4rec import BERT4Rec, BERTLayerNorm
from tests.models.next_item.bert4rec_reference import parity_figures, reference_dir

N = 30


def _model(**kwargs) -> BERT4Rec:
    torch.manual_seed(0)
    return BERT4Rec(num_items=N, max_len=8, d_model=16, **kwargs).eval()


def test_positions_number_the_real_events_from_the_oldest():
    items = torch.tensor([[0, 0, 0, 4, 5, N + 1], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 9]])
    assert _model().positions(items).tolist() == [[0, 0, 0, 1, 2, 3], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 1]]


def test_padding_never_changes_a_real_position_and_every_position_sees_later_ones():
    model = _model()
    items = torch.tensor([[0, 0, 0, 4, 5, 6, 7, N + 1]])
    with torch.no_grad():
        full = model(items)
        torch.testing.assert_close(full[:, 3:], model(items[:, 3:]), rtol=0, atol=1e-6)  # left padding is inert
        later = items.clone()
        later[0, -2] = 12
        assert not torch.allclose(model(later)[0, 3], full[0, 3])  # bidirectional: position 3 sees position 6
    assert not model.causal and model.left_padding_invariant and isinstance(model, ClozeRecommender)


def test_the_query_is_the_mask_appended_after_the_history():
    model = _model()
    history = torch.tensor([[0, 0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]])  # max_len - 1 events
    with torch.no_grad():
        expected = model(torch.cat([history, torch.full((2, 1), N + 1)], 1))[:, -1]
        torch.testing.assert_close(model.last_hidden(history), expected)
        torch.testing.assert_close(model.query_hidden(history), expected, rtol=0, atol=1e-6)  # padding columns dropped
        longer = torch.cat([torch.tensor([[9], [9]]), history], 1)  # max_len events: the oldest makes room
        torch.testing.assert_close(model.last_hidden(longer), expected)


def test_scores_are_tied_to_the_item_table_without_the_mask_row():
    model = _model()
    assert model.item_embedding.weight.shape == (N + 2, 16)
    assert model.item_embeddings().shape == (N + 1, 16) and model.item_bias().shape == (N + 1,)
    hidden = torch.randn(3, 16)
    expected = hidden @ model.item_embedding.weight[: N + 1].T + model.output_bias[: N + 1]
    torch.testing.assert_close(model.score(hidden), expected)


def test_layer_norm_is_the_reference_formula_not_torchs():
    x = torch.randn(4, 16)
    norm = BERTLayerNorm(16)
    expected = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-6)  # unbiased std, eps outside the root
    torch.testing.assert_close(norm(x), expected)
    assert not torch.allclose(norm(x), nn.functional.layer_norm(x, (16,)), atol=1e-3)


def test_initialisation_as_the_reference():
    model = BERT4Rec(num_items=500, max_len=50, d_model=64)
    assert 0.9 < float(model.item_embedding.weight[1:].std()) < 1.1  # nn.Embedding's N(0, 1), untouched
    assert float(model.item_embedding.weight[0].abs().sum()) == 0  # padding row
    for name, param in [*model.blocks.named_parameters(), *model.head.named_parameters(), ("bias", model.output_bias)]:
        if "layer_norm" in name:
            continue
        assert float(param.abs().max()) <= 0.04 and float(param.std()) > 0.005, name  # truncated N(0, 0.02²)
    assert torch.equal(model.blocks[0].attention_layer_norm.weight, torch.ones(64))
    small = BERT4Rec(num_items=500, max_len=50, d_model=64, embedding_init="truncated_normal")  # the TF code's tables
    assert float(small.item_embedding.weight.abs().max()) <= 0.04 and float(small.item_embedding.weight[0].abs().sum()) == 0
    assert float(small.position_embedding.weight.abs().max()) <= 0.04


@pytest.mark.parametrize("backend", ["fvcore", "flop_counter"])
def test_macs_per_sequence_is_the_hand_formula(backend):
    model = BERT4Rec(num_items=N, max_len=12, d_model=16, num_blocks=2, num_heads=2).eval()
    items = torch.randint(1, N + 1, (3, 12))
    items[0, :5] = 0
    d, L, f = 16, 12, 64
    assert model.macs_per_sequence(L) == 2 * (4 * L * d * d + 2 * L * L * d + 2 * L * d * f) + L * d * d
    with torch.no_grad():
        assert count_macs(model, (items,), backend, owner=model).total / 3 == model.macs_per_sequence(L)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="max_len"):
        BERT4Rec(num_items=N, max_len=1)
    with pytest.raises(ValueError, match="exceeds max_len"):
        _model()(torch.ones(1, 9, dtype=torch.long))


# --- parity with the reference (its checkout named by SEQREC_RECSYS_EXTRACTION_ATTACK_REPO; real ML-1M) ------


@pytest.mark.slow
def test_parity_with_the_reference_on_real_ml1m(shared_data, tmp_path):
    """Same weights in the reference and in ours: logits, the masked-batch loss and every test user's rank agree."""
    figures = parity_figures(reference_dir(), shared_data, tmp_path, users=6040)
    print("BERT4Rec parity:", figures)  # quoted in the closing notes (pytest -s)
    assert figures["max_abs_logit_diff"] < 1e-4
    assert figures["loss_diff_same_softmax"] < 1e-5
    # the reference's own loss also has the padding and [mask] columns in its softmax; ours leaves them out
    assert figures["loss_diff_reference_softmax"] < 1e-2
    assert figures["rank_agreement"] >= 0.999 and figures["users"] == 6040
    assert math.isfinite(figures["loss_ours"])

