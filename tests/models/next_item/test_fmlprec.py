"""FMLP-Rec: the filter as a circular convolution, padding as the reference handles it, not causal, the cost
formula, and parity with the authors' code (Woeee/FMLP-Rec) on LRURec's ML-1M test queries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from seqrec.cost.flops import count_macs
from seqrec.models.next_item.fmlprec import FilterLayer, FMLPRec, fft_macs
from seqrec.tasks.next_item import NextItemTask
from tests.models.next_item.reference import checkout, compare, import_module, ml1m_test_queries

N = 40


def _model(max_len: int = 12, d_model: int = 16, filter_std: float = 0.3, **kwargs) -> FMLPRec:
    """A model whose filters mix positions strongly (the default N(0, 0.02²) draw is nearly a zero filter)."""
    torch.manual_seed(0)
    model = FMLPRec(N, max_len=max_len, d_model=d_model, **kwargs)
    with torch.no_grad():
        for block in model.blocks:
            block.filter.weight.normal_(0.0, filter_std)
    return model.eval()


def test_filter_is_a_circular_convolution_along_the_sequence():
    # irfft(W ⊙ rfft(x)) with the ortho norm = x ⊛ k for the kernel k = irfft(W) (L real taps per channel),
    # ⊛ the circular convolution y_t = Σ_s k_{(t-s) mod L} x_s / √L · √L: written out independently of the FFT
    torch.manual_seed(1)
    L, d = 9, 5
    layer = FilterLayer(L, d, dropout=0.0).eval()
    with torch.no_grad():
        layer.weight.normal_(0.0, 0.5)
    x = torch.randn(2, L, d, dtype=torch.float64)
    w = torch.view_as_complex(layer.weight.detach().double())  # (L//2+1, d)
    kernel = torch.fft.irfft(w, n=L, dim=0)  # (L, d): the filter's impulse response (norm "backward")
    conv = torch.stack([sum(kernel[(t - s) % L] * x[:, s] for s in range(L)) for t in range(L)], dim=1)
    expected = torch.nn.functional.layer_norm(x + conv, (d,), eps=1e-12).float()
    torch.testing.assert_close(layer(x.float()), expected, rtol=1e-5, atol=1e-5)


def test_short_inputs_are_padded_to_max_len_as_the_reference_feeds_them():
    model = _model()
    history = torch.randint(1, N + 1, (3, 7))
    full = torch.cat([torch.zeros(3, 5, dtype=torch.long), history], dim=1)  # (3, 12)
    with torch.no_grad():
        torch.testing.assert_close(model(history), model(full)[:, 5:])
        torch.testing.assert_close(model.query_hidden(history), model.query_hidden(full))
    with pytest.raises(ValueError, match="exceeds max_len=12"):
        model(torch.ones(1, 13, dtype=torch.long))


def test_padding_reaches_real_positions_and_later_items_reach_earlier_ones():
    """The reference does not mask padding and filters the whole window: the model declares both."""
    model = _model()
    assert model.causal is False and model.left_padding_invariant is False
    items = torch.randint(1, N + 1, (1, 12))
    items[0, :4] = 0
    with torch.no_grad():
        base = model(items)
        moved = model.item_embedding.weight[0].clone()
        model.item_embedding.weight[0] += torch.randn(16)  # the padding row feeds every position
        assert not torch.allclose(model(items)[:, -1], base[:, -1], atol=1e-4)
        model.item_embedding.weight[0] = moved
        later = items.clone()
        later[0, -1] = later[0, -1] % N + 1  # change only the newest item
        assert not torch.allclose(model(later)[:, 5], base[:, 5], atol=1e-4)
    assert model.item_embedding.weight.requires_grad and model.item_embedding.padding_idx == 0


def test_init_as_the_reference():
    torch.manual_seed(0)
    model = FMLPRec(2000, max_len=50, d_model=64)
    table = model.item_embedding.weight.detach()
    assert table[0].abs().sum() > 0  # the padding row keeps its N(0, 0.02²) draw (frozen by padding_idx)
    assert table.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.blocks[0].filter.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert torch.all(model.blocks[0].ffn.w_1.bias == 0) and torch.all(model.blocks[0].layer_norm.weight == 1)


def test_the_task_trains_it_on_prefixes_only():
    model = _model()
    task = NextItemTask(model)
    items = torch.randint(1, N + 1, (2, 12))
    windows = {"items": items, "labels": torch.roll(items, -1, dims=1)}
    with pytest.raises(ValueError, match="not causal.*train_mode: prefix"):
        task.training_step(windows, 0)
    labels = torch.zeros_like(items)
    labels[:, -1] = 3
    assert torch.isfinite(task.training_step({"items": items, "labels": labels}, 0))


@pytest.mark.parametrize("backend", ["fvcore", "flop_counter"])
@pytest.mark.parametrize("max_len", [8, 24, 50])
def test_macs_formula(backend, max_len):
    """Per block: rfft + irfft 2·d·round(1.25·P·log₂P), the complex filter 4·(P//2+1)·d, the FFN 8·P·d²."""
    d = 8
    model = FMLPRec(N, max_len=max_len, d_model=d, num_layers=2).eval()
    hand = 2 * (2 * d * fft_macs(max_len) + 4 * (max_len // 2 + 1) * d + 8 * max_len * d * d)
    assert model.macs_per_sequence(max_len) == hand
    items = torch.randint(1, N + 1, (3, max_len))
    with torch.no_grad():
        assert count_macs(model, (items,), backend, owner=model).total == 3 * hand
    assert fft_macs(1) == 0 and fft_macs(8) == 30 and fft_macs(200) == round(250 * 7.643856189774724)


# --- parity with the authors' code ---------------------------------------------------------------------

REFERENCE = ("SEQREC_FMLPREC_REPO", "Woeee/FMLP-Rec")


def reference_model(root, num_items: int, max_len: int, d_model: int, layers: int):
    """The authors' ``FMLPRecModel`` at our size (their item_size counts ids 0..N)."""
    models = import_module(root, "models.py", siblings=("modules",))
    args = SimpleNamespace(item_size=num_items + 1, hidden_size=d_model, max_seq_length=max_len, hidden_dropout_prob=0.2,
                           num_hidden_layers=layers, hidden_act="gelu", initializer_range=0.02, no_filters=False,
                           cuda_condition=False, num_attention_heads=2, attention_probs_dropout_prob=0.2)
    return models.FMLPRecModel(args)


def load_reference_weights(model: FMLPRec, reference: torch.nn.Module) -> None:
    """Copy the reference's weights into ours, name by name."""
    theirs = reference.state_dict()
    mapping = {"item_embedding.weight": "item_embeddings.weight", "position_embedding.weight": "position_embeddings.weight",
               "embedding_layer_norm.weight": "LayerNorm.weight", "embedding_layer_norm.bias": "LayerNorm.bias"}
    for i in range(len(model.blocks)):
        layer = f"item_encoder.layer.{i}"
        mapping |= {f"blocks.{i}.filter.layer_norm.{p}": f"{layer}.filterlayer.LayerNorm.{p}" for p in ("weight", "bias")}
        mapping |= {f"blocks.{i}.ffn.w_1.{p}": f"{layer}.intermediate.dense_1.{p}" for p in ("weight", "bias")}
        mapping |= {f"blocks.{i}.ffn.w_2.{p}": f"{layer}.intermediate.dense_2.{p}" for p in ("weight", "bias")}
        mapping |= {f"blocks.{i}.layer_norm.{p}": f"{layer}.intermediate.LayerNorm.{p}" for p in ("weight", "bias")}
    state = {ours: theirs[name] for ours, name in mapping.items()}
    for i in range(len(model.blocks)):
        state[f"blocks.{i}.filter.weight"] = theirs[f"item_encoder.layer.{i}.filterlayer.complex_weight"][0]
    model.load_state_dict(state, strict=True)


def test_parity_with_the_authors_code_on_ml1m(shared_data):
    root = checkout(*REFERENCE)
    queries = ml1m_test_queries(shared_data)
    torch.manual_seed(0)
    reference = reference_model(root, queries.num_items, 200, 64, 2).eval()
    with torch.no_grad():  # sharpen the test: filters far from the near-zero initial draw mix every position
        for layer in reference.item_encoder.layer:
            layer.filterlayer.complex_weight.normal_(0.0, 0.3)
    ours = FMLPRec(queries.num_items, max_len=200, d_model=64, num_layers=2, dropout=0.2).eval()
    load_reference_weights(ours, reference)
    logits = []
    with torch.no_grad():
        for start in range(0, len(queries.target), 512):
            output = reference(queries.items[start:start + 512])[:, -1, :]  # their predict_full
            logits.append(output @ reference.item_embeddings.weight.T)
    parity = compare(ours, torch.cat(logits), queries)
    print(f"FMLP-Rec vs Woeee/FMLP-Rec on {parity.queries} ML-1M test queries: {parity.line()}")
    assert parity.max_abs_logit_diff <= 1e-4 * max(parity.logit_scale, 1.0)
    assert parity.equal_ranks >= 0.999 * parity.queries
