"""The compiled recurrence h_t = λ ⊙ h_{t-1} + u_t: exact gradients, and equal to the eager torch node."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from seqrec.models.kernels.linear_recurrence import compiled_recurrence
from seqrec.models.next_item.lru import _LinearRecurrence

pytestmark = pytest.mark.skipif(compiled_recurrence() is None, reason="the C++ kernel does not build here")


def _inputs(batch: int, length: int, width: int, dtype: torch.dtype, seed: int = 0) -> tuple[Tensor, ...]:
    """λ (H,) with |λ| in [0.5, 0.999], u (B, L, H), h0 (B, H), all complex and requiring gradients."""
    g = torch.Generator().manual_seed(seed)
    real = torch.float64 if dtype == torch.complex128 else torch.float32
    radius = 0.5 + 0.499 * torch.rand(width, generator=g, dtype=real)
    lam = torch.polar(radius, 2 * math.pi * torch.rand(width, generator=g, dtype=real))
    u = torch.randn(batch, length, width, generator=g, dtype=dtype)
    h0 = torch.randn(batch, width, generator=g, dtype=dtype)
    return tuple(t.requires_grad_() for t in (lam, u, h0))


def _run(compiled: bool, lam: Tensor, u: Tensor, h0: Tensor, weights: Tensor) -> tuple[Tensor, ...]:
    """(h, ∂ℓ/∂λ, ∂ℓ/∂u, ∂ℓ/∂h0) for ℓ = Re Σ w ⊙ h through the eager or the compiled node."""
    h = _LinearRecurrence.apply(lam, u, h0, compiled)
    return (h, *torch.autograd.grad((h * weights).real.sum(), (lam, u, h0)))


def test_gradcheck_in_float64() -> None:
    """Forward and adjoint backward (λ, u, h0) by finite differences; H = 67 crosses a 64-lane block."""
    lam, u, h0 = _inputs(2, 5, 67, torch.complex128)
    assert torch.autograd.gradcheck(lambda a, b, c: _LinearRecurrence.apply(a, b, c, True), (lam, u, h0))


def test_equals_the_eager_node_in_float64() -> None:
    lam, u, h0 = _inputs(3, 17, 9, torch.complex128, seed=1)
    weights = torch.randn(3, 17, 9, dtype=torch.complex128)
    for fast, slow in zip(_run(True, lam, u, h0, weights), _run(False, lam, u, h0, weights), strict=True):
        torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)


def test_equals_the_eager_node_at_the_real_shape_in_float32() -> None:
    """B 4, L 200, H 64 complex64 (LRURec's d 32 ... 64 states): values and all gradients to float tolerance."""
    lam, u, h0 = _inputs(4, 200, 64, torch.complex64, seed=2)
    weights = torch.randn(4, 200, 64, dtype=torch.complex64)
    fast, slow = _run(True, lam, u, h0, weights), _run(False, lam, u, h0, weights)
    for name, a, b in zip(("h", "grad λ", "grad u", "grad h0"), fast, slow, strict=True):
        scale = b.abs().max().item()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * scale, msg=lambda m, n=name: f"{n}: {m}")


def test_conjugate_and_strided_gradients_are_read_correctly() -> None:
    """Upstream gradients arriving as conjugate views or non-contiguous slices give the eager result."""
    lam, u, h0 = _inputs(2, 12, 5, torch.complex128, seed=3)
    grads = []
    for compiled in (True, False):
        h = _LinearRecurrence.apply(lam, u, h0, compiled)
        loss = (h.conj()[:, ::3] * torch.arange(1.0, 6.0)).imag.sum() + h[:, -1].abs().sum()
        grads.append(torch.autograd.grad(loss, (lam, u, h0)))
    for fast, slow in zip(*grads, strict=True):
        torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)


def test_the_same_result_at_any_thread_count() -> None:
    """OpenMP splits batch × lane blocks; the batch sum of ∂ℓ/∂λ is taken afterwards in a fixed order."""
    lam, u, h0 = _inputs(16, 40, 130, torch.complex64, seed=4)
    weights = torch.randn(16, 40, 130, dtype=torch.complex64)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _run(True, lam, u, h0, weights)
        torch.set_num_threads(max(2, threads))
        many = _run(True, lam, u, h0, weights)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, many, strict=True):
        assert torch.equal(a, b)


def test_grad_of_lambda_is_skipped_when_not_needed() -> None:
    lam, u, h0 = _inputs(2, 6, 3, torch.complex128, seed=5)
    lam = lam.detach()
    h = _LinearRecurrence.apply(lam, u, h0, True)
    (grad_u,) = torch.autograd.grad(h.real.sum(), (u,))
    assert grad_u.shape == u.shape and lam.grad is None
