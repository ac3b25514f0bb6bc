"""The compiled CPU dropout (``dropout.cpp``): a Philox4x32-10 mask drawn, compared and applied in one pass.

keep_e = u_e ≥ t with u_e a 16-bit uniform of Philox(seed, position of e) and t = round(p · 2¹⁶), so the
realised rate is p' = t / 2¹⁶ and kept values are scaled by 1 / (1 − p'). The seed is drawn from torch's
default CPU generator at each call (``draw_seed``): a seeded run repeats its masks, and the generator state
that checkpoints save covers them. The eager path (``seqrec.models.layers.keep_mask``) draws a different but
identically distributed mask from torch's generator; ``SEQREC_KERNELS=0`` selects it.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import Tensor
from torch.utils._python_dispatch import _get_current_dispatch_mode

from seqrec.models.kernels.build import load_kernel

LEVELS = 65536  # 16-bit uniforms: p is realised to within 1/131072


def compiled_dropout() -> ModuleType | None:
    """The built extension (built at first call), or None where kernels are off or cannot be built."""
    return load_kernel("dropout")


def usable_for(device: torch.device, dtype: torch.dtype | None = None) -> ModuleType | None:
    """The kernel where it may run: a CPU float32/float64 tensor (or a mask only, ``dtype`` None), outside a
    dispatch mode (MACs counting, fake tensors) and a jit trace, which see only torch operations; else None."""
    if device.type != "cpu" or (dtype is not None and dtype not in (torch.float32, torch.float64)):
        return None
    if _get_current_dispatch_mode() is not None or torch.jit.is_tracing():
        return None
    return compiled_dropout()


def threshold_and_scale(p: float) -> tuple[int, float]:
    """(t, 1/(1 − p')) for dropout rate p: t = round(p · 2¹⁶), p' = t / 2¹⁶."""
    threshold = round(p * LEVELS)
    return threshold, LEVELS / (LEVELS - threshold)


def draw_seed() -> int:
    """A 63-bit Philox key from torch's default CPU generator (so ``torch.manual_seed`` repeats the masks)."""
    return int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))


def kernel_mask(kernel: ModuleType, shape: tuple[int, ...], p: float) -> tuple[Tensor, float]:
    """(keep (shape) bool, scale) for rate p, from a fresh seed."""
    threshold, scale = threshold_and_scale(p)
    return kernel.mask(list(shape), threshold, draw_seed()), scale


def kernel_forward(kernel: ModuleType, x: Tensor, p: float) -> tuple[Tensor, Tensor, float]:
    """(x · keep · scale, keep, scale) for a contiguous CPU float tensor x, from a fresh seed."""
    threshold, scale = threshold_and_scale(p)
    y, keep = kernel.forward(x, threshold, scale, draw_seed())
    return y, keep, scale


def kernel_apply(kernel: ModuleType, grad: Tensor, keep: Tensor, scale: float) -> Tensor:
    """grad · keep · scale in one pass (grad made contiguous)."""
    return kernel.apply(grad.contiguous(), keep, scale)
