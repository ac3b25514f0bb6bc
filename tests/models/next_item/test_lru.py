"""LRURec: scan correctness, padding, recurrent inference, init, weight-decay groups, autocast."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from seqrec.models.next_item.lru import (
    LRULayer,
    LRURec,
    parallel_scan,
    sequential_scan,
)
from tests.models.next_item.reference import checkout, import_module


def _random_log_lambda(width: int, r_min: float = 0.5, r_max: float = 0.999) -> Tensor:
    """log λ with |λ| ~ U(r_min, r_max) and arg λ ~ U(0, 2π) -> (H,) complex64."""
    radius = r_min + (r_max - r_min) * torch.rand(width)
    theta = 2 * math.pi * torch.rand(width)
    return torch.complex(torch.log(radius), theta)


def _left_padded(lengths: list[int], max_len: int, num_items: int) -> Tensor:
    """Random item ids (B, max_len), row b left-padded with zeros to keep lengths[b] events."""
    items = torch.randint(1, num_items + 1, (len(lengths), max_len))
    for row, n in enumerate(lengths):
        items[row, : max_len - n] = 0
    return items


def _loud(model: torch.nn.Module, std: float = 0.3) -> torch.nn.Module:
    """Scale up the LRU projections so that the recurrence dominates the residual (sharper tests)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "in_proj" in name or "out_proj" in name:
                p.normal_(0.0, std)
    return model


def _model(num_items: int = 40, d_model: int = 16, **kwargs) -> LRURec:
    torch.manual_seed(0)
    return _loud(LRURec(num_items, d_model=d_model, **kwargs)).eval()


# ---- the scan ----------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 13, 64, 100, 257])
def test_parallel_scan_equals_sequential_recurrence(length: int) -> None:
    torch.manual_seed(length)
    log_lambda = _random_log_lambda(8).requires_grad_()
    u = torch.randn(3, length, 8, dtype=torch.complex64, requires_grad=True)
    fast, slow = parallel_scan(log_lambda, u), sequential_scan(log_lambda, u)
    assert fast.shape == slow.shape == (3, length, 8)
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-4)

    # the gradients through both evaluations agree as well
    weights = torch.randn(3, length, 8, dtype=torch.complex64)
    grads = []
    for h in (fast, slow):
        loss = (h * weights).real.sum()
        grads.append(torch.autograd.grad(loss, (log_lambda, u), allow_unused=True, materialize_grads=True))
    for g_fast, g_slow in zip(*grads, strict=True):
        torch.testing.assert_close(g_fast, g_slow, rtol=1e-3, atol=1e-3)


