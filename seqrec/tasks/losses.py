"""Cross-entropy losses fused with the output projection, in row chunks: the full softmax and the sampled one.

Full softmax (``fused_cross_entropy``, loss ``ce``):

loss = (1/P) Σ_p [ logsumexp_{j ≥ 1} s_pj − s_p,y_p ],  s_pj = h_p · w_j (+ b_j), the padding column j = 0 excluded.

The plain path (``model.score(h)`` then ``F.cross_entropy``) holds the (P, N+1) logits, their log-softmax and
their gradient at once: for LRURec on ML-1M (P ≈ 15.5k labelled positions × 3,417 items) that is three
200 MB tensors and a third of a CPU training step spent in log-softmax passes. Here each chunk of rows is
scored, turned into its gradient ∂loss/∂s = (softmax − onehot)/P in place, and contracted at once into
∂loss/∂h (rows of the chunk) and ∂loss/∂W, ∂loss/∂b (accumulated): the same three matrix products as
autograd would run, no recomputation, and O(chunk × N) memory. Written by hand because torch has no fused
linear-cross-entropy on CPU; the plain path stays as the reference (``FusedLinearCrossEntropy`` is tested
against it to float tolerance, loss and every gradient).

Sampled softmax (``sampled_cross_entropy``, LRURec's XLong loss): each labelled position p scores its target
and K items drawn uniformly from 1..N (with replacement; a draw may equal the target, as in the official code),

loss = (1/P) Σ_p [ log(exp(s_p,y_p) + Σ_k exp(s_p,n_pk)) − s_p,y_p ],

so a step costs P·(K + 1)·d multiply-adds for scoring instead of P·N·d (XLong: K = 100 against N = 2.1M).
``SampledLinearCrossEntropy`` gathers each chunk's (C, K + 1, d) candidate rows once and scatters their
gradient into ∂loss/∂W with ``index_add_``; the plain autograd path (``chunk_rows=None``) holds all P·(K+1)
gathered rows (827 MB at XLong's P ≈ 32,000) and is the reference it is tested against.
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK_LOGITS = 1_572_864
"""Float32 logits per chunk of the full-softmax loss (6 MiB) when ``ce_chunk_rows`` is "auto": a chunk's
logits then stay in cache between its product, its softmax passes and the two gradient products. Measured on
a 2-core AMD EPYC, 1 thread, the whole loss and its gradients at P = 13,959 positions, d = 64: with N = 3,417
items, chunks of 128-512 rows took 286-307 ms and 2,048 rows 367-418 ms; with N = 12,101 items, 128 rows took
483 ms, 512 rows 582 ms and 2,048 rows 676 ms."""
SAMPLED_CHUNK_ROWS = 2048  # "auto" for the sampled loss: its (C, K + 1, d) gathered rows, not re-measured


def auto_chunk_rows(num_classes: int) -> int:
    """Rows per chunk for "auto": ⌊CHUNK_LOGITS / (N + 1)⌋ within [16, 4096] (ML-1M: 460; Beauty: 129)."""
    return max(16, min(4096, CHUNK_LOGITS // max(1, num_classes)))


class _GradientsInForward(torch.autograd.Function):
    """A loss whose forward pass already computed ∂loss/∂hidden, ∂loss/∂weight and ∂loss/∂bias: backward only
    scales them by the upstream gradient (the loss is the end of the graph, so nothing is recomputed)."""

    @staticmethod
    def keep(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, grad_hidden: Tensor,  # noqa: ANN001
             grad_weight: Tensor, grad_bias: Tensor | None) -> None:
        """Save the three gradients (float32) and the input dtypes they are returned in."""
        ctx.save_for_backward(grad_hidden, grad_weight, *(() if grad_bias is None else (grad_bias,)))
        ctx.has_bias = grad_bias is not None
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)

    @staticmethod
    def backward(ctx, grad_output: Tensor):  # noqa: ANN001, ANN205 (autograd signature)
        """Scale the gradients computed in the forward pass by ``grad_output``."""
        grad_hidden, grad_weight, *rest = ctx.saved_tensors
        h_dtype, w_dtype, b_dtype = ctx.dtypes
        grad_bias = (rest[0] * grad_output).to(b_dtype) if ctx.has_bias else None
        return ((grad_hidden * grad_output).to(h_dtype), (grad_weight * grad_output).to(w_dtype), grad_bias,
                None, None, None)


class FusedLinearCrossEntropy(_GradientsInForward):
    """Mean cross-entropy of ``hidden @ weight.T (+ bias)`` against ``target``, gradients computed in the forward pass."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, chunk_rows: int,  # noqa: ANN001
                matmul_dtype: torch.dtype | None) -> Tensor:
        """hidden (P, d), weight (N+1, d), bias (N+1,) or None, target (P,) in 1..N -> scalar mean loss (float32)."""
        rows = hidden.shape[0]
        dtype = matmul_dtype or hidden.dtype
        w = weight.detach().to(dtype)  # (N+1, d)
        h_all = hidden.detach().to(dtype)  # (P, d)
        grad_hidden = torch.empty(rows, hidden.shape[1], dtype=torch.float32, device=hidden.device)  # (P, d)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)  # (N+1, d)
        grad_bias = None if bias is None else torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
        total = torch.zeros((), dtype=torch.float64, device=hidden.device)
        for start in range(0, rows, chunk_rows):
            stop = min(start + chunk_rows, rows)
            h = h_all[start:stop]  # (C, d)
            y = target[start:stop]  # (C,)
            logits = (h @ w.T).float()  # (C, N+1)
            if bias is not None:
                logits += bias.detach().float()
            logits[:, 0] = -torch.inf  # padding is never a class
            picked = logits.gather(1, y.unsqueeze(1))  # (C, 1) s_y
            peak = logits.amax(dim=1, keepdim=True)  # (C, 1)
            probs = logits.sub_(peak).exp_()  # (C, N+1) exp(s − max), in place; 0 at padding
            norm = probs.sum(dim=1, keepdim=True)  # (C, 1)
            total += (peak + norm.log() - picked).sum(dtype=torch.float64)  # Σ logsumexp − s_y
            probs.mul_(1.0 / (norm * rows))  # softmax / P
            probs.scatter_add_(1, y.unsqueeze(1), torch.full_like(picked, -1.0 / rows))  # (softmax − onehot) / P
            g = probs.to(dtype)
            grad_hidden[start:stop] = (g @ w).float()  # (C, d)
            if dtype == torch.float32:
                grad_weight.addmm_(g.T, h)  # (N+1, d) += gᵀ h
            else:
                grad_weight += (g.T @ h).float()
            if grad_bias is not None:
                grad_bias += probs.sum(dim=0)
        _GradientsInForward.keep(ctx, hidden, weight, bias, grad_hidden, grad_weight, grad_bias)
        return (total / rows).float()


