"""MAC counting (seqrec.cost.flops): every model against its hand formula at two lengths, fvcore against
FlopCounterMode, the known traps, and a compression wrapper's reduced lengths."""

import importlib
import inspect
import math
import pkgutil

import pytest
import torch
from torch import nn

import seqrec.models
from seqrec.cost.flops import count_macs, macs_flop_counter, macs_fvcore
from seqrec.models.base import DeclaresMACs, SequenceRecommender
from seqrec.models.next_item.gru4rec import GRU4Rec
from seqrec.models.next_item.lru import LRURec
from seqrec.models.next_item.mlp4rec import MLP4Rec
from seqrec.models.next_item.popularity import Popularity
from seqrec.models.next_item.sasrec import SASRec

LENGTHS = (8, 24)  # 24 is not a power of two: the LRU scan pads it to 32
N = 30
BACKENDS = ("fvcore", "flop_counter")


# --- hand formulas (MACs of forward on ONE sequence of length L; seqrec.cost.flops states the convention) ---


def sasrec_macs(L: int, d: int, blocks: int, ffn: int) -> int:
    """Per block: Q, K, V, O projections 4·L·d², attention Q·Kᵀ and A·V 2·L²·d, FFN 2·L·d·f."""
    return blocks * (4 * L * d * d + 2 * L * L * d + 2 * L * d * ffn)


def sasrec_last_macs(L: int, d: int, blocks: int, ffn: int) -> int:
    """``SASRec.last_hidden``: every block but the last in full; the last one for the newest query only
    (Q and O projections 2·d², K and V 2·L·d², attention 2·L·d, FFN 2·d·f)."""
    return sasrec_macs(L, d, blocks - 1, ffn) + 2 * d * d + 2 * L * d * d + 2 * L * d + 2 * d * ffn


