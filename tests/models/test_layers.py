"""Shared layers: the fast dropout keeps the distribution and the gradient of inverted dropout, on both CPU
paths (the compiled kernel and the eager torch mask); attention's CPU training path is SDPA's formula."""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from seqrec.models.kernels.dropout import compiled_dropout
from seqrec.models.layers import (
    MASK_LEVELS,
    Dropout,
    MultiHeadAttention,
    apply_mask_,
    dropout,
    keep_mask,
    realised_rate,
)

PATHS = ["kernel", "eager"]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """Each test below once through the compiled kernel (skipped where it does not build) and once eager."""
    if request.param == "eager":
        monkeypatch.setenv("SEQREC_KERNELS", "0")
    elif compiled_dropout() is None:
        pytest.skip("the C++ dropout kernel does not build here")
    return request.param


def test_identity_in_eval_and_at_zero():
    x = torch.randn(4, 5)
    layer = Dropout(0.3).eval()
    assert torch.equal(layer(x), x) and torch.equal(dropout(x, 0.0, True), x)


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_rate_expectation_and_gradient(p, path):
    torch.manual_seed(0)
    x = torch.ones(400_000, requires_grad=True)
    y = dropout(x, p, True)
    kept = y.detach() != 0
    assert kept.float().mean().item() == pytest.approx(1 - p, abs=3e-3)
    realised = realised_rate(p)
    levels = MASK_LEVELS if path == "eager" else 2 * MASK_LEVELS
    assert realised == round(p * levels) / levels
    assert y.detach()[kept].unique().tolist() == pytest.approx([1 / (1 - realised)])
    assert y.detach().mean().item() == pytest.approx(1.0, abs=5e-3)  # inverted dropout keeps the expectation
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # ∂y/∂x = keep / (1 − p') = y for x = 1


def test_seeded_masks_repeat(path):
    x = torch.randn(64, 32)
    torch.manual_seed(5)
    a = dropout(x, 0.2, True)
    torch.manual_seed(5)
    assert torch.equal(a, dropout(x, 0.2, True))
    assert not torch.equal(a, dropout(x, 0.2, True))  # the generator moved on: a fresh mask


def test_a_drawn_mask_applies_as_dropout_does_and_non_contiguous_input_works(path):
    torch.manual_seed(1)
    keep, scale = keep_mask((6, 40), torch.device("cpu"), 0.3)
    assert keep.dtype == torch.bool and scale == pytest.approx(1 / (1 - realised_rate(0.3)))
    x = torch.randn(40, 6).t().requires_grad_()  # a transposed view
    torch.manual_seed(1)
    y = dropout(x, 0.3, True)
    assert torch.equal(y, x.detach() * keep * scale)
    y.backward(torch.full_like(y, 2.0))
    assert torch.equal(x.grad, 2.0 * keep * scale)


def test_apply_mask_in_place_scales_the_kept_elements_and_zeroes_the_rest(path):
    x = torch.randn(5, 33)
    keep = torch.rand(5, 33) > 0.4
    expected = x * keep * 1.5
    assert apply_mask_(x, keep, 1.5) is x and torch.equal(x, expected)
    strided = torch.randn(33, 5).t()  # not contiguous: the torch path
    expected = strided * keep * 1.5
    assert torch.equal(apply_mask_(strided, keep, 1.5), expected)


def test_under_a_dispatch_mode_the_torch_path_runs_and_is_counted(monkeypatch):
    """FlopCounterMode (the MACs callback) sees torch operations only: dropout must not hide in the kernel."""
    x = torch.randn(8, 16, requires_grad=True)
    torch.manual_seed(0)
    with FlopCounterMode(display=False):
        y = dropout(x, 0.5, True)
        y.sum().backward()
    assert torch.equal(x.grad, (y.detach() != 0) * 2.0)
    monkeypatch.setenv("SEQREC_KERNELS", "0")
    torch.manual_seed(0)
    assert torch.equal(dropout(x, 0.5, True), y)  # the same mask as the eager torch path draws


def test_attention_training_path_on_cpu_is_sdpas_formula_with_dropouts_mask():
    """With attention dropout, CPU training runs the written-out path; it computes SDPA's formula (checked at
    p = 0 against SDPA itself, values and gradients) and drops the weights with ``dropout``'s mask."""
    torch.manual_seed(0)
    if compiled_dropout() is None:
        pytest.skip("the C++ dropout kernel does not build here")
    attn = MultiHeadAttention(16, 2, dropout=0.0).train()
    x = torch.randn(3, 7, 16, requires_grad=True)
    allowed = (torch.ones(7, 7, dtype=torch.bool).tril() | torch.eye(7, dtype=torch.bool)).expand(3, 1, 7, 7)
    q, k, v = attn.project(x)
    ours = attn.attend_in_place(q, k, v, allowed)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert torch.allclose(ours, sdpa, atol=1e-6)
    g_ours = torch.autograd.grad(ours.square().sum(), x, retain_graph=True)[0]
    g_sdpa = torch.autograd.grad(sdpa.square().sum(), x)[0]
    assert torch.allclose(g_ours, g_sdpa, atol=1e-5)

    attn.dropout = 0.4
    torch.manual_seed(3)
    out = attn(x, x, allowed)
    torch.manual_seed(3)
    q, k, v = attn.project(x)
    weights = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~allowed, float("-inf")), -1)
    expected = attn.out_proj(attn.merge_heads(dropout(weights, 0.4, True) @ v))
    assert torch.allclose(out, expected, atol=1e-6)


def test_bad_rate_is_refused():
    with pytest.raises(ValueError, match="dropout must be in"):
        Dropout(1.0)
