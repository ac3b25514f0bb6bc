"""LRURec's XLong loss: softmax over the target plus K uniform negatives; the fused path equals the plain one."""

import pytest
import torch
import torch.nn.functional as F

from seqrec.tasks.losses import sampled_cross_entropy, uniform_negatives


def by_hand(hidden, weight, bias, target, negatives):
    """loss = mean_p [ logsumexp(s_target, s_negatives) − s_target ], written out row by row."""
    losses = []
    for p in range(hidden.shape[0]):
        items = torch.cat([target[p : p + 1], negatives[p]])
        scores = weight[items] @ hidden[p] + (0 if bias is None else bias[items])
        losses.append(torch.logsumexp(scores, 0) - scores[0])
    return torch.stack(losses).mean()


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("chunk", [None, 1, 7, 1000])
def test_loss_and_gradients_equal_the_definition(with_bias, chunk):
    torch.manual_seed(0)
    P, d, N, K = 30, 8, 25, 6
    h0, w0, b0 = torch.randn(P, d), torch.randn(N + 1, d), torch.randn(N + 1)
    y = torch.randint(1, N + 1, (P,))
    negatives = uniform_negatives(P, K, N, torch.Generator().manual_seed(3))
    negatives[0, :2] = y[0]  # a draw equal to the target stays a negative, as in the official code
    negatives[1, :] = negatives[1, 0]  # repeated draws each count
    results = []
    for fn in (by_hand, lambda h, w, b, t, n: sampled_cross_entropy(h, w, b, t, K, chunk_rows=chunk, negatives=n)):
        h, w, b = (t.clone().requires_grad_(True) for t in (h0, w0, b0))
        loss = fn(h, w, b if with_bias else None, y, negatives)
        (1.7 * loss).backward()
        results.append((loss.detach(), h.grad, w.grad, b.grad))
    (want_loss, *want), (loss, *got) = results
    torch.testing.assert_close(loss, want_loss, rtol=1e-6, atol=1e-6)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_negatives_are_uniform_over_the_catalogue_and_seeded():
    a = uniform_negatives(400, 100, 50, torch.Generator().manual_seed(7))
    b = uniform_negatives(400, 100, 50, torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and a.shape == (400, 100)
    assert int(a.min()) == 1 and int(a.max()) == 50  # never the padding id 0
    counts = torch.bincount(a.reshape(-1), minlength=51)[1:].float()
    assert counts.std() / counts.mean() < 0.1  # 40,000 draws over 50 items: about 800 each


def test_seeded_generator_gives_the_same_loss_and_tied_table_gets_both_gradients():
    torch.manual_seed(1)
    table = torch.randn(41, 4, requires_grad=True)
    items = torch.randint(1, 41, (12,))
    y = torch.randint(1, 41, (12,))
    losses, grads = [], []
    for chunk in (None, 5):
        table.grad = None
        loss = sampled_cross_entropy(table[items] * 2.0, table, None, y, 9, torch.Generator().manual_seed(4), chunk)
        loss.backward()
        losses.append(loss.detach())
        grads.append(table.grad.clone())
    torch.testing.assert_close(losses[0], losses[1])
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-7)


def test_all_negatives_equal_the_target_gives_log_k_plus_one():
    h, w = torch.randn(3, 4), torch.randn(10, 4)
    y = torch.tensor([2, 5, 9])
    loss = sampled_cross_entropy(h, w, None, y, 4, negatives=y.unsqueeze(1).expand(3, 4).clone())
    assert loss.item() == pytest.approx(torch.log(torch.tensor(5.0)).item(), rel=1e-6)


def test_bf16_products_stay_close_and_the_loss_float32():
    torch.manual_seed(2)
    h, w = torch.randn(40, 16), torch.randn(33, 16) * 0.3
    y = torch.randint(1, 33, (40,))
    negatives = uniform_negatives(40, 10, 32, torch.Generator().manual_seed(0))
    loss = sampled_cross_entropy(h, w, None, y, 10, chunk_rows=8, matmul_dtype=torch.bfloat16, negatives=negatives)
    plain = sampled_cross_entropy(h, w, None, y, 10, chunk_rows=None, negatives=negatives)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(plain.item(), rel=2e-2)
    assert plain.item() == pytest.approx(F.cross_entropy(
        (w[torch.cat([y[:, None], negatives], 1)] @ h[..., None]).squeeze(-1), torch.zeros_like(y)).item())


def test_errors():
    with pytest.raises(ValueError, match="no labelled position"):
        sampled_cross_entropy(torch.zeros(0, 4), torch.zeros(5, 4), None, torch.zeros(0, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="num_negatives must be >= 1"):
        sampled_cross_entropy(torch.zeros(2, 4), torch.zeros(5, 4), None, torch.ones(2, dtype=torch.long), 0)
