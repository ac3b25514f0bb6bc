"""Layers several models share: multi-head attention written out, the position-wise feed-forward, dropout, and the
LayerNorm of the Annotated Transformer (``BERTLayerNorm``: BERT4Rec and the LRURec authors' SASRec).

``MultiHeadAttention`` is written out (instead of ``nn.MultiheadAttention``) so that queries and keys/values
may come from different inputs (SASRec: Q = LayerNorm(x), K = V = x), so that its MACs are countable (the
MHA fast path hides its matmuls), and so that compression wrappers can read its queries, keys, values and
weights (``CTRTransformer``). Two paths compute the same attention:

    attention(Q, K, V) = softmax(Q Kᵀ / √(d/h) + bias, masked) V per head, heads concatenated, then W_o

- ``forward``: fused, through ``F.scaled_dot_product_attention`` (SASRec);
- ``project`` / ``attend`` / ``merge_heads`` + ``out_proj``: explicit, returning the attention weights
  (the CTR transformer, which also adds a relative-position bias and attends a target to stored keys).

MACs per token (one fused multiply-add = 1; ``seqrec.cost.flops``): projections 4·d² (3·d² without W_o),
attention 2·n·d over n keys, feed-forward 2·d·f. ``fft_macs``: the convention for a real FFT, shared by FMLP-Rec and the MACs counters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqrec.models.kernels.dropout import LEVELS as KERNEL_LEVELS
from seqrec.models.kernels.dropout import kernel_apply, kernel_forward, kernel_mask
from seqrec.models.kernels.dropout import usable_for as kernel_usable_for


class TanhGELU(nn.GELU):
    """GELU with the tanh approximation, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): BERT's, and the PyTorch
    BERT4Rec code's (its own ``GELU`` module computes this formula)."""

    def __init__(self) -> None:
        super().__init__(approximate="tanh")


ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "gelu_tanh": TanhGELU, "relu": nn.ReLU}
MASK_LEVELS = 32768  # the eager CPU masks are 15-bit integers: p is realised to within 1/65536


def apply_mask_(x: Tensor, keep: Tensor, scale: float) -> Tensor:
    """x ← x · keep · scale in place (x contiguous): one pass in the compiled kernel where it runs (a bool
    operand of ``mul_`` is first copied to x's dtype); returns x. Outside autograd's view (custom nodes only)."""
    kernel = kernel_usable_for(x.device, x.dtype)
    if kernel is not None and keep.shape == x.shape and x.is_contiguous():
        return kernel.apply_(x, keep, scale)
    return x.mul_(keep).mul_(scale)


class _KeepMask(torch.autograd.Function):
    """y = x · keep · scale with a boolean mask (saved as 1 byte per element, not a float mask): the eager path,
    where the compiled kernel does not run (``_DrawAndKeep`` is its one-pass counterpart)."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:  # noqa: ANN001
        """x (...), keep (...) bool -> x · keep · scale."""
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return (x * keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: ANN001, ANN205 (autograd signature)
        """∂y/∂x = keep · scale."""
        (keep,) = ctx.saved_tensors
        return (grad * keep).mul_(ctx.scale), None, None


class _DrawAndKeep(torch.autograd.Function):
    """Dropout in the compiled kernel: the mask drawn and applied in one pass; backward ∂y/∂x = keep · scale."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float, kernel: ModuleType) -> Tensor:  # noqa: ANN001
        """x (...) float on CPU -> x · keep · scale with a fresh Philox mask."""
        y, keep, scale = kernel_forward(kernel, x.contiguous(), p)
        ctx.save_for_backward(keep)
        ctx.scale, ctx.kernel = scale, kernel
        return y

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: ANN001, ANN205 (autograd signature)
        """∂y/∂x = keep · scale."""
        (keep,) = ctx.saved_tensors
        return kernel_apply(ctx.kernel, grad, keep, ctx.scale), None, None


