"""CTR backbones: stored state equals recomputation, windows equal samples, MACs equal FlopCounterMode."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from seqrec.models.ctr.lru import CTRLRU
from seqrec.models.ctr.transformer import CTRTransformer

N_ITEMS, L = 50, 12


def histories(batch: int = 5, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    items = torch.randint(1, N_ITEMS + 1, (batch, L), generator=g)
    lengths = torch.tensor([L, 7, 1, 3, L - 1][:batch])
    slot = torch.arange(L)
    return torch.where(slot[None, :] >= L - lengths[:, None], items, torch.zeros_like(items))


def transformer() -> CTRTransformer:
    torch.manual_seed(0)
    model = CTRTransformer(N_ITEMS, max_len=L, d_model=16, num_layers=2, num_heads=2, dropout=0.1).eval()
    for block in model.blocks:  # a trained-looking recency bias (it starts at zero)
        torch.nn.init.normal_(block.recency.bias.weight)
    return model


def lru() -> CTRLRU:
    torch.manual_seed(0)
    return CTRLRU(N_ITEMS, d_model=16, num_layers=2, dropout=0.1).eval()


def test_stored_state_scores_equal_full_recomputation():
    model = transformer()
    history = histories()
    targets = torch.randint(1, N_ITEMS + 1, (5, 4), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        state = model.prefill(history)
        from_state = model.score_state(state, targets)
        for c in range(4):
            full = model.forward_full(history, targets[:, c])
            torch.testing.assert_close(from_state[:, c], full, rtol=1e-5, atol=1e-5)
        # the stored state is reused, never modified, by later requests
        assert torch.equal(model.score_state(state, targets), from_state)


def test_transformer_padding_does_not_matter():
    model = transformer()
    history = histories()
    targets = torch.randint(1, N_ITEMS + 1, (5,))
    with torch.no_grad():
        short = model(history[:, -3:][:, :], targets)  # rows with >= 3 items keep only 3: different inputs
        wide = model(torch.nn.functional.pad(history[:, -3:], (L - 3, 0)), targets)
    torch.testing.assert_close(short, wide, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("build", [transformer, lru])
def test_windows_equal_per_position_samples(build):
    model = build()
    items = histories(seed=1)
    targets = torch.randint(1, N_ITEMS + 1, (5, L, 2), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        windows = model.forward_windows(items, targets)
        for t in range(L):
            prefix = torch.nn.functional.pad(items[:, : t + 1], (L - t - 1, 0))
            real = items[:, t] > 0
            per_sample = model(prefix, targets[:, t])
            torch.testing.assert_close(windows[real, t], per_sample[real], rtol=1e-4, atol=1e-5)


def test_lru_step_extends_the_state_exactly():
    model = lru()
    history = histories()
    new_item = torch.randint(1, N_ITEMS + 1, (5,))
    targets = torch.randint(1, N_ITEMS + 1, (5, 3))
    with torch.no_grad():
        stepped = model.step(model.prefill(history), new_item)
        extended = torch.cat([history, new_item[:, None]], dim=1)
        direct = model.prefill(extended)
        torch.testing.assert_close(model.score_state(stepped, targets), model.score_state(direct, targets),
                                   rtol=1e-4, atol=1e-5)


def count_macs(fn) -> float:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() / 2


def test_transformer_macs_match_flop_counter():
    model = transformer()
    history = torch.randint(1, N_ITEMS + 1, (1, L))
    target = torch.randint(1, N_ITEMS + 1, (1, 1))
    with torch.no_grad():
        state = model.prefill(history)
        assert count_macs(lambda: model.prefill(history)) == model.prefill_macs(L)
        assert count_macs(lambda: model.score_state(state, target)) == model.score_macs(L)
        assert model.macs_per_request(L) == model.score_macs(L)
    stored = sum(c.keys.numel() * c.keys.element_size() + c.values.numel() * c.values.element_size() for c in state.layers)
    assert model.state_bytes_per_user(L) == stored == 2 * 2 * L * 16 * 4


def test_lru_macs_match_flop_counter():
    model = lru()
    history = torch.randint(1, N_ITEMS + 1, (1, L))
    target = torch.randint(1, N_ITEMS + 1, (1, 1))
    with torch.no_grad():
        state = model.prefill(history)
        counted = count_macs(lambda: model.prefill(history))
        assert counted == L * model.event_macs(include_recurrence=False)
        assert count_macs(lambda: model.score_state(state, target)) == model.macs_per_request()
    # complex MAC = 4 real: the recurrence adds 4·H per event and layer to the counted matrix products
    assert model.event_macs() - model.event_macs(include_recurrence=False) == 2 * 4 * 32
    assert model.state_bytes_per_user() == 2 * 32 * 8 + 16 * 4


def test_recency_buckets_are_exact_then_logarithmic():
    from seqrec.models.ctr.transformer import recency_bucket

    d = torch.tensor([0, 1, 15, 16, 40, 199, 5000])
    buckets = recency_bucket(d, 32, 200).tolist()
    assert buckets[:3] == [0, 1, 15] and buckets[3] == 16 and buckets[-1] == 31
    assert buckets == sorted(buckets) and buckets[-2] <= 31
