"""Shared layers: the fast dropout keeps the distribution and the gradient of inverted dropout."""

import pytest
import torch

from seqrec.models.layers import MASK_LEVELS, Dropout, dropout


def test_identity_in_eval_and_at_zero():
    x = torch.randn(4, 5)
    layer = Dropout(0.3).eval()
    assert torch.equal(layer(x), x) and torch.equal(dropout(x, 0.0, True), x)


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_rate_expectation_and_gradient(p):
    torch.manual_seed(0)
    x = torch.ones(400_000, requires_grad=True)
    y = dropout(x, p, True)
    kept = y.detach() != 0
    assert kept.float().mean().item() == pytest.approx(1 - p, abs=3e-3)
    realised = round(p * MASK_LEVELS) / MASK_LEVELS
    assert y.detach()[kept].unique().tolist() == pytest.approx([1 / (1 - realised)])
    assert y.detach().mean().item() == pytest.approx(1.0, abs=5e-3)  # inverted dropout keeps the expectation
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # ∂y/∂x = keep / (1 − p') = y for x = 1


def test_seeded_masks_repeat():
    x = torch.randn(64, 32)
    torch.manual_seed(5)
    a = dropout(x, 0.2, True)
    torch.manual_seed(5)
    assert torch.equal(a, dropout(x, 0.2, True))


def test_bad_rate_is_refused():
    with pytest.raises(ValueError, match="dropout must be in"):
        Dropout(1.0)
