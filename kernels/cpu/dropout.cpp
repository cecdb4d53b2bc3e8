// CPU twin of dropout.
#include "kernels/dropout.h"

#include <type_traits>

#include "base/half.h"
#include "kernels/cpu_features.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {
namespace {

// The type an element is computed in: its own, or f32 for bf16 (Note [half precision]: the f32
// kernel's result rounded once, so the same bits as dropout on a widened copy).
template <class T>
using Compute = std::conditional_t<std::is_same_v<T, bfloat16>, float, T>;

// The keep mask, a byte per element. splitmix64's 64-bit multiplies vectorize only with AVX512DQ's
// VPMULLQ, so the loop is compiled a second time for it (Note [CPU dispatch]): integer work and
// an exact conversion of 24 bits, the same mask either way.
__attribute__((always_inline)) inline void keep_mask_loop(std::uint8_t* __restrict mask, std::size_t n, float p,
                                                          std::uint64_t seed, std::uint64_t offset) {
  for (std::size_t i = 0; i < n; ++i) mask[i] = dropout_keeps(seed, offset + i, p);
}
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))) void keep_mask_avx512(std::uint8_t* mask, std::size_t n,
                                                                                    float p, std::uint64_t seed,
                                                                                    std::uint64_t offset) {
  keep_mask_loop(mask, n, p, seed, offset);
}
void keep_mask(std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset) {
  if (cpu_has_avx512dq()) return keep_mask_avx512(mask, n, p, seed, offset);
  keep_mask_loop(mask, n, p, seed, offset);
}

// dx = mask ? dy/(1 − p) : 0. In bf16 the rounding vectorizes only with AVX-512's 16-bit lanes,
// so that loop is compiled a second time too.
template <class T>
__attribute__((always_inline)) inline void apply_mask_loop(const T* __restrict dy, const std::uint8_t* __restrict mask,
                                                           T* __restrict dx, std::size_t n, float p) {
  using C = Compute<T>;
  const C scale = dropout_scale<C>(p);
  for (std::size_t i = 0; i < n; ++i) dx[i] = T(dropout_apply(mask[i] != 0, static_cast<C>(dy[i]), scale));
}
__attribute__((target("avx512f,avx512bw"))) void apply_mask_bf16_avx512(const bfloat16* dy, const std::uint8_t* mask,
                                                                        bfloat16* dx, std::size_t n, float p) {
  apply_mask_loop(dy, mask, dx, n, p);
}

template <class T>
void apply_mask(const T* dy, const std::uint8_t* mask, T* dx, std::size_t n, float p) {
  if constexpr (std::is_same_v<T, bfloat16>)
    if (cpu_has_avx512bw()) return apply_mask_bf16_avx512(dy, mask, dx, n, p);
  apply_mask_loop(dy, mask, dx, n, p);
}

}  // namespace

// Both in parallel pieces (Note [CPU threads]): element i's draw depends on offset + i only.
template <class T>
void dropout_backward(const T* dy, const std::uint8_t* mask, T* dx, std::size_t n, float p) {
  parallel_for(n, kElementsPerPiece, [&](std::size_t begin, std::size_t end) {
    apply_mask(dy + begin, mask + begin, dx + begin, end - begin, p);
  });
}

template <class T>
void dropout_forward(const T* x, T* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                     std::uint64_t offset) {
  // The mask first, then the values from it: one loop doing both branches on each random keep
  // (a misprediction in four at p = 0.25); apart, the second loop is branch-free and vectorizes.
  parallel_for(n, kElementsPerPiece, [&](std::size_t begin, std::size_t end) {
    keep_mask(mask + begin, end - begin, p, seed, offset + begin);
    apply_mask(x + begin, mask + begin, y + begin, end - begin, p);
  });
}

#define EMBER_INSTANTIATE(T)                                                                                       \
  template void dropout_forward<T>(const T*, T*, std::uint8_t*, std::size_t, float, std::uint64_t, std::uint64_t); \
  template void dropout_backward<T>(const T*, const std::uint8_t*, T*, std::size_t, float);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
EMBER_INSTANTIATE(bfloat16)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cpu
