// Inverted dropout on CPU in one pass: the random mask drawn, compared and applied together.
//
// Why this file exists: torch's CPU dropout draws its mask with the Mersenne Twister, one serial draw per
// element (about 3 ns each on an AMD EPYC: 21 ms for LRURec's (128, 200, 256) feed-forward mask), then
// compares and multiplies in further passes over memory. On LRURec's ML-1M training step the masks cost
// more than any other element-wise work. Here the mask comes from Philox4x32-10, a counter-based generator
// (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the generator of cuRAND and
// JAX): each element's random bits are a pure function of (seed, position), so blocks are generated in
// parallel and vectorised, and the result does not depend on the thread count.
//
// Mask: element e takes a 16-bit uniform u_e from the Philox output of its group; keep_e = u_e >= t with
// t = round(p * 65536), so the realised rate is p' = t / 65536 and the kept values are scaled by
// 1 / (1 - p') = 65536 / (65536 - t). The seed (64 bits) is drawn by the caller from torch's generator,
// which keeps seeded runs repeatable and checkpointed RNG state meaningful.
//
// Layout: elements are processed in blocks of kGroups * 8 = 512. Block b runs Philox on counters
// (b * kGroups + g, 0, 0, 0) for g < kGroups, giving four 32-bit words per counter, each split into two
// 16-bit uniforms: element j * kGroups + g of the block (j < 8) takes half (j & 1) of word (j >> 1) of
// counter g. The loops run over g with unit stride, so the compiler vectorises them (-march=native).

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int64_t kGroups = 64;                // Philox counters per block
constexpr int64_t kBlock = 8 * kGroups;        // elements per block: 8 sixteen-bit uniforms per counter
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // Philox4x32 multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Philox4x32 key increments (Weyl sequence)

// The 16-bit uniforms of one block: words[w][g] is word w of counter (block * kGroups + g).
void philox_block(uint64_t block, uint32_t key0, uint32_t key1, uint32_t words[4][kGroups]) {
  uint32_t c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
  const uint64_t first = block * kGroups;
  for (int64_t g = 0; g < kGroups; ++g) {
    const uint64_t counter = first + static_cast<uint64_t>(g);
    c0[g] = static_cast<uint32_t>(counter);
    c1[g] = static_cast<uint32_t>(counter >> 32);
    c2[g] = 0u;
    c3[g] = 0u;
  }
  uint32_t k0 = key0, k1 = key1;
  for (int round = 0; round < 10; ++round) {
    for (int64_t g = 0; g < kGroups; ++g) {
      const uint64_t p0 = static_cast<uint64_t>(kM0) * c0[g];
      const uint64_t p1 = static_cast<uint64_t>(kM1) * c2[g];
      const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
      const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
      c0[g] = hi1 ^ c1[g] ^ k0;
      c1[g] = lo1;
      c2[g] = hi0 ^ c3[g] ^ k1;
      c3[g] = lo0;
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int64_t g = 0; g < kGroups; ++g) {
    words[0][g] = c0[g];
    words[1][g] = c1[g];
    words[2][g] = c2[g];
    words[3][g] = c3[g];
  }
}

// keep[i] = (16-bit uniform of element i) >= threshold for i in [0, count) of block `block`.
void block_mask(uint64_t block, uint32_t key0, uint32_t key1, uint32_t threshold, int64_t count,
                bool* __restrict keep) {
  alignas(64) uint32_t words[4][kGroups];
  philox_block(block, key0, key1, words);
  for (int64_t j = 0; j < 8; ++j) {
    const uint32_t* __restrict word = words[j >> 1];
    const int shift = 16 * static_cast<int>(j & 1);
    const int64_t start = j * kGroups;
    const int64_t stop = std::min(start + kGroups, count);
    for (int64_t e = start; e < stop; ++e) keep[e] = ((word[e - start] >> shift) & 0xFFFFu) >= threshold;
  }
}

// Calls body(first, count) after writing keep[first .. first + count) for every block, in parallel.
template <typename Body>
void for_each_block(int64_t numel, uint64_t seed, uint32_t threshold, bool* keep, const Body& body) {
  const uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  const int64_t blocks = (numel + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, 64, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t first = block * kBlock;
      const int64_t count = std::min(kBlock, numel - first);
      block_mask(static_cast<uint64_t>(block), key0, key1, threshold, count, keep + first);
      body(first, count);
    }
  });
}