def lru_macs(L: int, d: int, layers: int, state: int) -> int:
    """Per layer: B (d→H complex: 2·L·d·H), Re C (2H→d: 2·L·H·d), PFFN 8·L·d², and the parallel scan:
    log2(P) levels of P/2 complex products λ^k ⊙ h (4 real MACs each) over H states, P = 2^⌈log2 L⌉."""
    P = 1 << (L - 1).bit_length()
    return layers * (2 * L * d * state + 2 * L * state * d + 8 * L * d * d + 4 * (P // 2) * int(math.log2(P)) * state)


def lru_sequential_macs(L: int, d: int, layers: int, state: int) -> int:
    """The step-by-step scan (``scan="sequential"``, and "auto" on CPU): one complex λ ⊙ h per step and state."""
    return layers * (2 * L * d * state + 2 * L * state * d + 8 * L * d * d + 4 * L * state)


def gru4rec_macs(L: int, d: int, hidden: int, layers: int) -> int:
    """GRU gates 3·(d_in·H + H²) per step and layer (no bias), then the dense map H·d per position."""
    total, d_in = 0, d
    for _ in range(layers):
        total += 3 * (d_in * hidden + hidden * hidden)
        d_in = hidden
    return L * (total + hidden * d)


def mlp4rec_macs(L: int, d: int, layers: int, channels: int = 1, expansion: int = 4) -> int:
    """Per layer: per channel sequence mixing 2·e·L²·d and channel mixing 2·e·L·d², then feature mixing 2·e·C²·L·d."""
    e = expansion
    return layers * (channels * (2 * e * L * L * d + 2 * e * L * d * d) + 2 * e * channels**2 * L * d)


CASES = {
    "SASRec": (lambda L: SASRec(num_items=N, max_len=L, d_model=16, num_blocks=2, num_heads=2, ffn_dim=24),
               lambda L: sasrec_macs(L, 16, 2, 24)),
    "LRURec": (lambda L: LRURec(num_items=N, d_model=8, num_layers=2, scan="parallel"), lambda L: lru_macs(L, 8, 2, 16)),
    "LRURec-sequential": (lambda L: LRURec(num_items=N, d_model=8, num_layers=2, scan="sequential"),
                          lambda L: lru_sequential_macs(L, 8, 2, 16)),
    "GRU4Rec": (lambda L: GRU4Rec(num_items=N, d_model=8, hidden_size=12, num_layers=2),
                lambda L: gru4rec_macs(L, 8, 12, 2)),
    "MLP4Rec": (lambda L: MLP4Rec(num_items=N, max_len=L, d_model=8, num_layers=2), lambda L: mlp4rec_macs(L, 8, 2)),
    "Popularity": (lambda L: Popularity(num_items=N), lambda L: 0),
}


def per_sequence(model: nn.Module, L: int, backend: str, batch: int = 3) -> float:
    items = torch.randint(1, N + 1, (batch, L))
    items[0, : L // 2] = 0  # left padding does not change what a dense model computes
    model.eval()
    with torch.no_grad():
        return count_macs(model, (items,), backend, owner=model).total / batch


def counted(model: nn.Module, L: int, backend: str) -> float:
    return per_sequence(model, L, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_model_matches_its_hand_formula_at_two_lengths(name, backend):
    build, hand = CASES[name]
    for L in LENGTHS:
        measured = counted(build(L), L, backend)
        expected = hand(L)
        assert measured == pytest.approx(expected, rel=0.01, abs=1), (name, backend, L)


def _sequence_models() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(seqrec.models.__path__, prefix="seqrec.models."):
        module = importlib.import_module(info.name)
        for name, cls in vars(module).items():
            if (inspect.isclass(cls) and issubclass(cls, SequenceRecommender) and cls is not SequenceRecommender
                    and cls.__module__ == module.__name__):
                found[name] = cls
    return found


@pytest.mark.parametrize("cls", list(_sequence_models().values()), ids=list(_sequence_models()))
def test_every_sequence_model_counts_the_same_with_both_backends_and_its_declared_formula(cls):
    """Models found in seqrec.models, built with defaults: fvcore == FlopCounterMode; declared formula within 1%."""
    assert {"SASRec", "LRURec", "Popularity"} <= set(_sequence_models())
    for L in LENGTHS:
        kwargs = {"num_items": N, **({"max_len": L} if "max_len" in inspect.signature(cls.__init__).parameters else {})}
        model = cls(**kwargs)
        reference = per_sequence(model, L, "flop_counter")
        if isinstance(model, DeclaresMACs):
            assert model.macs_per_sequence(L) == pytest.approx(reference, rel=0.01), f"{cls.__name__}.macs_per_sequence({L})"
        assert counted(model, L, "fvcore") == reference, (cls.__name__, L)


# --- the traps the handlers exist for ---


def test_cpu_flash_attention_kernel_is_counted_by_flop_counter():
    """On CPU, F.scaled_dot_product_attention runs a kernel FlopCounterMode has no formula for."""
    from torch.utils.flop_counter import FlopCounterMode, flop_registry

    q, k, v = torch.randn(2, 3, 10, 8), torch.randn(2, 3, 12, 8), torch.randn(2, 3, 12, 8)
    mask = torch.rand(10, 12) > 0.3
    sdpa = torch.nn.functional.scaled_dot_product_attention
    expected = 2 * 3 * 10 * 12 * (8 + 8)
    with FlopCounterMode(display=False) as plain:
        sdpa(q, k, v, attn_mask=mask)
    if torch.ops.aten._scaled_dot_product_flash_attention_for_cpu not in flop_registry:
        assert plain.get_total_flops() == 0  # the trap: torch alone counts nothing for this kernel
    assert macs_flop_counter(lambda q, k, v: sdpa(q, k, v, attn_mask=mask), (q, k, v)).total == expected
    assert macs_fvcore(lambda q, k, v: sdpa(q, k, v, attn_mask=mask), (q, k, v)).total == expected
    # value width may differ from the key width (the math kernel then runs): same formula
    v5 = torch.randn(2, 3, 12, 5)
    for count in (macs_flop_counter, macs_fvcore):
        assert count(sdpa, (q, k, v5)).total == 2 * 3 * 10 * 12 * (8 + 5)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad_fast_path", "grad"])
def test_multihead_attention_counts_with_and_without_its_fast_path(grad):
    E, L, S, B = 8, 5, 7, 2
    mha = nn.MultiheadAttention(E, 2, batch_first=True).eval()
    q, kv = torch.randn(B, L, E), torch.randn(B, S, E)

    def call(q, kv):
        return mha(q, kv, kv)[0]

    expected = B * (2 * L * E * E + 2 * S * E * E + 2 * L * S * E)
    with torch.set_grad_enabled(grad):
        for backend in BACKENDS:
            assert count_macs(call, (q, kv), backend, owner=mha).total == expected, backend


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM, nn.RNN])
def test_recurrent_layers(kind):
    T, B, d_in, H, layers = 6, 3, 5, 4, 2
    rnn = kind(d_in, H, num_layers=layers, bidirectional=True, batch_first=True)
    gates = {nn.GRU: 3, nn.LSTM: 4, nn.RNN: 1}[kind]
    per_token = gates * H * (d_in + H) + gates * H * (2 * H + H)  # layer 2 reads both directions (2H)
    expected = T * B * 2 * per_token
    x = torch.randn(B, T, d_in)
    for backend in BACKENDS:
        assert count_macs(lambda x: rnn(x)[0], (x,), backend, owner=rnn).total == expected, (kind, backend)


def test_complex_products_count_four_real_macs():
    a = torch.randn(4, 6, dtype=torch.complex64)
    b = torch.randn(6, 3, dtype=torch.complex64)
    for backend in BACKENDS:
        assert count_macs(lambda a, b: a @ b, (a, b), backend).total == 4 * 4 * 6 * 3, backend
        assert count_macs(lambda a, b: a.real @ b.real, (a, b), backend).total == 4 * 6 * 3, backend
        # elementwise: complex × complex is the recurrence λ ⊙ h (4 real MACs); a real scaling is free
        h = torch.randn(5, 6, dtype=torch.complex64)
        lam = torch.randn(6, dtype=torch.complex64)
        assert count_macs(lambda lam, h: lam * h, (lam, h), backend).total == 4 * 5 * 6, backend
        assert count_macs(lambda h: h * 2.0, (h,), backend).total == 0, backend


def test_einsum_and_baddbmm():
    a, b, c = torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(2, 3, 5)
    for backend in BACKENDS:
        assert count_macs(lambda a, b: torch.einsum("bij,bjk->bik", a, b), (a, b), backend).total == 2 * 3 * 4 * 5
        assert count_macs(lambda c, a, b: torch.baddbmm(c, a, b), (c, a, b), backend).total == 2 * 3 * 4 * 5


# --- a compression wrapper's reduced lengths are what is counted ---


class KeepLast(nn.Module):
    """Toy compression wrapper: after the first block only the newest ``keep`` tokens go on."""

    def __init__(self, model: SASRec, keep: int) -> None:
        super().__init__()
        self.model, self.keep = model, keep

    def forward(self, items):
        m = self.model
        B, L = items.shape
        x = m.item_embedding(items) + m.position_embedding(torch.arange(L))
        lengths = [L]
        for i, block in enumerate(m.blocks):
            n = x.shape[1]
            allowed = torch.ones(n, n, dtype=torch.bool).tril().expand(B, 1, n, n)
            x = block(x, allowed, torch.ones(B, n, 1))
            if i == 0:
                x = x[:, -self.keep :]
                lengths.append(self.keep)
        self.lengths = lengths
        return x

    def kept_lengths(self):
        return self.lengths


def test_compression_wrapper_reduced_lengths_are_counted():
    d, L, keep = 16, 24, 6
    wrapper = KeepLast(SASRec(num_items=N, max_len=L, d_model=d, num_blocks=2, ffn_dim=d), keep)
    expected = sasrec_macs(L, d, 1, d) + sasrec_macs(keep, d, 1, d)
    for backend in BACKENDS:
        assert per_sequence(wrapper, L, backend) == expected, backend
