"""The fused chunked cross-entropy equals the plain full-logits path: loss and every gradient."""

import math

import pytest
import torch
import torch.nn.functional as F

from seqrec.tasks.losses import fused_cross_entropy


def reference(hidden, weight, bias, target):
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    logits = logits.float()
    logits[:, 0] = -math.inf
    return F.cross_entropy(logits, target)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_loss_and_gradients_equal_the_plain_path(with_bias, chunk):
    torch.manual_seed(0)
    P, d, N = 50, 8, 30
    h0, w0, b0 = torch.randn(P, d), torch.randn(N + 1, d), torch.randn(N + 1)
    y = torch.randint(1, N + 1, (P,))
    results = []
    for fn in (reference, lambda h, w, b, t: fused_cross_entropy(h, w, b, t, chunk)):
        h, w, b = (t.clone().requires_grad_(True) for t in (h0, w0, b0))
        loss = fn(h, w, b if with_bias else None, y)
        (2.5 * loss).backward()  # a non-unit upstream gradient is applied too
        results.append((loss.detach(), h.grad, w.grad, b.grad))
    (ref_loss, *ref_grads), (loss, *grads) = results
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-6)
    for got, want in zip(grads, ref_grads):
        if want is None:
            assert got is None
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_tied_weight_gets_both_gradients():
    """The item table is also the input embedding: autograd adds the input-side gradient to the loss side's."""
    torch.manual_seed(1)
    table = torch.randn(21, 4, requires_grad=True)
    items = torch.randint(1, 21, (6,))
    y = torch.randint(1, 21, (6,))
    fused_cross_entropy(table[items] * 2.0, table, None, y, 4).backward()
    fused_grad = table.grad.clone()
    table.grad = None
    reference(table[items] * 2.0, table, None, y).backward()
    torch.testing.assert_close(fused_grad, table.grad, rtol=1e-5, atol=1e-7)


def test_bf16_products_stay_close_and_the_loss_float32():
    torch.manual_seed(2)
    h, w = torch.randn(40, 16), torch.randn(33, 16) * 0.3
    y = torch.randint(1, 33, (40,))
    loss = fused_cross_entropy(h, w, None, y, 8, torch.bfloat16)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(reference(h, w, None, y).item(), rel=2e-2)


def test_empty_batch_is_a_clear_error():
    with pytest.raises(ValueError, match="no labelled position"):
        fused_cross_entropy(torch.zeros(0, 4), torch.zeros(5, 4), None, torch.zeros(0, dtype=torch.long))


def test_auto_chunk_rows_sizes_a_chunks_logits_to_stay_in_cache():
    from seqrec.tasks.losses import CHUNK_LOGITS, auto_chunk_rows

    assert auto_chunk_rows(3417) == CHUNK_LOGITS // 3417 == 460  # ML-1M (N + 1 = 3,417 columns)
    assert auto_chunk_rows(10) == 4096 and auto_chunk_rows(10**9) == 16  # clamped both ways


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "big"])
def test_the_task_refuses_a_chunk_size_that_is_not_auto_a_positive_integer_or_none(bad):
    from seqrec.models.next_item.sasrec import SASRec
    from seqrec.tasks.next_item import NextItemTask

    with pytest.raises(ValueError, match="ce_chunk_rows must be"):
        NextItemTask(SASRec(num_items=5, max_len=4, d_model=8), ce_chunk_rows=bad)


@pytest.mark.parametrize("rows", ["auto", 3, None])
def test_the_tasks_loss_is_the_same_for_auto_a_fixed_chunk_and_the_plain_path(rows):
    from seqrec.models.next_item.sasrec import SASRec
    from seqrec.tasks.next_item import NextItemTask

    torch.manual_seed(0)
    model = SASRec(num_items=40, max_len=6, d_model=8, dropout=0.0)
    items = torch.randint(1, 41, (5, 6))
    labels = torch.randint(1, 41, (5, 6))
    loss, count = NextItemTask(model, ce_chunk_rows=rows).loss({"items": items, "labels": labels})
    logits = model.score(model(items)).float()
    logits[..., 0] = -float("inf")
    assert count == 30
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(logits.reshape(30, -1), labels.reshape(-1)),
                          atol=1e-6)
