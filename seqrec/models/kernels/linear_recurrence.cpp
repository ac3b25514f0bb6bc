// LRURec's diagonal complex recurrence h_t = λ ⊙ h_{t-1} + u_t and its adjoint, as one compiled loop.
//
// Why this file exists: the recurrence is L (200 to 1,000) strictly sequential steps. Written as torch
// calls, every step is a few small ops on a (B, H) slab (a complex multiply and an add forward, the same
// backward), so the time goes to per-call dispatch and to reading and writing each slab in separate passes,
// not to arithmetic. Here each (batch row, block of state lanes) runs all L steps in registers: one pass
// over u forward, one over the incoming gradient and h backward. The log-depth parallel scan stays the
// GPU path (seqrec/models/next_item/lru.py).
//
// Layout: complex tensors are read through their real view, (re, im) pairs interleaved, contiguous:
// u, h, grad (B, L, H, 2), λ (H, 2), h0 (B, H, 2). The inner loops run over a block of lanes with unit
// stride, so the compiler vectorises them (AVX2 or AVX-512, whichever -march=native gives; the build's
// cache key holds the CPU flags). Work is split over (batch × lane blocks) by at::parallel_for (OpenMP),
// which follows torch.set_num_threads.
//
// Forward:  h_t = λ h_{t-1} + u_t,   h_{-1} = h0.
// Backward (torch's conjugate-Wirtinger convention, G_t = ∂ℓ/∂h_t* the incoming gradient):
//   g_t = G_t + conj(λ) g_{t+1}   (g_L = 0),   ∂ℓ/∂u_t* = g_t,
//   ∂ℓ/∂λ* = Σ_b Σ_t g_t conj(h_{t-1})  (returned per batch row, summed over b by the caller),
//   ∂ℓ/∂h0* = conj(λ) g_0.

// Only the headers it needs (not <torch/extension.h>, which includes all of libtorch's API and more than
// triples the first-use build time).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>

namespace {

constexpr int64_t kLanes = 64;  // complex state lanes per task: 2 × 64 reals of state stay in registers/L1

int64_t grain(int64_t length) {
  // tasks per thread chunk: at least ~32k complex updates, so small inputs run on one thread
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, length * kLanes));
}

template <typename T>
void forward_block(const T* __restrict lam, const T* __restrict u, const T* __restrict h0, T* __restrict h,
                   int64_t length, int64_t width, int64_t n) {
  // lam, h0 point at lane `start` (stride 2 reals per lane); u, h at (b, 0, start)
  T lr[kLanes], li[kLanes], sr[kLanes], si[kLanes];
  for (int64_t k = 0; k < n; ++k) {
    lr[k] = lam[2 * k];
    li[k] = lam[2 * k + 1];
    sr[k] = h0[2 * k];
    si[k] = h0[2 * k + 1];
  }
  for (int64_t t = 0; t < length; ++t) {
    const T* __restrict ut = u + 2 * t * width;
    T* __restrict ht = h + 2 * t * width;
    for (int64_t k = 0; k < n; ++k) {
      const T re = lr[k] * sr[k] - li[k] * si[k] + ut[2 * k];
      const T im = lr[k] * si[k] + li[k] * sr[k] + ut[2 * k + 1];
      sr[k] = re;
      si[k] = im;
      ht[2 * k] = re;
      ht[2 * k + 1] = im;
    }
  }
}

// Rows of time staged per chunk in the backward pass. The adjoint runs backwards in time, and a descending
// walk over memory defeats the hardware prefetchers (measured 2-3x slower than ascending on an AMD EPYC):
// each chunk of kChunk rows is copied in ascending order into small buffers (3 x kChunk x 512 B for
// float, in L1), run backwards there, and copied out ascending (1.5x faster than the direct walk there).
constexpr int64_t kChunk = 8;