// y = x * (keep * scale): a multiply by 0 or scale (not a select), so it vectorises; as torch's x * keep,
// a dropped NaN or infinity stays NaN. y may be x (in place), so neither is __restrict.
template <typename T>
void scale_kept(const T* x, const bool* __restrict keep, T* y, T scale, int64_t count) {
  const uint8_t* __restrict k = reinterpret_cast<const uint8_t*>(keep);
  for (int64_t i = 0; i < count; ++i) y[i] = x[i] * (scale * static_cast<T>(k[i]));
}

void check_keep(const at::Tensor& x, const at::Tensor& keep) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous(), "x must be a contiguous CPU tensor");
  TORCH_CHECK(keep.is_contiguous() && keep.scalar_type() == at::kBool && keep.sizes() == x.sizes(),
              "keep must be a contiguous bool tensor of x's shape");
}

// out = x * keep * scale (out may be x)
void apply_into(const at::Tensor& x, const at::Tensor& keep, double scale, at::Tensor& out) {
  const bool* kp = keep.data_ptr<bool>();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "dropout_apply", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const scalar_t s = static_cast<scalar_t>(scale);
    at::parallel_for(0, x.numel(), 32768, [&](int64_t begin, int64_t end) {
      scale_kept(xp + begin, kp + begin, op + begin, s, end - begin);
    });
  });
}

void check_threshold(int64_t threshold) {
  TORCH_CHECK(threshold >= 0 && threshold < 65536, "threshold must be in [0, 65536), got ", threshold);
}

// keep (shape) bool: u >= threshold
at::Tensor mask(at::IntArrayRef shape, int64_t threshold, int64_t seed) {
  check_threshold(threshold);
  auto keep = at::empty(shape, at::TensorOptions().dtype(at::kBool));
  for_each_block(keep.numel(), static_cast<uint64_t>(seed), static_cast<uint32_t>(threshold),
                 keep.data_ptr<bool>(), [](int64_t, int64_t) {});
  return keep;
}

// x (contiguous float) -> (y = keep ? x * scale : 0, keep bool)
std::vector<at::Tensor> forward(const at::Tensor& x, int64_t threshold, double scale, int64_t seed) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous(), "x must be a contiguous CPU tensor");
  check_threshold(threshold);
  auto y = at::empty_like(x);
  auto keep = at::empty(x.sizes(), x.options().dtype(at::kBool));
  bool* kp = keep.data_ptr<bool>();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "dropout_forward", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    const scalar_t s = static_cast<scalar_t>(scale);
    for_each_block(x.numel(), static_cast<uint64_t>(seed), static_cast<uint32_t>(threshold), kp,
                   [&](int64_t first, int64_t count) { scale_kept(xp + first, kp + first, yp + first, s, count); });
  });
  return {y, keep};
}

// grad (contiguous float), keep (same shape, bool) -> grad * keep * scale
at::Tensor apply(const at::Tensor& grad, const at::Tensor& keep, double scale) {
  check_keep(grad, keep);
  auto out = at::empty_like(grad);
  apply_into(grad, keep, scale, out);
  return out;
}

// x (contiguous float), keep (same shape, bool): x *= keep * scale in place, returns x
at::Tensor apply_(at::Tensor& x, const at::Tensor& keep, double scale) {
  check_keep(x, keep);
  apply_into(x, keep, scale, x);
  return x;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("mask", &mask, "keep mask (bool) of the given shape: Philox 16-bit uniform >= threshold");
  m.def("forward", &forward, "(x * keep * scale, keep) with a fresh Philox mask");
  m.def("apply", &apply, "grad * keep * scale");
  m.def("apply_", &apply_, "x *= keep * scale, in place");
}