def fused_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                        chunk_rows: int = 2048, matmul_dtype: torch.dtype | None = None) -> Tensor:
    """Mean full-softmax CE of ``hidden (P, d) @ weight.T (+ bias)`` over classes 1..N against ``target (P,)``.

    ``matmul_dtype`` (e.g. torch.bfloat16) runs the three products in that dtype; the softmax, the loss and
    the accumulated gradients stay float32.
    """
    if hidden.shape[0] == 0:
        raise ValueError("cross-entropy over an empty batch: no labelled position")
    return FusedLinearCrossEntropy.apply(hidden, weight, bias, target, chunk_rows, matmul_dtype)


def uniform_negatives(rows: int, num_negatives: int, num_items: int, generator: torch.Generator | None = None,
                      device: torch.device | str | None = None) -> Tensor:
    """(rows, num_negatives) int64 items drawn uniformly from 1..N with replacement (LRURec's ``torch.randint``).

    Drawn on ``generator``'s device (the default generator of ``device`` when None), then moved to ``device``.
    """
    where = generator.device if generator is not None else device
    drawn = torch.randint(1, num_items + 1, (rows, num_negatives), generator=generator, device=where)
    return drawn if device is None else drawn.to(device)


class SampledLinearCrossEntropy(_GradientsInForward):
    """Mean softmax cross-entropy over each row's candidates (column 0 the target), gradients in the forward pass."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, candidates: Tensor, chunk_rows: int,  # noqa: ANN001
                matmul_dtype: torch.dtype | None) -> Tensor:
        """hidden (P, d), weight (N+1, d), bias (N+1,) or None, candidates (P, K+1) with the target first -> mean loss."""
        rows, width = hidden.shape
        dtype = matmul_dtype or hidden.dtype
        w = weight.detach()
        h_all = hidden.detach()
        b = None if bias is None else bias.detach().float()
        grad_hidden = torch.empty(rows, width, dtype=torch.float32, device=hidden.device)  # (P, d)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)  # (N+1, d)
        grad_bias = None if bias is None else torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
        total = torch.zeros((), dtype=torch.float64, device=hidden.device)
        for start in range(0, rows, chunk_rows):
            stop = min(start + chunk_rows, rows)
            cand = candidates[start:stop]  # (C, K+1)
            e = w[cand].to(dtype)  # (C, K+1, d)
            h = h_all[start:stop].to(dtype)  # (C, d)
            scores = torch.bmm(e, h.unsqueeze(-1)).squeeze(-1).float()  # (C, K+1)
            if b is not None:
                scores += b[cand]
            norm = torch.logsumexp(scores, dim=1)  # (C,)
            total += (norm - scores[:, 0]).sum(dtype=torch.float64)  # Σ logsumexp − s_target
            g = scores.sub_(norm.unsqueeze(1)).exp_()  # (C, K+1) softmax, in place
            g[:, 0] -= 1.0  # softmax − onehot(target column)
            g.mul_(1.0 / rows)  # ∂loss/∂s
            gd = g.to(dtype)
            grad_hidden[start:stop] = torch.bmm(gd.unsqueeze(1), e).squeeze(1).float()  # (C, d) = Σ_k g_k e_k
            outer = (gd.unsqueeze(-1) * h.unsqueeze(1)).float()  # (C, K+1, d) = g_k h
            grad_weight.index_add_(0, cand.reshape(-1), outer.reshape(-1, width))
            if grad_bias is not None:
                grad_bias.index_add_(0, cand.reshape(-1), g.reshape(-1))
        _GradientsInForward.keep(ctx, hidden, weight, bias, grad_hidden, grad_weight, grad_bias)
        return (total / rows).float()


def sampled_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, num_negatives: int,
                          generator: torch.Generator | None = None, chunk_rows: int | None = 2048,
                          matmul_dtype: torch.dtype | None = None, negatives: Tensor | None = None) -> Tensor:
    """Mean softmax CE of ``hidden (P, d)`` over its target and ``num_negatives`` uniform negatives per position.

    The negatives are drawn from 1..N with replacement by ``generator`` (the default generator when None), or
    given as ``negatives (P, K)``. ``chunk_rows=None`` runs the plain autograd reference path; otherwise the
    fused chunked path (same loss and gradients, O(chunk_rows·(K+1)·d) memory). ``matmul_dtype`` runs the
    products in that dtype; the softmax, the loss and the accumulated gradients stay float32.
    """
    if hidden.shape[0] == 0:
        raise ValueError("cross-entropy over an empty batch: no labelled position")
    if negatives is None:
        if num_negatives < 1:
            raise ValueError(f"num_negatives must be >= 1, got {num_negatives}")
        negatives = uniform_negatives(hidden.shape[0], num_negatives, weight.shape[0] - 1, generator, target.device)
    candidates = torch.cat([target.unsqueeze(1), negatives], dim=1)  # (P, K+1), the target in column 0
    if chunk_rows is None:
        scores = (weight[candidates] @ hidden.unsqueeze(-1)).squeeze(-1).float()  # (P, K+1)
        if bias is not None:
            scores = scores + bias[candidates].float()
        return torch.nn.functional.cross_entropy(scores, torch.zeros_like(target))
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be None (the plain reference path) or >= 1, got {chunk_rows}")
    return SampledLinearCrossEntropy.apply(hidden, weight, bias, candidates, chunk_rows, matmul_dtype)