def test_scan_against_closed_form() -> None:
    # h_t = Σ_{s<=t} λ^{t-s} u_s, written out independently of both scans
    torch.manual_seed(1)
    log_lambda = _random_log_lambda(4)
    u = torch.randn(2, 11, 4, dtype=torch.complex64)
    lam = torch.exp(log_lambda.to(torch.complex128))
    u64 = u.to(torch.complex128)
    expected = torch.stack(
        [sum(lam ** (t - s) * u64[:, s] for s in range(t + 1)) for t in range(11)], dim=1
    ).to(torch.complex64)
    torch.testing.assert_close(parallel_scan(log_lambda, u), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("max_len", [1, 7, 16, 45])
def test_layer_parallel_equals_sequential_with_left_padding(max_len: int) -> None:
    torch.manual_seed(max_len)
    layer = _loud(LRULayer(12, dropout=0.0)).eval()
    lengths = [max_len, max(1, max_len // 2), 1, max(1, max_len - 3)]
    mask = _left_padded(lengths, max_len, 5) > 0  # (B, L)
    x = torch.randn(len(lengths), max_len, 12)
    layer.scan = "parallel"
    h_fast, y_fast = layer.states(x, mask), layer(x, mask)
    layer.scan = "sequential"
    h_slow, y_slow = layer.states(x, mask), layer(x, mask)
    torch.testing.assert_close(h_fast, h_slow, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y_fast, y_slow, rtol=1e-5, atol=1e-5)
    # the state at a padded position is exactly zero
    assert torch.all(h_fast[~mask] == 0)
    # the first real position starts from h = 0: h = γ ⊙ (B x + b_B) there
    _, gamma = layer.coefficients()
    for row, n in enumerate(lengths):
        first = max_len - n
        expected = layer.in_proj(x[row, first]) * gamma
        torch.testing.assert_close(h_fast[row, first], expected)


def test_layer_matches_complex_reference() -> None:
    # reference written with complex matrices: h_t = λ h_{t-1} + γ (B x_t + b_B), y = LN(Re(C h + b_C) + x)
    torch.manual_seed(2)
    layer = _loud(LRULayer(6, dropout=0.0)).eval()
    x = torch.randn(2, 9, 6)
    mask = torch.ones(2, 9, dtype=torch.bool)
    nu, theta, gamma = torch.exp(layer.params_log.detach())
    lam = torch.exp(torch.complex(-nu, theta))
    ip, op = layer.in_proj, layer.out_proj
    b_mat = torch.complex(ip.weight_real, ip.weight_imag).detach()
    b_vec = torch.complex(ip.bias_real, ip.bias_imag).detach()
    c_mat = torch.complex(op.weight_real, op.weight_imag).detach()
    h = torch.zeros(2, layer.state_size, dtype=torch.complex64)
    outputs = []
    for t in range(9):
        h = lam * h + gamma * (x[:, t].to(torch.complex64) @ b_mat.T + b_vec)
        pre = (h @ c_mat.T).real + op.bias_real.detach() + x[:, t]
        outputs.append(torch.nn.functional.layer_norm(pre, (6,), eps=layer.layer_norm.eps))
    expected = torch.stack(outputs, dim=1)
    torch.testing.assert_close(layer(x, mask), expected, rtol=1e-5, atol=1e-5)


# ---- the compiled recurrence ("kernel", and "auto" on CPU) against the torch loop ("sequential") ---------


def test_kernel_scan_equals_sequential_values_and_parameter_gradients() -> None:
    """The LRU layer with left padding: states, outputs and every parameter's gradient, kernel vs torch loop."""
    torch.manual_seed(3)
    layer = _loud(LRULayer(16, dropout=0.0)).eval()
    mask = _left_padded([40, 17, 1, 33], 40, 5) > 0  # (B, L)
    x = torch.randn(4, 40, 16)
    results = []
    for scan in ("kernel", "sequential"):
        layer.scan = scan
        h, y = layer.states(x, mask), layer(x, mask)
        grads = torch.autograd.grad((y * torch.linspace(-1, 1, 16)).sum(), list(layer.parameters()))
        results.append((h, y, *grads))
    assert torch.all(results[0][0][~mask] == 0)  # padding carries no state in the kernel either
    for fast, slow in zip(*results, strict=True):  # ∂ℓ/∂λ sums B·L float32 terms in another order
        torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5 * slow.abs().max().item())


def test_auto_runs_the_kernel_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from seqrec.models.kernels.linear_recurrence import compiled_recurrence, recurrence_forward
    from seqrec.models.next_item import lru

    if compiled_recurrence() is None:
        pytest.skip("the C++ kernel does not build here")
    calls = []

    def spy(*args: object) -> Tensor:
        calls.append(1)
        return recurrence_forward(*args)

    monkeypatch.setattr(lru, "recurrence_forward", spy)
    for scan, expected in (("auto", 1), ("kernel", 2), ("sequential", 2), ("parallel", 2)):
        _model(scan=scan, num_layers=1)(torch.randint(1, 41, (2, 5)))
        assert len(calls) == expected, scan


def test_macs_counted_by_flop_counter_mode_are_the_same_with_the_kernel() -> None:
    """Under a dispatch mode (FlopCounterMode) the torch loop runs, so the recurrence's MACs are still seen."""
    from seqrec.cost.flops import macs_flop_counter

    items = torch.randint(1, 41, (2, 12))
    counts = [macs_flop_counter(_model(scan=scan), (items,)).total for scan in ("kernel", "sequential")]
    assert counts[0] == counts[1] > 0


@pytest.mark.slow
def test_seeded_training_gives_the_same_losses_with_the_kernel() -> None:
    """30 Adam steps of LRURec (d 64, 2 layers, dropout on) on ML-100k-sized data (943 users, 1,682 items,
    left-padded histories up to L 200): the kernel's losses equal the torch loop's to float tolerance."""
    from seqrec.models.kernels.linear_recurrence import compiled_recurrence

    if compiled_recurrence() is None:
        pytest.skip("the C++ kernel does not build here")
    num_items, num_users, length, batch = 1682, 943, 200, 4
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, length + 1, (num_users,), generator=g)
    items = torch.randint(1, num_items + 1, (num_users, length + 1), generator=g)
    items[torch.arange(length + 1) < (length + 1 - lengths[:, None])] = 0  # left padding

    def losses(scan: str) -> tuple[list[float], Tensor]:
        """The 30 losses and the trained (ν_log, θ_log, γ_log) of every layer."""
        torch.manual_seed(0)
        model = LRURec(num_items, d_model=64, num_layers=2, dropout=0.2, scan=scan).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        out = []
        for step in range(30):
            rows = torch.arange(step * batch, (step + 1) * batch) % num_users
            inputs, labels = items[rows, :-1], items[rows, 1:]
            logits = model.score(model(inputs))  # (B, L, N+1)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=0)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            out.append(loss.item())
        return out, torch.stack([layer.params_log.detach() for layer in model.lru_layers])

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 5x less wall time on a loaded 2-core machine; the losses do not depend on it
    try:
        (kernel, kernel_params), (eager, eager_params) = losses("kernel"), losses("sequential")
    finally:
        torch.set_num_threads(threads)
    assert kernel[-1] < kernel[0]  # it trains
    torch.testing.assert_close(torch.tensor(kernel), torch.tensor(eager), rtol=1e-4, atol=0)
    # the recurrence's own parameters moved alike (Adam's steps hide a gradient's scale, not its direction)
    torch.testing.assert_close(kernel_params, eager_params, rtol=1e-4, atol=1e-5)


# ---- padding -----------------------------------------------------------------------------------


@pytest.mark.parametrize("scan", ["parallel", "sequential", "kernel"])
def test_padding_never_carries_state(scan: str) -> None:
    model = _model(scan=scan)
    history = torch.randint(1, 41, (3, 10))
    short = torch.cat([torch.zeros(3, 3, dtype=torch.long), history], dim=1)  # (3, 13)
    long = torch.cat([torch.zeros(3, 22, dtype=torch.long), history], dim=1)  # (3, 32)
    with torch.no_grad():
        bare = model(history)
        torch.testing.assert_close(model(short)[:, -10:], bare, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model(long)[:, -10:], bare, rtol=1e-5, atol=1e-5)
        # whatever the padding row embeds, real positions do not see it
        model.item_embedding.weight[0] = 50 * torch.randn(16)
        torch.testing.assert_close(model(long)[:, -10:], bare, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scan", ["parallel", "sequential", "kernel"])
def test_official_padding_reads_each_padded_positions_own_drive_and_changes_no_real_position(scan: str) -> None:
    torch.manual_seed(1)
    layer = _loud(LRULayer(8, dropout=0.0, scan=scan, padding_drive=True)).eval()
    clean = LRULayer(8, dropout=0.0, scan=scan).eval()
    clean.load_state_dict(layer.state_dict())
    x = torch.randn(3, 7, 8)
    mask = _left_padded([4, 1, 0], 7, 9) > 0  # (3, 7)
    with torch.no_grad():
        _, gamma = layer.coefficients()
        own = layer.in_proj(x, scale=gamma)  # (3, 7, H): u_p = γ ⊙ (B x_p + b_B), no carry in
        states = layer.states(x, mask)
        torch.testing.assert_close(states[~mask], own[~mask])
        torch.testing.assert_close(states[mask], clean.states(x, mask)[mask])  # real positions: the same
        assert torch.count_nonzero(clean.states(x, mask)[~mask]) == 0  # clean: zero state at padding
        torch.testing.assert_close(layer.final_state(x, mask), states[:, -1], rtol=1e-5, atol=1e-5)


def test_official_padding_trains_the_padding_row_and_keeps_real_positions() -> None:
    clean, official = _model(), _model(padding="official")
    official.load_state_dict(clean.state_dict())
    items = _left_padded([12, 3, 1, 7], 12, 40)  # (4, 12)
    mask = items > 0
    with torch.no_grad():
        a, b = clean(items), official(items)  # (4, 12, d)
    torch.testing.assert_close(b[mask], a[mask], rtol=1e-5, atol=1e-5)
    assert (b[~mask] - a[~mask]).abs().max() > 1e-2  # the padded positions differ
    torch.testing.assert_close(b[~mask], b[~mask][:1].expand_as(b[~mask]))  # one value at every padded position
    for model, trained in ((clean, False), (official, True)):
        model.train().zero_grad()
        model(items)[~mask].sum().backward()  # a loss on labels at padded inputs only
        assert bool(model.item_embedding.weight.grad[0].abs().sum() > 0) is trained  # E[0]: padding_idx or not
    with pytest.raises(ValueError, match="padding must be one of"):
        LRURec(10, padding="zeros")


def _official_weights(official: torch.nn.Module) -> dict[str, Tensor]:
    """The official LRU's state_dict in seqrec's names: complex projections split into real and imaginary
    parts (the output projection's imaginary bias dropped: only Re(C h + b_C) is read)."""
    ours: dict[str, Tensor] = {}
    for name, value in official.state_dict().items():
        name = name.replace("embedding.token.", "item_embedding.").replace("embedding.layer_norm.", "embedding_layer_norm.")
        name = name.replace("model.lru_blocks.", "blocks.").replace("model.bias", "output_bias")
        if value.is_complex():
            base, kind = name.rsplit(".", 1)
            ours[f"{base}.{kind}_real"] = value.real.clone()
            if not (base.endswith("out_proj") and kind == "bias"):
                ours[f"{base}.{kind}_imag"] = value.imag.clone()
        else:
            ours[name] = value
    return ours


@pytest.mark.parametrize("padding", ["clean", "official"])
def test_logits_equal_the_official_codes_at_every_position_with_official_padding(padding: str) -> None:
    """Same weights, same left-padded windows: the official model's scores (B, L, N+1) equal ours at every
    real position under both paddings, and at the padded positions too with ``padding="official"``."""
    root = checkout("SEQREC_LRUREC_OFFICIAL", "yueqirex/LRURec")
    from types import SimpleNamespace

    reference = import_module(root, "model/lru.py")
    args = SimpleNamespace(num_items=50, bert_hidden_units=16, bert_num_blocks=2, bert_dropout=0.2,
                           bert_attn_dropout=0.2, dataset_code="ml-1m")
    torch.manual_seed(3)
    official = reference.LRU(args).eval()
    with torch.no_grad():  # louder projections (std 0.3): the recurrence, and so padding, visible in the logits
        for name, p in official.named_parameters():
            if "in_proj" in name or "out_proj" in name:
                p.mul_(15)
    ours = LRURec(50, d_model=16, num_layers=2, padding=padding, scan="sequential").eval()
    ours.load_state_dict(_official_weights(official))
    items = _left_padded([20, 13, 1, 6], 20, 50)  # (4, 20): L not a power of two, rows of every shape
    mask = items > 0
    with torch.no_grad():
        expected, _ = official(items)  # (4, 20, 51)
        got = ours.score(ours(items))
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-4, atol=1e-4)
    if padding == "official":
        torch.testing.assert_close(got[~mask], expected[~mask], rtol=1e-4, atol=1e-4)
    else:
        assert (got[~mask] - expected[~mask]).abs().max() > 1e-3


# ---- recurrent inference -----------------------------------------------------------------------


@pytest.mark.parametrize("padding", ["clean", "official"])
def test_step_equals_parallel_forward_last_hidden(padding: str) -> None:
    model = _model(num_layers=3, padding=padding)
    items = _left_padded([60, 1, 37, 59, 2, 0], 60, 40)  # (6, 60); the last row is all padding
    with torch.no_grad():
        hidden = model(items)  # (6, 60, d)
        torch.testing.assert_close(model.last_hidden(items), hidden[:, -1], rtol=0, atol=1e-5)
        state = model.init_state(6)
        for t in range(items.shape[1]):
            state, last = model.step(state, items[:, t])
        torch.testing.assert_close(last, hidden[:, -1], rtol=0, atol=1e-5)
        # prefill (parallel) hands over the same state, and stepping on from it matches forward
        prefilled, prefill_hidden = model.prefill(items)
        torch.testing.assert_close(prefill_hidden, hidden, rtol=0, atol=1e-5)
        for a, b in zip(prefilled, state, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        nxt = torch.randint(1, 41, (6,))
        _, stepped = model.step(prefilled, nxt)
        longer = model(torch.cat([items, nxt[:, None]], dim=1))
        torch.testing.assert_close(stepped, longer[:, -1], rtol=0, atol=1e-5)


def test_step_with_padding_keeps_state() -> None:
    model = _model()
    with torch.no_grad():
        state, _ = model.step(model.init_state(2), torch.tensor([3, 7]))
        after, _ = model.step(state, torch.tensor([0, 5]))
    assert torch.equal(after[0][0], state[0][0])  # padding event: unchanged, not decayed
    assert not torch.equal(after[0][1], state[0][1])


def test_state_bytes() -> None:
    model = LRURec(10)  # d=64, H=128, 2 layers, complex64
    assert model.state_bytes() == 2 * 128 * 8
    assert model.state_bytes(4) == 4 * 2 * 128 * 8
    assert sum(s.numel() * s.element_size() for s in model.init_state(4)) == model.state_bytes(4)


# ---- initialisation ----------------------------------------------------------------------------


@pytest.mark.parametrize(("r_min", "r_max"), [(0.8, 0.99), (0.4, 0.6)])
def test_ring_init(r_min: float, r_max: float) -> None:
    torch.manual_seed(3)
    layer = LRULayer(256, r_min=r_min, r_max=r_max)  # H = 512
    log_lambda, gamma = layer.coefficients()
    radius, theta = torch.exp(log_lambda.real), log_lambda.imag
    assert layer.params_log.shape == (3, 512)
    assert radius.min() >= r_min - 1e-6 and radius.max() <= r_max + 1e-6
    assert radius.max() - radius.min() > 0.8 * (r_max - r_min)  # spread over the ring
    assert theta.min() >= 0 and theta.max() <= 2 * math.pi + 1e-5
    assert theta.max() - theta.min() > 0.8 * 2 * math.pi
    torch.testing.assert_close(gamma, torch.sqrt(1 - radius**2))


def test_truncated_normal_init_everywhere_but_layer_norm_and_params_log() -> None:
    torch.manual_seed(4)
    model = LRURec(500, d_model=32)
    for name, p in model.named_parameters():
        if "layer_norm" in name:
            assert torch.all(p == (1.0 if name.endswith("weight") else 0.0)), name
        elif "params_log" not in name:
            assert p.abs().max() <= 0.04 + 1e-7, name
            assert p.std() > 0.01, name  # biases and the output bias are initialised too


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="scan"):
        LRURec(10, scan="fast")
    with pytest.raises(ValueError, match="r_min"):
        LRULayer(8, r_min=0.9, r_max=1.0)
    with pytest.raises(ValueError, match="scan"):
        LRURec(10).set_scan("fft")


# ---- parameter names the optimiser's decay rule reads ---------------------------------------------


def test_parameter_names_follow_lrurecs_decay_rule() -> None:
    """LRURec decays everything but names containing "bias" or "layer_norm" (the task's default ``no_decay``):
    the names must put the biases and norms, and only them, on the no-decay side."""
    model = LRURec(30, d_model=8)
    names = [n for n, _ in model.named_parameters()]
    no_decay = {n for n in names if "bias" in n or "layer_norm" in n}
    decay = set(names) - no_decay
    assert {"item_embedding.weight", "blocks.0.lru_layer.params_log", "blocks.1.lru_layer.params_log",
            "blocks.0.lru_layer.in_proj.weight_real", "blocks.0.feed_forward.w_1.weight"} <= decay
    assert {"output_bias", "blocks.0.lru_layer.in_proj.bias_imag", "embedding_layer_norm.weight",
            "blocks.0.feed_forward.w_1.bias", "blocks.0.feed_forward.layer_norm.weight"} <= no_decay


def test_every_parameter_gets_a_gradient() -> None:
    # (an unused parameter breaks DDP without find_unused_parameters)
    model = _model().train()
    items = _left_padded([6, 3], 6, 40)
    model.score(model(items)).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing


# ---- precision and scoring ---------------------------------------------------------------------


def test_bf16_autocast_keeps_lru_block_in_float32() -> None:
    model = _model()
    items = _left_padded([20, 5], 20, 40)
    layer = model.blocks[0].lru_layer
    x = torch.randn(2, 20, 16).to(torch.bfloat16)
    mask = items > 0
    with torch.no_grad():
        reference_layer = layer(x.float(), mask)
        reference = model(items)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            states = layer.states(x, mask)
            inside = layer(x, mask)
            mixed = model(items)
    assert states.dtype == torch.complex64 and inside.dtype == torch.float32
    torch.testing.assert_close(inside, reference_layer, rtol=1e-6, atol=1e-6)  # no bf16 inside
    assert torch.isfinite(mixed).all()
    torch.testing.assert_close(mixed.float(), reference, rtol=0, atol=0.1)  # only the PFFN ran in bf16

    model.train()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        loss = model.score(model(items)).float().logsumexp(-1).mean()
    loss.backward()
    assert torch.isfinite(model.blocks[0].lru_layer.params_log.grad).all()


def test_scores_shape_and_tied_table() -> None:
    model = _model(num_items=40)
    items = _left_padded([7, 4], 7, 40)
    hidden = model(items)
    assert hidden.shape == (2, 7, 16)
    scores = model.score(hidden)
    assert scores.shape == (2, 7, 41)
    expected = hidden @ model.item_embedding.weight.T + model.output_bias
    torch.testing.assert_close(scores, expected)
    assert model.item_embeddings() is model.item_embedding.weight
    candidates = torch.randint(1, 41, (2, 7, 5))
    torch.testing.assert_close(model.score(hidden, candidates), scores.gather(-1, candidates))


def test_the_hand_written_recurrence_has_exact_gradients():
    """gradcheck of the sequential scan's adjoint (λ, u and the initial state), in complex128."""
    from seqrec.models.next_item.lru import _LinearRecurrence

    torch.manual_seed(0)
    lam = (0.9 * torch.exp(1j * torch.rand(5, dtype=torch.float64))).requires_grad_(True)
    u = torch.randn(3, 7, 5, dtype=torch.complex128, requires_grad=True)
    h0 = torch.randn(3, 5, dtype=torch.complex128, requires_grad=True)
    assert torch.autograd.gradcheck(_LinearRecurrence.apply, (lam, u, h0))


def test_complex_linear_equals_the_complex_arithmetic_it_stands_for():
    from seqrec.models.next_item.lru import ComplexLinear

    torch.manual_seed(0)
    layer = ComplexLinear(6, 4)
    x = torch.randn(2, 3, 6)
    scale = torch.rand(4)
    W = torch.complex(layer.weight_real, layer.weight_imag)
    b = torch.complex(layer.bias_real, layer.bias_imag)
    expected = scale * (x.to(torch.complex64) @ W.T + b)
    torch.testing.assert_close(layer(x, scale=scale), expected, rtol=1e-5, atol=1e-6)
    back = ComplexLinear(4, 6, imag_bias=False)
    h = torch.randn(2, 3, 4, dtype=torch.complex64)
    W2 = torch.complex(back.weight_real, back.weight_imag)
    torch.testing.assert_close(back.real_part(h), (h @ W2.T).real + back.bias_real, rtol=1e-5, atol=1e-6)