def keep_mask(shape: Sequence[int], device: torch.device, p: float) -> tuple[Tensor | None, float]:
    """(keep, scale) of inverted dropout for a tensor of ``shape``: keep ~ Bernoulli(1 − p') booleans, scale
    1/(1 − p'); (None, 1.0) at p = 0. On CPU the compiled kernel draws it (``seqrec.models.kernels.dropout``:
    Philox, p' = ⌊p·2¹⁶⌉/2¹⁶), else 15-bit integers from torch's generator (p' = ⌊p·2¹⁵⌉/2¹⁵); on accelerators
    ``torch.rand`` (p' = p)."""
    if p == 0.0:
        return None, 1.0
    if device.type != "cpu":
        return torch.rand(tuple(shape), device=device) >= p, 1.0 / (1.0 - p)
    kernel = kernel_usable_for(torch.device(device))
    if kernel is not None:
        return kernel_mask(kernel, tuple(shape), p)
    threshold = round(p * MASK_LEVELS)
    keep = torch.empty(tuple(shape), dtype=torch.int16, device=device).random_(0, MASK_LEVELS) >= threshold
    return keep, MASK_LEVELS / (MASK_LEVELS - threshold)


def realised_rate(p: float, device: torch.device | str = "cpu") -> float:
    """The dropout rate p' that ``dropout`` and ``keep_mask`` realise for p on ``device`` (see ``keep_mask``)."""
    device = torch.device(device)
    if device.type != "cpu":
        return p
    levels = KERNEL_LEVELS if kernel_usable_for(device) is not None else MASK_LEVELS
    return round(p * levels) / levels


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Inverted dropout: x · m / (1 − p), m ~ Bernoulli(1 − p); identity when not training or p = 0.

    On CPU the compiled kernel (``seqrec.models.kernels.dropout``) draws a Philox mask and applies it in one
    pass (float32/float64); otherwise the mask is drawn as 15-bit integers from torch's generator (m = r ≥
    ⌊p·2¹⁵⌉, r uniform in 0..2¹⁵−1) and kept as booleans. Both realise p to within 2⁻¹⁶ (``realised_rate``)
    and set the scale 1/(1 − p') from it. ``F.dropout`` draws a float Bernoulli mask, about 8× slower on CPU
    and 4× the memory; on accelerators it is used (a fused kernel there).
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    kernel = kernel_usable_for(x.device, x.dtype)
    if kernel is not None:
        return _DrawAndKeep.apply(x, p, kernel)
    keep, scale = keep_mask(x.shape, x.device, p)
    return _KeepMask.apply(x, keep, scale)


class Dropout(nn.Module):
    """``nn.Dropout`` with the fast CPU mask of ``dropout`` (same distribution, to 1/65536 in p)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        """x (...) -> same shape."""
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        """p in the module's repr."""
        return f"p={self.p}"


class BERTLayerNorm(nn.Module):
    """y = a ⊙ (x − mean(x)) / (std(x) + ε) + b over the last dimension, std with Bessel's correction (n − 1).

    The Annotated Transformer's LayerNorm, used by the PyTorch BERT4Rec and SASRec code of LRURec's first author; it
    differs from ``nn.LayerNorm`` (biased variance, ε inside the square root) by about 1/(2d) relative, so parity
    needs this one.
    """

    def __init__(self, features: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """x (..., d) -> (..., d)."""
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class MultiHeadAttention(nn.Module):
    """h heads of width d/h: Q, K, V projections, scaled dot-product attention, output projection W_o.

    ``dropout`` is the dropout probability of the attention weights. ``output_projection=False`` concatenates
    the heads without W_o (the SASRec of LRURec's authors has none). ``masked_score``: None (default) gives a
    masked key weight 0 (score −∞; a query must have an allowed key); a finite value replaces masked scores with it,
    as code that fills −1e9 does, so a query with every key masked averages all keys uniformly (computed on the
    written-out path).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float, output_projection: bool = True,
                 masked_score: float | None = None) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model) if output_projection else nn.Identity()
        self.dropout = dropout
        self.masked_score = float("-inf") if masked_score is None else masked_score

    def split_heads(self, x: Tensor) -> Tensor:
        """x (..., n, d) -> (..., h, n, d/h)."""
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).transpose(-2, -3)

    def merge_heads(self, heads: Tensor) -> Tensor:
        """heads (..., h, n, d/h) -> (..., n, d), heads concatenated."""
        merged = heads.transpose(-2, -3)  # (..., n, h, d/h)
        return merged.reshape(*merged.shape[:-2], self.num_heads * self.head_dim)

    def project(self, queries: Tensor, keys: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """q = W_q queries, k = W_k keys, v = W_v keys, split into heads (..., h, n, d/h); keys default to queries."""
        keys = queries if keys is None else keys
        return self.split_heads(self.q_proj(queries)), self.split_heads(self.k_proj(keys)), self.split_heads(self.v_proj(keys))

    def drop_weights(self, weights: Tensor) -> Tensor:
        """Dropout on attention probabilities (training only)."""
        return dropout(weights, self.dropout, self.training)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """softmax(q kᵀ/√(d/h) + bias, masked to ``allowed``) v -> (out (B, h, nq, d/h), weights (B, h, nq, nk))."""
        logits = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))  # (B, h, nq, nk)
        if bias is not None:
            logits = logits + bias
        weights = torch.softmax(logits.masked_fill(~allowed, self.masked_score), dim=-1)
        return self.drop_weights(weights) @ v, weights

    def forward(self, queries: Tensor, keys: Tensor, allowed: Tensor) -> Tensor:
        """Fused path: queries (B, L, d), keys = values (B, S, d), allowed (B, 1, L, S) bool -> W_o · heads (B, L, d).

        Training with attention dropout on CPU, where the compiled dropout runs, computes the same formula
        written out (``attend_in_place``): ``scaled_dot_product_attention`` falls back there to its unfused path
        and draws its dropout mask as a float Bernoulli tensor (SASRec on ML-1M: 90 ms per (128, 2, 200, 200)
        draw, a sixth of the step), where ``dropout`` draws and applies it in one pass. ``SEQREC_KERNELS=0``
        keeps SDPA (the reference path).
        """
        q, k, v = self.project(queries, keys)  # (B, h, L | S, d/h)
        finite_fill = self.masked_score != float("-inf")  # SDPA's boolean mask means −∞
        if finite_fill or (self.training and self.dropout > 0.0 and kernel_usable_for(q.device, q.dtype) is not None):
            out = self.attend_in_place(q, k, v, allowed)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, dropout_p=self.dropout if self.training else 0.0
            )  # (B, h, L, d/h)
        return self.out_proj(self.merge_heads(out))  # (B, L, d)

    def attend_in_place(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> Tensor:
        """``attend`` without its weights, the scale and the mask applied in place on the scores (one tensor
        fewer): q (B, h, L, d/h), k, v (B, h, S, d/h), allowed (B, 1, L, S) -> out (B, h, L, d/h)."""
        logits = (q @ k.transpose(-1, -2)).mul_(1.0 / math.sqrt(self.head_dim))  # (B, h, L, S)
        weights = torch.softmax(logits.masked_fill_(~allowed, self.masked_score), dim=-1)
        return self.drop_weights(weights) @ v

    def projection_macs(self) -> int:
        """MACs of the q, k, v and output projections per token: 4·d² (3·d² without W_o)."""
        d = self.q_proj.in_features
        return (4 if isinstance(self.out_proj, nn.Linear) else 3) * d * d


class FeedForward(nn.Module):
    """FFN(x) = W₂ Dropout(act(W₁ x + b₁)) + b₂ at every position; W₁: d -> f, W₂: f -> d, act GELU or ReLU.

    Residual connections, the outer dropout and normalisation belong to the block that uses it.
    """

    def __init__(self, d_model: int, hidden: int, dropout: float, activation: str = "gelu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.w_1 = nn.Linear(d_model, hidden)
        self.w_2 = nn.Linear(hidden, d_model)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """x (..., d) -> (..., d)."""
        return self.w_2(self.dropout(self.activation(self.w_1(x))))  # (..., f) inside

    def macs_per_token(self) -> int:
        """MACs per position: 2·d·f."""
        return 2 * self.w_1.in_features * self.w_1.out_features


def fft_macs(n: int) -> int:
    """MACs of one real-input FFT, or its inverse, of length n (one channel): round(1.25 · n · log₂ n).

    FFTW's benchmark convention counts 5·n·log₂ n real FLOPs for a complex transform of size n and half of that,
    2.5·n·log₂ n, for a real-input one; 1 MAC = 2 FLOPs (``seqrec.cost.flops``). A convention, not the kernel's
    exact operation count (that depends on n's factors and the library's plan): stated so that an FFT is neither
    free nor hidden when models are compared by MACs.
    """
    return round(1.25 * n * math.log2(n)) if n > 1 else 0
