"""LRURec: linear recurrent units for sequential recommendation (Yue et al., WSDM 2024).

Layout follows the official code (github yueqirex/LRURec, ``model/lru.py``)::

    x = LayerNorm(Dropout(E[items]))                                   # (B, L, d)
    repeat num_layers:
        x = LRULayer(x)   y_t = LayerNorm(Dropout(Re(C h_t + b_C)) + x_t)
                          h_t = λ ⊙ h_{t-1} + γ ⊙ (B x_t + b_B),  h ∈ C^H, H = 2d
        x = PFFN(x)       LayerNorm(x + Dropout(W2 Dropout(GELU(W1 x))))
    scores = x Eᵀ + b                                                   # tied item table, item bias

λ = exp(−exp(ν_log) + i·exp(θ_log)), γ = exp(γ_log); ``params_log`` = (ν_log, θ_log, γ_log).

Padding (item id 0, sequences left-padded) never carries state: the driven input γ ⊙ (B x_t + b_B)
is zeroed at padded positions, so the state there is exactly 0 and the first real event starts from
h = 0. ``padding="official"`` reproduces what the official code computes *at* a padded position (a real
position is the same under both): there the state read out is the position's own drive u_p = γ ⊙ (B x_p + b_B)
(its log-depth scan multiplies every carry out of a padded position by the mask, so a padded position keeps
only its own input and passes nothing on), and the padding row E[0] is trained (its embedding has no
``padding_idx``). It matters only for a label whose input position is padding: the first item of a window
shorter than max_len, 0.7% of ML-1M's training labels and 16.9% of Beauty's (PROTOCOLS.md §1.10).

The recurrence is evaluated by a log-depth parallel scan (GPU), step by step in one compiled CPU loop
(``seqrec.models.kernels``), or step by step in torch (the exact reference, and O(1)-per-event recurrent
inference through ``LRURec.step``).

The complex block always runs in float32/complex64, also under bf16/fp16 autocast.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

from seqrec.models.base import RecurrentState, SequenceRecommender, truncated_normal_
from seqrec.models.kernels.linear_recurrence import (
    compiled_recurrence,
    recurrence_backward,
    recurrence_forward,
)
from seqrec.models.layers import Dropout, FeedForward

SCANS = ("parallel", "sequential", "kernel", "auto")
"""How ``LRULayer`` evaluates its recurrence: "parallel" log-depth scan; "sequential" step-by-step torch calls
(the reference); "kernel" the same steps as one compiled CPU loop (the torch loop where it is unavailable);
"auto": "parallel" on accelerators, "kernel" on CPU."""
PADDINGS = ("clean", "official")  # what a padded position reads out: zero state (clean) or its own drive

LRUState = RecurrentState
"""Recurrent per-user state: one complex64 tensor (B, H) per LRU layer."""


def _next_power_of_two(n: int) -> int:
    """Smallest 2^k >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


def lambda_powers(log_lambda: Tensor, n: int) -> Tensor:
    """λ^k = exp(k · log λ) for k = 1..n -> (n, H) complex64.

    Computed in complex128 from the exponent (not by repeated products) so that long scans keep
    the phase k·θ accurate; differentiable with respect to ``log_lambda`` (H,).
    """
    k = torch.arange(1, n + 1, device=log_lambda.device, dtype=torch.float64)  # (n,)
    return torch.exp(k[:, None] * log_lambda.to(torch.complex128)[None, :]).to(torch.complex64)  # (n, H)


