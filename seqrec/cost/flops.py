"""Multiply-accumulate (MAC) counts of any torch computation: fvcore's FlopCountAnalysis or torch's FlopCounterMode.

Convention (the same for both backends, so that they agree to the MAC):

- 1 MAC = one multiply followed by one add. Counted: matrix products (``linear``, ``matmul``, ``mm``,
  ``bmm``, ``addmm``, ``baddbmm``, ``mv``, ``dot``, ``einsum``, convolutions), attention (QKᵀ and AV of
  every head, dense over the mask: L·S·(d_qk + d_v) per batch-head), the gate matrix products of
  RNN/GRU/LSTM layers (input and recurrent: tokens · Σ weight-matrix sizes), and elementwise
  complex × complex products (the λ ⊙ h recurrence of LRU-style models).
- Complex operands count in real MACs: complex × complex = 4 real MACs, complex × real = 2.
- Real FFTs (``torch.fft.rfft``/``irfft``, FMLP-Rec's filter): ``fft_macs(n)`` = round(1.25·n·log₂ n) per
  transformed line of length n (FFTW's 2.5·n·log₂ n FLOP convention for a real transform; neither library
  counts FFTs at all).
- Not counted (neither library counts them): elementwise real ops, real scalings, activations,
  softmax, normalisation, embedding lookups, gathers, reductions. fvcore's norm/upsample/pool handlers
  are switched off to match.

What each library misses and the handlers below add:

- fvcore (a jit trace of the call): ``aten::scaled_dot_product_attention``, the MultiheadAttention fast
  path ``aten::_native_multi_head_attention``, ``aten::gru/lstm/rnn_tanh/rnn_relu`` (and their
  ``*_cell``), ``aten::baddbmm``, ``aten::mv``, ``aten::dot``, complex dtypes everywhere.
- FlopCounterMode (torch dispatch): the CPU flash-attention kernel
  ``aten._scaled_dot_product_flash_attention_for_cpu`` (no formula registered: counts zero), the
  MultiheadAttention fast path (taken under ``no_grad`` in eval mode: counts zero), the mkldnn / cudnn /
  miopen RNN kernels, complex dtypes in mm/bmm/addmm/baddbmm, complex mul. FlopCounterMode counts
  FLOPs = 2 × MACs; the totals here are divided by 2.

fvcore traces with ``torch.jit`` (sizes become traced values): a model that does Python arithmetic on
``tensor.shape`` entries (``n.bit_length()``) cannot be traced; ``count_macs(..., backend="fvcore")``
then raises ``MACsTraceError`` and callers may fall back to FlopCounterMode.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from seqrec.models.layers import fft_macs

Backend = Literal["fvcore", "flop_counter"]
BACKENDS: tuple[str, ...] = ("fvcore", "flop_counter")

# Operators that may hide multiply-accumulates: one that no handler counts is reported in
# ``MACCount.skipped`` so that a new model's uncounted work is visible instead of silently zero.
_SUSPECT_NAMES = {"mm", "bmm", "addmm", "baddbmm", "matmul", "mv", "addmv", "dot", "vdot", "einsum", "linear",
                  "addr", "tensordot", "bilinear", "_scaled_mm"}
_SUSPECT_PARTS = re.compile(r"convolution|conv[123]d|conv_|attention|rnn|lstm|gru")


def is_suspect(operator: str) -> bool:
    """True for an operator name (``aten::bmm``, ``aten.bmm.default``) that may do multiply-accumulates."""
    name = re.split(r"::|\.", str(operator))[1] if re.search(r"::|\.", str(operator)) else str(operator)
    if name.startswith("_thnn_fused"):  # fused RNN cells: their matrix products are separate mm calls
        return False
    return name in _SUSPECT_NAMES or bool(_SUSPECT_PARTS.search(name))


@dataclass
class MACCount:
    """Total MACs of one call, per operator, and the suspect operators no handler counted."""

    total: int
    by_operator: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    backend: str = ""


class MACsTraceError(RuntimeError):
    """fvcore could not trace the computation (torch.jit tracing failed)."""


# ---------------------------------------------------------------------------------------------------
# shared formulas (shapes in, MACs out)
# ---------------------------------------------------------------------------------------------------


def attention_macs(q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int]) -> int:
    """softmax(Q Kᵀ) V for q (..., L, d_qk), k (..., S, d_qk), v (..., S, d_v): (#queries)·S·(d_qk + d_v)."""
    queries = math.prod(q_shape[:-1])
    return queries * k_shape[-2] * (q_shape[-1] + v_shape[-1])


def mha_macs(q_shape: Sequence[int], k_shape: Sequence[int], embed_dim: int) -> int:
    """nn.MultiheadAttention: projections of q, k, v and output (E² per token) plus attention (2·L·S·E)."""
    e = embed_dim
    q_tokens = math.prod(q_shape[:-1])
    k_tokens = math.prod(k_shape[:-1])
    keys_per_query = k_shape[-2] if len(k_shape) >= 2 else k_tokens
    return 2 * q_tokens * e * e + 2 * k_tokens * e * e + 2 * q_tokens * keys_per_query * e


def real_fft_macs(real_shape: Sequence[int], dims: Sequence[int]) -> int:
    """A real FFT (or its inverse) of a real signal shaped ``real_shape`` over ``dims``: per transformed dim of
    size n, (numel / n) lines of ``fft_macs(n)`` each (a multi-dimensional FFT is one 1-D pass per dim)."""
    numel = math.prod(real_shape)
    total = 0
    for dim in dims:
        n = real_shape[dim]
        total += (numel // n) * fft_macs(n) if n else 0
    return total


def rnn_macs(input_shape: Sequence[int], weight_shapes: Sequence[Sequence[int]]) -> int:
    """RNN/GRU/LSTM gate products: tokens · Σ (sizes of the 2-D weight matrices); biases and gates' elementwise ops free.

    tokens = time × batch of the input (``numel / features``); every layer and direction runs over all
    tokens, and the weight list holds every layer's and direction's W_ih, W_hh (and W_hr).
    """
    tokens = math.prod(input_shape) // input_shape[-1]
    return tokens * sum(math.prod(s) for s in weight_shapes if len(s) == 2)


# ---------------------------------------------------------------------------------------------------
# fvcore handlers: (inputs: list[torch._C.Value], outputs: list[torch._C.Value]) -> MACs
# ---------------------------------------------------------------------------------------------------

_COMPLEX_SCALARS = {"ComplexFloat", "ComplexDouble", "ComplexHalf"}


def _jit_shape(value: Any) -> list[int] | None:
    from fvcore.nn.jit_handles import get_shape

    return get_shape(value)


def _jit_is_complex(value: Any) -> bool:
    kind = value.type()
    return isinstance(kind, torch._C.TensorType) and kind.scalarType() in _COMPLEX_SCALARS


def _jit_is_tensor(value: Any) -> bool:
    return isinstance(value.type(), torch._C.TensorType)


def _complex_factor(a_complex: bool, b_complex: bool) -> int:
    """Real MACs per product: 4 for complex × complex, 2 for complex × real, 1 for real × real."""
    return 4 if a_complex and b_complex else 2 if a_complex or b_complex else 1


def _jit_product(a_index: int, b_index: int) -> Callable[[list, list], int]:
    """Handler for any matrix product whose output element is a dot over a's last dim."""

    def handle(inputs: list, outputs: list) -> int:
        a, b = inputs[a_index], inputs[b_index]
        a_shape, out_shape = _jit_shape(a), _jit_shape(outputs[0])
        out_numel = math.prod(out_shape) if out_shape else 1
        return out_numel * a_shape[-1] * _complex_factor(_jit_is_complex(a), _jit_is_complex(b))

    return handle


def _jit_einsum(inputs: list, outputs: list) -> int:
    """Two operands: the product of every index size (the naive contraction, as bmm computes it)."""
    operands = list(inputs[1].node().inputs())
    if len(operands) != 2:
        from fvcore.nn.jit_handles import einsum_flop_jit

        return int(einsum_flop_jit(inputs, outputs))
    equation = inputs[0].toIValue().replace(" ", "").split("->")[0]
    sizes: dict[str, int] = {}
    for term, value in zip(equation.split(","), operands):
        for letter, size in zip(term.replace("...", ""), _jit_shape(value)[-len(term.replace("...", "")) :]):
            sizes[letter] = size
    macs = math.prod(sizes.values())
    if "..." in equation:  # broadcast batch dims: count them through the output size
        shape = _jit_shape(outputs[0])
        out_letters = inputs[0].toIValue().replace(" ", "").split("->")[1].replace("...", "")
        explicit = math.prod(sizes[c] for c in out_letters) if out_letters else 1
        macs *= math.prod(shape) // max(explicit, 1)
    return macs * _complex_factor(*(_jit_is_complex(v) for v in operands))


def _jit_sdpa(inputs: list, outputs: list) -> int:
    return attention_macs(_jit_shape(inputs[0]), _jit_shape(inputs[1]), _jit_shape(inputs[2]))


def _jit_mha(inputs: list, outputs: list) -> int:
    q_shape, k_shape = _jit_shape(inputs[0]), _jit_shape(inputs[1])
    return mha_macs(q_shape, k_shape, q_shape[-1])


def _jit_rnn(inputs: list, outputs: list) -> int:
    """aten::gru/lstm/rnn_* (.input and .data): the weights are the 2-D tensors of the list arguments."""
    weights = []
    for value in inputs[1:]:
        node = value.node()
        if node.kind() == "prim::ListConstruct":
            weights += [_jit_shape(v) for v in node.inputs() if _jit_is_tensor(v)]
    return rnn_macs(_jit_shape(inputs[0]), [s for s in weights if s is not None])


def _jit_rnn_cell(inputs: list, outputs: list) -> int:
    """aten::gru_cell/lstm_cell/rnn_*_cell(input, hx, w_ih, w_hh, b_ih, b_hh)."""
    shapes = [_jit_shape(v) for v in inputs[2:] if _jit_is_tensor(v)]
    return rnn_macs(_jit_shape(inputs[0]), [s for s in shapes if s is not None])


def _jit_complex_mul(inputs: list, outputs: list) -> int:
    """Elementwise product: 4 real MACs per element when both operands are complex, else not a MAC."""
    if len(inputs) >= 2 and _jit_is_complex(inputs[0]) and _jit_is_complex(inputs[1]):
        return 4 * math.prod(_jit_shape(outputs[0]) or [1])
    return 0


def _jit_dims(value: Any, rank: int) -> list[int]:
    """A traced ``dim`` argument (an int, a list of ints, or None for the last) as non-negative dims."""
    dims = value.toIValue()
    dims = [-1] if dims is None else [dims] if isinstance(dims, int) else list(dims)
    return [d % rank for d in dims]


def _jit_rfft(inputs: list, outputs: list) -> int:
    """aten::fft_rfft(self, n, dim, norm): the real input's lines along dim."""
    shape = _jit_shape(inputs[0]) or []
    return real_fft_macs(shape, _jit_dims(inputs[2], len(shape)))


def _jit_irfft(inputs: list, outputs: list) -> int:
    """aten::fft_irfft(self, n, dim, norm): the real output's lines along dim."""
    shape = _jit_shape(outputs[0]) or []
    return real_fft_macs(shape, _jit_dims(inputs[2], len(shape)))


def _not_a_mac(inputs: list, outputs: list) -> int:
    return 0


def _jit_linear_recurrence(inputs: list, outputs: list) -> int:
    """``LRURec``'s recurrence h_t = λ ⊙ h_{t-1} + u_t, traced as one Python op: one complex product
    (4 real MACs) per element of u (B, L, H)."""
    return 4 * math.prod(_jit_shape(inputs[1]) or [0])


FVCORE_HANDLES: dict[str, Callable[[list, list], int]] = {
    "aten::linear": _jit_product(0, 1),
    "aten::matmul": _jit_product(0, 1),
    "aten::mm": _jit_product(0, 1),
    "aten::bmm": _jit_product(0, 1),
    "aten::mv": _jit_product(0, 1),
    "aten::dot": _jit_product(0, 1),
    "aten::vdot": _jit_product(0, 1),
    "aten::addmm": _jit_product(1, 2),
    "aten::baddbmm": _jit_product(1, 2),
    "aten::addmv": _jit_product(1, 2),
    "aten::einsum": _jit_einsum,
    "aten::scaled_dot_product_attention": _jit_sdpa,
    "aten::_native_multi_head_attention": _jit_mha,
    "aten::gru": _jit_rnn,
    "aten::lstm": _jit_rnn,
    "aten::rnn_tanh": _jit_rnn,
    "aten::rnn_relu": _jit_rnn,
    "aten::gru_cell": _jit_rnn_cell,
    "aten::lstm_cell": _jit_rnn_cell,
    "aten::rnn_tanh_cell": _jit_rnn_cell,
    "aten::rnn_relu_cell": _jit_rnn_cell,
    "aten::mul": _jit_complex_mul,
    "aten::mul_": _jit_complex_mul,
    "aten::fft_rfft": _jit_rfft,
    "aten::fft_irfft": _jit_irfft,
    # custom autograd Functions reach a trace as one node named after the class (fvcore cannot see inside)
    "prim::PythonOp._LinearRecurrence": _jit_linear_recurrence,
}
# fvcore defaults that are not MACs (FlopCounterMode does not count them either): counted as zero. (A
# ``None`` handle would only mark them ignored; fvcore still calls the default handle it already has.)
for _name in ("batch_norm", "group_norm", "layer_norm", "instance_norm", "upsample_nearest2d",
              "upsample_bilinear2d", "adaptive_avg_pool2d", "grid_sampler"):
    FVCORE_HANDLES[f"aten::{_name}"] = _not_a_mac


class _Call(nn.Module):
    """Wraps ``fn(*tensors)`` as a module for fvcore (``owner`` registered so its scopes are named)."""

    def __init__(self, fn: Callable[..., Any], owner: nn.Module | None) -> None:
        super().__init__()
        self.fn = fn
        self.owner = owner

    def forward(self, *tensors: Tensor) -> Any:
        return self.fn(*tensors)


def macs_fvcore(fn: Callable[..., Any], inputs: tuple[Tensor, ...], owner: nn.Module | None = None) -> MACCount:
    """MACs of ``fn(*inputs)`` by fvcore's FlopCountAnalysis with the handlers above."""
    from fvcore.nn import FlopCountAnalysis

    analysis = FlopCountAnalysis(_Call(fn, owner), inputs)
    for name, handle in FVCORE_HANDLES.items():
        analysis.set_op_handle(name, handle)
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            total = int(analysis.total())
        except Exception as error:  # noqa: BLE001 (any tracing failure: report it as one kind)
            raise MACsTraceError(
                f"fvcore could not trace the computation with torch.jit ({type(error).__name__}: {error}). "
                "Use backend='flop_counter', or make the model traceable (no Python arithmetic on tensor.shape)."
            ) from error
        by_operator = {str(k): int(v) for k, v in analysis.by_operator().items() if v}
        skipped = {str(k): int(v) for k, v in analysis.unsupported_ops().items() if is_suspect(str(k))}
    return MACCount(total, by_operator, skipped, "fvcore")


# ---------------------------------------------------------------------------------------------------
# FlopCounterMode formulas (raw tensors in, FLOPs = 2 × MACs out)
# ---------------------------------------------------------------------------------------------------


def _raw(formula: Callable[..., int]) -> Callable[..., int]:
    formula._get_raw = True  # type: ignore[attr-defined]  (FlopCounterMode passes tensors, not shapes)
    return formula


def _is_complex(x: Any) -> bool:
    return isinstance(x, Tensor) and x.is_complex()


def _product_flops(a_index: int, b_index: int) -> Callable[..., int]:
    def formula(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        a, b = args[a_index], args[b_index]
        out = out_val[0] if isinstance(out_val, (tuple, list)) else out_val
        return 2 * out.numel() * a.shape[-1] * _complex_factor(_is_complex(a), _is_complex(b))

    return _raw(formula)


@_raw
def _sdpa_flops(query: Tensor, key: Tensor, value: Tensor, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    return 2 * attention_macs(query.shape, key.shape, value.shape)


@_raw
def _sdpa_backward_flops(
    grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, *args: Any, out_val: Any = None, **kwargs: Any
) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


@_raw
def _mha_flops(query: Tensor, key: Tensor, value: Tensor, embed_dim: int, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    return 2 * mha_macs(query.shape, key.shape, embed_dim)


@_raw
def _mkldnn_rnn_flops(input: Tensor, weight0: Tensor, weight1: Tensor, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    return 2 * rnn_macs(input.shape, [weight0.shape, weight1.shape])


@_raw
def _rnn_list_flops(input: Tensor, weights: list[Tensor], *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """_cudnn_rnn / miopen_rnn(input, weight list, ...)."""
    return 2 * rnn_macs(input.shape, [w.shape for w in weights])


@_raw
def _complex_mul_flops(a: Any, b: Any = None, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    if _is_complex(a) and _is_complex(b):
        return 2 * 4 * out_val.numel()
    return 0


@_raw
def _fft_r2c_flops(x: Tensor, dim: Sequence[int], *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """aten._fft_r2c(self, dim, normalization, onesided): the real input's lines."""
    return 2 * real_fft_macs(x.shape, [d % x.dim() for d in dim])


@_raw
def _fft_c2r_flops(x: Tensor, dim: Sequence[int], *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """aten._fft_c2r(self, dim, normalization, last_dim_size): the real output's lines."""
    return 2 * real_fft_macs(out_val.shape, [d % out_val.dim() for d in dim])


def flop_counter_mapping() -> dict[Any, Callable[..., int]]:
    """custom_mapping for FlopCounterMode: complex-aware products and the kernels it has no formula for."""
    aten = torch.ops.aten
    mapping: dict[Any, Callable[..., int]] = {
        aten.mm: _product_flops(0, 1),
        aten.bmm: _product_flops(0, 1),
        aten.mv: _product_flops(0, 1),
        aten.dot: _product_flops(0, 1),
        aten.vdot: _product_flops(0, 1),
        aten.addmm: _product_flops(1, 2),
        aten.addmm_: _product_flops(1, 2),  # in-place accumulation (the fused loss's weight gradient)
        aten.baddbmm: _product_flops(1, 2),
        aten.addmv: _product_flops(1, 2),
        aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_flops,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward_flops,
        aten._native_multi_head_attention: _mha_flops,
        aten.mkldnn_rnn_layer: _mkldnn_rnn_flops,
        aten._cudnn_rnn: _rnn_list_flops,
        aten.miopen_rnn: _rnn_list_flops,
        aten.mul: _complex_mul_flops,
        aten.mul_: _complex_mul_flops,
        aten._fft_r2c: _fft_r2c_flops,
        aten._fft_c2r: _fft_c2r_flops,
    }
    fused = getattr(aten, "_scaled_dot_product_fused_attention_overrideable", None)
    if fused is not None:
        mapping[fused] = _sdpa_flops
    return mapping


class _OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts calls of suspect operators (``is_suspect``) during which nothing was counted.

    A composite operator that reaches the mode whole (``aten.linear`` under autocast) and then runs as
    counted ``mm``/``addmm`` calls is not reported: the counter's total grew while it ran.
    """

    def __init__(self, counter: Any) -> None:
        super().__init__()
        self.counter = counter
        self.skipped: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (dispatch protocol)
        packet = func.overloadpacket
        before = self.counter.get_total_flops()
        out = func(*args, **(kwargs or {}))
        if is_suspect(str(packet)) and self.counter.get_total_flops() == before:
            counted_zero = packet in self.counter.flop_registry  # a formula that legitimately returned 0
            if not counted_zero:
                self.skipped[str(packet)] += 1
        return out


def macs_flop_counter(fn: Callable[..., Any], inputs: tuple[Tensor, ...], backward: bool = False) -> MACCount:
    """MACs of ``fn(*inputs)`` (and of its backward when ``backward``) by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=flop_counter_mapping())
    recorder = _OpRecorder(counter)
    with counter, recorder:
        out = fn(*inputs)
        if backward:
            out.sum().backward()
    by_operator = {str(k): int(v) // 2 for k, v in counter.get_flop_counts().get("Global", {}).items() if v}
    return MACCount(counter.get_total_flops() // 2, by_operator, dict(recorder.skipped), "flop_counter")


def count_macs(
    fn: Callable[..., Any],
    inputs: tuple[Tensor, ...],
    backend: Backend = "fvcore",
    owner: nn.Module | None = None,
) -> MACCount:
    """MACs of ``fn(*inputs)`` by ``backend`` ("fvcore" or "flop_counter"); see the module docstring."""
    if backend == "fvcore":
        return macs_fvcore(fn, inputs, owner)
    if backend == "flop_counter":
        return macs_flop_counter(fn, inputs)
    raise ValueError(f"unknown MACs backend {backend!r}: use one of {BACKENDS}")


def fvcore_available() -> bool:
    """True when fvcore can be imported (the ``cost`` extra)."""
    try:
        import fvcore.nn  # noqa: F401
    except ImportError:
        return False
    return True