template <typename T>
void backward_block(const T* __restrict lam, const T* __restrict grad, const T* __restrict h,
                    const T* __restrict h0, T* __restrict grad_u, T* __restrict grad_lam,
                    T* __restrict grad_h0, int64_t length, int64_t width, int64_t n) {
  T lr[kLanes], li[kLanes], gr[kLanes], gi[kLanes], ar[kLanes], ai[kLanes];
  alignas(64) T grad_in[kChunk][2 * kLanes], prev_in[kChunk][2 * kLanes], grad_out[kChunk][2 * kLanes];
  for (int64_t k = 0; k < n; ++k) {
    lr[k] = lam[2 * k];
    li[k] = lam[2 * k + 1];
    gr[k] = gi[k] = ar[k] = ai[k] = T(0);
  }
  for (int64_t hi = length; hi > 0; hi -= kChunk) {
    const int64_t lo = std::max<int64_t>(0, hi - kChunk);  // this chunk: rows lo .. hi-1
    for (int64_t t = lo; t < hi; ++t) {
      const T* Gt = grad + 2 * t * width;
      const T* prev = t > 0 ? h + 2 * (t - 1) * width : h0;  // h_{t-1}
      for (int64_t k = 0; k < 2 * n; ++k) {
        grad_in[t - lo][k] = Gt[k];
        prev_in[t - lo][k] = prev[k];
      }
    }
    for (int64_t t = hi - 1; t >= lo; --t) {
      const T* __restrict Gt = grad_in[t - lo];
      const T* __restrict prev = prev_in[t - lo];
      T* __restrict gt = grad_out[t - lo];
      for (int64_t k = 0; k < n; ++k) {
        // g_t = G_t + conj(λ) g_{t+1} = G_t + (lr gr + li gi) + i (lr gi − li gr)
        const T re = Gt[2 * k] + lr[k] * gr[k] + li[k] * gi[k];
        const T im = Gt[2 * k + 1] + lr[k] * gi[k] - li[k] * gr[k];
        gr[k] = re;
        gi[k] = im;
        gt[2 * k] = re;
        gt[2 * k + 1] = im;
        // ∂ℓ/∂λ* += g_t conj(h_{t-1}) = (gr pr + gi pi) + i (gi pr − gr pi)
        const T pr = prev[2 * k], pi = prev[2 * k + 1];
        ar[k] += re * pr + im * pi;
        ai[k] += im * pr - re * pi;
      }
    }
    for (int64_t t = lo; t < hi; ++t) {
      T* gt = grad_u + 2 * t * width;
      for (int64_t k = 0; k < 2 * n; ++k) gt[k] = grad_out[t - lo][k];
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    grad_lam[2 * k] = ar[k];
    grad_lam[2 * k + 1] = ai[k];
    grad_h0[2 * k] = lr[k] * gr[k] + li[k] * gi[k];  // conj(λ) g_0
    grad_h0[2 * k + 1] = lr[k] * gi[k] - li[k] * gr[k];
  }
}

void check(const at::Tensor& x, int64_t dim, const char* name) {
  TORCH_CHECK(x.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(x.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(x.dim() == dim && x.size(-1) == 2, name, " must be the real view (..., 2) of a complex tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble, name, " must be float32/float64");
}

// lam (H, 2), u (B, L, H, 2), h0 (B, H, 2) -> h (B, L, H, 2)
at::Tensor forward(const at::Tensor& lam, const at::Tensor& u, const at::Tensor& h0) {
  check(lam, 2, "lam");
  check(u, 4, "u");
  check(h0, 3, "h0");
  const int64_t batch = u.size(0), length = u.size(1), width = u.size(2);
  TORCH_CHECK(lam.size(0) == width && h0.size(0) == batch && h0.size(1) == width, "shape mismatch");
  TORCH_CHECK(lam.scalar_type() == u.scalar_type() && h0.scalar_type() == u.scalar_type(), "dtype mismatch");
  auto h = at::empty_like(u);
  const int64_t blocks = (width + kLanes - 1) / kLanes;
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "linear_recurrence_forward", [&] {
    const scalar_t* lp = lam.data_ptr<scalar_t>();
    const scalar_t* up = u.data_ptr<scalar_t>();
    const scalar_t* h0p = h0.data_ptr<scalar_t>();
    scalar_t* hp = h.data_ptr<scalar_t>();
    at::parallel_for(0, batch * blocks, grain(length), [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / blocks, start = (task % blocks) * kLanes;
        const int64_t n = std::min(kLanes, width - start);
        const int64_t row = 2 * (b * length * width + start);
        forward_block(lp + 2 * start, up + row, h0p + 2 * (b * width + start), hp + row, length, width, n);
      }
    });
  });
  return h;
}

// lam (H, 2), grad (B, L, H, 2), h (B, L, H, 2), h0 (B, H, 2)
//   -> (grad_u (B, L, H, 2), grad_lam per batch row (B, H, 2), grad_h0 (B, H, 2))
std::vector<at::Tensor> backward(const at::Tensor& lam, const at::Tensor& grad, const at::Tensor& h,
                                 const at::Tensor& h0) {
  check(lam, 2, "lam");
  check(grad, 4, "grad");
  check(h, 4, "h");
  check(h0, 3, "h0");
  TORCH_CHECK(grad.sizes() == h.sizes(), "grad and h must have the same shape");
  const int64_t batch = h.size(0), length = h.size(1), width = h.size(2);
  auto grad_u = at::empty_like(grad);
  auto grad_lam = at::empty_like(h0);
  auto grad_h0 = at::empty_like(h0);
  const int64_t blocks = (width + kLanes - 1) / kLanes;
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "linear_recurrence_backward", [&] {
    const scalar_t* lp = lam.data_ptr<scalar_t>();
    const scalar_t* gp = grad.data_ptr<scalar_t>();
    const scalar_t* hp = h.data_ptr<scalar_t>();
    const scalar_t* h0p = h0.data_ptr<scalar_t>();
    scalar_t* gup = grad_u.data_ptr<scalar_t>();
    scalar_t* glp = grad_lam.data_ptr<scalar_t>();
    scalar_t* ghp = grad_h0.data_ptr<scalar_t>();
    at::parallel_for(0, batch * blocks, grain(length), [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / blocks, start = (task % blocks) * kLanes;
        const int64_t n = std::min(kLanes, width - start);
        const int64_t row = 2 * (b * length * width + start), lane = 2 * (b * width + start);
        backward_block(lp + 2 * start, gp + row, hp + row, h0p + lane, gup + row, glp + lane, ghp + lane,
                       length, width, n);
      }
    });
  });
  return {grad_u, grad_lam, grad_h0};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "h_t = lam h_{t-1} + u_t over dim 1 (real views of complex tensors)");
  m.def("backward", &backward, "the adjoint recurrence: (grad_u, grad_lam per batch row, grad_h0)");
}
