"""The compiled diagonal linear recurrence h_t = λ ⊙ h_{t-1} + u_t (``linear_recurrence.cpp``) on complex tensors.

Forward:  h_t = λ ⊙ h_{t-1} + u_t over dim 1, h_{-1} = h0.
Backward (torch's conjugate-Wirtinger convention, G_t = ∂ℓ/∂h_t*):
    g_t = G_t + conj(λ) ⊙ g_{t+1} (g_L = 0),   ∂ℓ/∂u_t* = g_t,
    ∂ℓ/∂λ* = Σ_{b,t} g_t ⊙ conj(h_{t-1}),      ∂ℓ/∂h0* = conj(λ) ⊙ g_0.
Both run as one loop over (batch × state lanes) with all L steps inside (OpenMP across the tasks); the
autograd node that calls them is ``seqrec.models.next_item.lru._LinearRecurrence``.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import Tensor

from seqrec.models.kernels.build import load_kernel


def compiled_recurrence() -> ModuleType | None:
    """The built extension (built at first call), or None where kernels are off or cannot be built."""
    return load_kernel("linear_recurrence")


def _real(z: Tensor) -> Tensor:
    """Complex z (...) -> its contiguous real view (..., 2), conjugate and negative bits resolved."""
    return torch.view_as_real(z.resolve_conj().resolve_neg().contiguous())


def recurrence_forward(kernel: ModuleType, lam: Tensor, u: Tensor, h0: Tensor) -> Tensor:
    """lam (H,), u (B, L, H), h0 (B, H) complex on CPU -> h (B, L, H) complex, contiguous."""
    return torch.view_as_complex(kernel.forward(_real(lam), _real(u), _real(h0)))


def recurrence_backward(
    kernel: ModuleType, lam: Tensor, grad: Tensor, h: Tensor, h0: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The adjoint: (∂ℓ/∂λ* (H,), ∂ℓ/∂u* (B, L, H), ∂ℓ/∂h0* (B, H)) from grad = ∂ℓ/∂h* (B, L, H)."""
    grad_u, grad_lam_rows, grad_h0 = kernel.backward(_real(lam), _real(grad), _real(h), _real(h0))
    # per-row sums added over the batch here, in a fixed order: the same result at any thread count
    return (torch.view_as_complex(grad_lam_rows.sum(dim=0)), torch.view_as_complex(grad_u),
            torch.view_as_complex(grad_h0))