def parallel_scan(log_lambda: Tensor, u: Tensor) -> Tensor:
    """All states of h_t = λ ⊙ h_{t-1} + u_t with h_{-1} = 0, in log2(L) vectorised steps.

    log_lambda: (H,) complex, u: (B, L, H) complex -> h: (B, L, H).
    Time is left-padded with zeros to P = 2^⌈log2 L⌉ (zero input keeps a zero state). At level
    s = 1, 2, 4, ..., P/2 the sequence is cut into blocks of 2s; each block's right half already holds
    its own recurrence from a zero start, so adding λ^{1..s} ⊙ (last state of the left half) gives the
    recurrence from the block start. After the last level the block is the whole sequence.
    Cost O(B·P·log P·H) work, O(log P) depth. The right halves are updated in place on a fresh
    buffer (only the carried state is copied), which halves the memory traffic of a
    split-and-concatenate formulation and keeps autograd exact.
    """
    batch, length, width = u.shape
    padded = _next_power_of_two(int(length))  # int(): fvcore traces with tensor sizes
    h = F.pad(u, (0, 0, padded - length, 0))  # (B, P, H): a new tensor, never a view of u
    if padded == length:
        h = h.clone()
    powers = lambda_powers(log_lambda, padded // 2)  # (P/2, H): λ^1 .. λ^{P/2}
    half = 1
    while half < padded:
        blocks = h.view(batch, padded // (2 * half), 2 * half, width)  # (B, P/2s, 2s, H)
        carry = blocks[:, :, half - 1 : half].clone()  # (B, P/2s, 1, H): last state of each left half
        blocks[:, :, half:] += powers[:half] * carry  # right half += λ^{1..s} ⊙ carry
        half *= 2
    return h.reshape(batch, padded, width)[:, padded - length :]  # (B, L, H)


class _LinearRecurrence(torch.autograd.Function):
    """h_t = λ ⊙ h_{t-1} + u_t along dim 1, written out with its adjoint so autograd records one node.

    Backward (conjugate-Wirtinger convention of torch's complex autograd): with g_t = ∂ℓ/∂h_t* accumulated
    from the end, g_t ← ∂ℓ/∂h_t* + conj(λ) ⊙ g_{t+1}; then ∂ℓ/∂u_t* = g_t, ∂ℓ/∂λ* = Σ_{b,t} g_t ⊙ conj(h_{t-1})
    and ∂ℓ/∂h0* = conj(λ) ⊙ g_0. Recording each step as autograd nodes instead (L multiplies, adds, a stack
    and an unbind) made half of LRURec's layer time on CPU bookkeeping: here each step is two in-place ops.
    ``compiled=True`` runs both loops in the C++ kernel instead (``seqrec.models.kernels.linear_recurrence``:
    the same formulas, all L steps in one compiled loop over batch × state, CPU tensors only); the
    parametrisation of λ (ν_log, θ_log) stays outside, differentiated by autograd.
    """

    @staticmethod
    def forward(ctx, lam: Tensor, u: Tensor, h0: Tensor, compiled: bool = False) -> Tensor:  # noqa: ANN001
        """lam (H,), u (B, L, H), h0 (B, H) complex -> h (B, L, H) (eager: a view of a time-major buffer)."""
        ctx.compiled = compiled
        if compiled:
            h = recurrence_forward(compiled_recurrence(), lam, u, h0)  # (B, L, H)
            ctx.save_for_backward(lam, h, h0)
            return h
        u_time = u.transpose(0, 1).contiguous()  # (L, B, H): each step reads and writes one contiguous slab
        h = torch.empty_like(u_time)
        prev = h0
        for t in range(u_time.shape[0]):
            torch.mul(prev, lam, out=h[t])
            h[t].add_(u_time[t])
            prev = h[t]
        ctx.save_for_backward(lam, h, h0)
        return h.transpose(0, 1)

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: ANN001, ANN205 (autograd signature)
        """The adjoint recurrence, run backwards in time (see the class docstring)."""
        lam, h, h0 = ctx.saved_tensors  # h (L, B, H) eager, (B, L, H) compiled
        if ctx.compiled:
            grad_lam, grad_u, grad_h0 = recurrence_backward(compiled_recurrence(), lam, grad, h, h0)
            return (grad_lam if ctx.needs_input_grad[0] else None, grad_u,
                    grad_h0 if ctx.needs_input_grad[2] else None, None)
        lam_conj = lam.conj()
        g = grad.transpose(0, 1).contiguous()  # (L, B, H), accumulated in place from the end
        for t in range(g.shape[0] - 2, -1, -1):
            g[t].add_(g[t + 1] * lam_conj)
        grad_lam = grad_h0 = None
        if ctx.needs_input_grad[0]:
            grad_lam = (g[0] * h0.conj()).sum(dim=0) + (g[1:] * h[:-1].conj()).sum(dim=(0, 1))  # (H,)
        if ctx.needs_input_grad[2]:
            grad_h0 = g[0] * lam_conj
        return grad_lam, g.transpose(0, 1), grad_h0, None


def sequential_scan(log_lambda: Tensor, u: Tensor, h0: Tensor | None = None, compiled: bool = False) -> Tensor:
    """Exact step-by-step recurrence h_t = λ ⊙ h_{t-1} + u_t (h_{-1} = h0 or 0): u (B, L, H) -> (B, L, H).

    ``compiled``: run the steps in the C++ kernel where it is available (CPU tensors, kernels built and
    not turned off by SEQREC_KERNELS=0), else in the torch loop; both give the same values and gradients.
    """
    h0 = u.new_zeros(u.shape[0], u.shape[2]) if h0 is None else h0  # (B, H)
    # under a dispatch mode (FlopCounterMode counting MACs, fake tensors) the torch loop runs, so the mode
    # sees every operation; the kernel reads raw memory that such a mode neither sees nor provides
    compiled = (compiled and u.device.type == "cpu" and _get_current_dispatch_mode() is None
                and compiled_recurrence() is not None)
    return _LinearRecurrence.apply(torch.exp(log_lambda), u, h0, compiled)


class ComplexLinear(nn.Module):
    """z = W x + b with W = W_re + i·W_im, b = b_re + i·b_im, stored as real float parameters.

    ``forward`` takes a real input and returns the complex output; ``real_part`` takes a complex
    input and returns only Re(W h + b) = W_re·Re h − W_im·Im h + b_re (so ``imag_bias=False`` drops
    a parameter that would never receive a gradient).
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, imag_bias: bool = True
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_real = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_imag = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_real = nn.Parameter(torch.empty(out_features)) if bias else None
        self.bias_imag = nn.Parameter(torch.empty(out_features)) if bias and imag_bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated normal std 0.02 clipped at ±0.04 for every part (LRURec's init)."""
        for p in self.parameters():
            truncated_normal_(p)

    def forward(self, x: Tensor, scale: Tensor | None = None) -> Tensor:
        """Real x (..., in) -> complex s ⊙ (W x + b) (..., out), s a real per-output scale (default 1).

        The real and imaginary weight rows are interleaved so the real product's output, viewed as pairs,
        is the complex result without a copy (``torch.view_as_complex``); s is folded into the weights.
        """
        weight = torch.stack([self.weight_real, self.weight_imag], dim=1).float()  # (out, 2, in)
        bias = None
        if self.bias_real is not None:
            imag = self.bias_imag if self.bias_imag is not None else torch.zeros_like(self.bias_real)
            bias = torch.stack([self.bias_real, imag], dim=1).float()  # (out, 2)
        if scale is not None:
            weight = weight * scale.float()[:, None, None]
            bias = None if bias is None else bias * scale.float()[:, None]
        z = F.linear(x.float(), weight.reshape(2 * self.out_features, self.in_features),
                     None if bias is None else bias.reshape(-1))  # (..., 2·out) as (re, im) pairs
        return torch.view_as_complex(z.view(*z.shape[:-1], self.out_features, 2))  # (..., out)

    def real_part(self, h: Tensor) -> Tensor:
        """Complex h (..., in) -> Re(W h + b) (..., out) = W_re·Re h − W_im·Im h + b_re, real float32.

        Reads h through ``torch.view_as_real`` (its (re, im) pairs as 2·in real columns, no copy) against
        the interleaved columns (W_re, −W_im).
        """
        weight = torch.stack([self.weight_real, -self.weight_imag], dim=2).float()  # (out, in, 2)
        bias = None if self.bias_real is None else self.bias_real.float()
        pairs = torch.view_as_real(h.resolve_conj()).reshape(*h.shape[:-1], 2 * self.in_features)  # (..., 2·in)
        return F.linear(pairs, weight.reshape(self.out_features, 2 * self.in_features), bias)  # (..., out)


class LRULayer(nn.Module):
    """One linear recurrent unit with residual and LayerNorm.

    h_t = λ ⊙ h_{t-1} + γ ⊙ (B x_t + b_B)      (diagonal complex recurrence, h ∈ C^H)
    y_t = LayerNorm(Dropout(Re(C h_t + b_C)) + x_t)

    Ring initialisation (u1, u2 ~ U(0, 1)): |λ|² = u1 (r_max² − r_min²) + r_min²,
    ν_log = log(−½ log|λ|²), θ_log = log(2π u2), γ_log = log √(1 − |λ|²).
    """

    def __init__(
        self,
        d_model: int,
        state_multiplier: int = 2,
        dropout: float = 0.2,
        r_min: float = 0.8,
        r_max: float = 0.99,
        scan: str = "parallel",
        padding_drive: bool = False,
    ) -> None:
        super().__init__()
        if not 0.0 < r_min <= r_max < 1.0:
            raise ValueError(
                f"need 0 < r_min <= r_max < 1 for a stable ring init, got r_min={r_min}, r_max={r_max}"
            )
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
        self.d_model = d_model
        self.state_size = state_multiplier * d_model
        self.scan = scan
        self.padding_drive = padding_drive  # a padded position reads out its own drive (padding="official")
        width = self.state_size

        u1 = torch.rand(width)
        u2 = torch.rand(width).clamp_min(1e-12)  # θ_log = log(0) would be -inf
        radius_sq = u1 * (r_max**2 - r_min**2) + r_min**2  # |λ|² ∈ [r_min², r_max²]
        nu_log = torch.log(-0.5 * torch.log(radius_sq))
        theta_log = torch.log(2 * math.pi * u2)
        gamma_log = 0.5 * torch.log(1 - radius_sq)
        self.params_log = nn.Parameter(torch.stack([nu_log, theta_log, gamma_log]))  # (3, H)

        self.in_proj = ComplexLinear(d_model, width)  # B, b_B: d -> H
        self.out_proj = ComplexLinear(width, d_model, imag_bias=False)  # C, Re b_C: H -> d
        self.dropout = Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model)

    def coefficients(self) -> tuple[Tensor, Tensor]:
        """(log λ (H,) complex64, γ (H,) float32) from ``params_log``: log λ = −exp(ν_log) + i·exp(θ_log)."""
        nu, theta, gamma = torch.exp(self.params_log.float())  # (H,) each
        return torch.complex(-nu, theta), gamma

    def drive(self, x: Tensor, mask: Tensor, gamma: Tensor) -> tuple[Tensor, Tensor]:
        """(u, own): own_t = γ ⊙ (B x_t + b_B) at every position, u = own with 0 where mask is False (what the
        recurrence carries): x (..., d), mask (...) -> (..., H) complex64 each (one product for both).

        Only ``padding_drive`` reads ``own`` at padding; without it u is the product masked in place and ``own``
        is u itself (one (..., H) tensor instead of two: 26 MB per layer of a 128 × 200 batch)."""
        own = self.in_proj(x, scale=gamma)  # (..., H)
        if not self.padding_drive:
            u = own.masked_fill_(~mask.unsqueeze(-1), 0)
            return u, u
        return own.masked_fill(~mask.unsqueeze(-1), 0), own

    def read_states(self, h: Tensor, own: Tensor, mask: Tensor) -> Tensor:
        """The states the readout reads: h (..., H) itself, or with ``padding_drive`` the own drive ``own``
        (..., H) at padded positions (mask False). Carried states are never changed."""
        return torch.where(mask.unsqueeze(-1), h, own) if self.padding_drive else h

    def states(self, x: Tensor, mask: Tensor) -> Tensor:
        """The states read out at every position for x (B, L, d), mask (B, L) -> (B, L, H) complex64: the
        recurrent h_t at real events; at padding 0 (``padding_drive``: the position's own drive)."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            log_lambda, gamma = self.coefficients()
            u, own = self.drive(x.float(), mask, gamma)  # (B, L, H) each
            # "auto": the log-depth scan pays off on GPUs; on CPU its O(L log L) memory traffic makes it
            # 2-3x slower than the O(L) loop (benchmarks/lru_speed.py), so CPUs run the exact sequential
            # recurrence, compiled ("kernel") where the C++ extension builds
            cpu = u.device.type == "cpu"
            if self.scan == "parallel" or (self.scan == "auto" and not cpu):
                h = parallel_scan(log_lambda, u)
            else:
                h = sequential_scan(log_lambda, u, compiled=self.scan in ("kernel", "auto"))
            return self.read_states(h, own, mask)

    def final_state(self, x: Tensor, mask: Tensor) -> Tensor:
        """h_{L-1} = Σ_s λ^{L-1-s} u_s for x (B, L, d), mask (B, L) -> (B, H) complex64 (equals states()[:, -1])."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            log_lambda, gamma = self.coefficients()
            u, own = self.drive(x.float(), mask, gamma)  # (B, L, H) each
            length = u.shape[1]
            k = torch.arange(length - 1, -1, -1, device=u.device, dtype=torch.float64)  # L-1 .. 0
            decay = torch.exp(k[:, None] * log_lambda.to(torch.complex128)[None, :]).to(torch.complex64)  # (L, H)
            h = torch.einsum("blh,lh->bh", u, decay)  # (B, H)
            return self.read_states(h, own[:, -1], mask[:, -1])

    def readout(self, h: Tensor, x: Tensor) -> Tensor:
        """y = LayerNorm(Dropout(Re(C h + b_C)) + x): h (..., H), x (..., d) -> (..., d) float32."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            return self.layer_norm(self.dropout(self.out_proj.real_part(h)) + x.float())

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, L, d) real, mask (B, L) True at real events -> (B, L, d) float32."""
        return self.readout(self.states(x, mask), x)

    def step(self, h: Tensor, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """One event: h (B, H), x (B, d), mask (B,) -> (h', y (B, d)); h' = h where mask is False (y reads
        ``read_states``: with ``padding_drive`` a padding event reads its own drive, as ``forward`` does)."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            log_lambda, gamma = self.coefficients()
            u, own = self.drive(x.float(), mask, gamma)  # (B, H) each
            h_next = torch.where(mask.unsqueeze(-1), torch.exp(log_lambda) * h + u, h)  # (B, H)
            return h_next, self.readout(self.read_states(h_next, own, mask), x)


class PositionwiseFeedForward(FeedForward):
    """PFFN(x) = LayerNorm(x + Dropout(W2 Dropout(GELU(W1 x)))), W1: d -> 4d, W2: 4d -> d (post-norm residual).

    The shared ``seqrec.models.layers.FeedForward`` with LRURec's residual and LayerNorm around it.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.2) -> None:
        super().__init__(d_model, 4 * d_model if d_ff is None else d_ff, dropout, activation="gelu")
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        """x (..., d) -> (..., d)."""
        return self.layer_norm(x + self.dropout(super().forward(x)))  # (..., 4d) inside


class LRUBlock(nn.Module):
    """LRULayer followed by PFFN (one of LRURec's ``num_layers`` blocks)."""

    def __init__(
        self,
        d_model: int,
        dropout: float,
        lru_dropout: float,
        state_multiplier: int,
        r_min: float,
        r_max: float,
        scan: str,
        padding_drive: bool = False,
    ) -> None:
        super().__init__()
        self.lru_layer = LRULayer(d_model, state_multiplier, lru_dropout, r_min, r_max, scan, padding_drive)
        self.feed_forward = PositionwiseFeedForward(d_model, 4 * d_model, dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, L, d), mask (B, L) -> (B, L, d)."""
        return self.feed_forward(self.lru_layer(x, mask))


class LRURec(SequenceRecommender):
    """LRURec: Embedding -> LayerNorm(Dropout(E)) -> num_layers × [LRULayer -> PFFN]; tied scoring.

    scores = h Eᵀ + b over ids 0..num_items (``score`` of the base class). ``scan`` picks the
    training-time evaluation of the recurrence ("parallel" log-depth scan, exact "sequential" torch loop,
    the same loop compiled as "kernel", or "auto": parallel on accelerators, kernel on CPU, where the
    step-by-step loop measured faster);
    ``init_state`` / ``step`` run the same model one event at a time with O(1) state per user.
    ``lru_dropout`` (default: ``dropout``) is the dropout inside the LRU layers, the official
    ``bert_attn_dropout``; ``dropout`` is used for the embedding and the PFFN (``bert_dropout``).
    ``padding`` is what a padded position computes (the module docstring): "clean" (zero state, E[0] frozen
    by ``padding_idx``; the default) or "official" (its own drive, E[0] trained, as the official code). Real
    positions, and so evaluation, are the same under both; only training on labels at padded inputs differs.
    """

    left_padding_invariant = True  # padding never carries state and no position is counted

    def __init__(
        self,
        num_items: int,
        d_model: int = 64,
        num_layers: int = 2,
        dropout: float = 0.2,
        state_multiplier: int = 2,
        r_min: float = 0.8,
        r_max: float = 0.99,
        scan: str = "parallel",
        lru_dropout: float | None = None,
        padding: str = "clean",
    ) -> None:
        super().__init__()
        if num_items < 1:
            raise ValueError(f"num_items must be >= 1 (ids 1..num_items, 0 = padding), got {num_items}")
        if padding not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
        self.num_items = num_items
        self.d_model = d_model
        self.padding = padding
        lru_dropout = dropout if lru_dropout is None else lru_dropout
        official = padding == "official"
        # "official": no padding_idx, so E[0] is trained (the official LRUEmbedding has none)
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=None if official else 0)
        self.embedding_dropout = Dropout(dropout)
        self.embedding_layer_norm = nn.LayerNorm(d_model)
        self.blocks = nn.ModuleList(
            LRUBlock(d_model, dropout, lru_dropout, state_multiplier, r_min, r_max, scan, padding_drive=official)
            for _ in range(num_layers)
        )
        self.output_bias = nn.Parameter(torch.zeros(num_items + 1))  # (N+1,)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated normal (std 0.02, ±0.04) for every parameter except LayerNorms and ``params_log``.

        As in the official code this includes all biases, the output bias and embedding row 0.
        """
        for name, p in self.named_parameters():
            if "layer_norm" not in name and "params_log" not in name:
                truncated_normal_(p)

    @property
    def lru_layers(self) -> list[LRULayer]:
        """The LRU layers, oldest block first."""
        return [block.lru_layer for block in self.blocks]

    def set_scan(self, scan: str) -> None:
        """Switch every LRU layer to the "parallel", "sequential", "kernel" or "auto" scan."""
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
        for layer in self.lru_layers:
            layer.scan = scan

    def embed(self, items: Tensor) -> Tensor:
        """items (...) -> LayerNorm(Dropout(E[items])) (..., d)."""
        return self.embedding_layer_norm(self.embedding_dropout(self.item_embedding(items)))

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded ids -> hidden (B, L, d)."""
        mask = items > 0  # (B, L)
        x = self.embed(items)  # (B, L, d)
        for block in self.blocks:
            x = block(x, mask)
        return x

    def last_hidden(self, items: Tensor) -> Tensor:
        """forward(items)[:, -1] with the last block at the newest position only: (B, L) -> (B, d).

        The last LRU layer needs only its final state h_{L-1} = Σ_s λ^{L-1-s} u_s (one weighted sum, no
        scan), and its readout and PFFN only that position.
        """
        mask = items > 0  # (B, L)
        x = self.embed(items)  # (B, L, d)
        for block in self.blocks[:-1]:
            x = block(x, mask)
        last = self.blocks[-1]
        h = last.lru_layer.final_state(x, mask)  # (B, H)
        return last.feed_forward(last.lru_layer.readout(h, x[:, -1]))  # (B, d)

    def item_embeddings(self) -> Tensor:
        """(num_items + 1, d) tied item table."""
        return self.item_embedding.weight

    def item_bias(self) -> Tensor:
        """(num_items + 1,) score bias."""
        return self.output_bias

    # ---- recurrent inference: O(1) state and work per event -------------------------------------

    def init_state(self, batch_size: int) -> LRUState:
        """Empty state for ``batch_size`` users: one zero complex64 (B, H) tensor per layer."""
        device = self.output_bias.device
        return tuple(
            torch.zeros(batch_size, layer.state_size, dtype=torch.complex64, device=device)
            for layer in self.lru_layers
        )

    def step(self, state: LRUState, item: Tensor) -> tuple[LRUState, Tensor]:
        """Feed one event per user: item (B,) -> (new state, hidden (B, d)).

        Item 0 (padding) leaves the state unchanged. Feeding a left-padded history event by event
        from ``init_state`` gives the same hidden as ``forward(items)[:, -1]`` (in eval mode).
        """
        mask = item > 0  # (B,)
        x = self.embed(item)  # (B, d)
        new_state = []
        for block, h in zip(self.blocks, state, strict=True):
            h, x = block.lru_layer.step(h, x, mask)  # (B, H), (B, d)
            x = block.feed_forward(x)
            new_state.append(h)
        return tuple(new_state), x

    def prefill(self, items: Tensor) -> tuple[LRUState, Tensor]:
        """Run a left-padded history (B, L) in parallel -> (state after position L-1, hidden (B, L, d))."""
        mask = items > 0  # (B, L)
        x = self.embed(items)  # (B, L, d)
        state = []
        for block in self.blocks:
            h = block.lru_layer.states(x, mask)  # (B, L, H)
            x = block.feed_forward(block.lru_layer.readout(h, x))
            state.append(h[:, -1].masked_fill(~mask[:, -1:], 0))  # an all-padding row carries the empty state
        return tuple(state), x

    def state_bytes(self, batch_size: int = 1, seq_len: int | None = None) -> int:
        """Bytes of stored recurrent state: batch · Σ_layers H · 8 (complex64), whatever the history length seq_len."""
        item_size = torch.empty((), dtype=torch.complex64).element_size()
        return batch_size * sum(layer.state_size for layer in self.lru_layers) * item_size
