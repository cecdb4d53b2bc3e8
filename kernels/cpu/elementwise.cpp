// CPU twins of the elementwise kernels: the reference for the CUDA ones, and the CPU backend. The
// formulas are kernels/elementwise_math.h's; the loops here only walk the memory.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/elementwise.h"

#include "kernels/cpu/lanes_f32x16.h"
#include "kernels/cpu_features.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {
namespace {

// y[i] = f(x[i]), one loop per formula (the op is a template argument), so each vectorizes.
// Elementwise loops run in parallel pieces (Note [CPU threads]): the same bits wherever they are cut.
template <class T, class F>
void map(const T* x, T* y, std::size_t n, F f) {
  parallel_for(n, kElementsPerPiece, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) y[i] = f(x[i]);
  });
}

template <BinaryOp Op, class T>
void binary_broadcast_loop(const T* a, const T* b, T* out, const BroadcastLayout& layout) {
  const int nd = layout.ndim;
  if (nd == 0) {
    out[0] = binary_formula<Op>(a[0], b[0]);
    return;
  }
  const long long total = layout.numel();
  if (total == 0) return;
  // Walk the output in order with an odometer over all dims but the last; the last dim is an
  // inner loop with fixed strides.
  const long long inner = layout.out_shape[nd - 1];
  const long long sa = layout.a_stride[nd - 1], sb = layout.b_stride[nd - 1];
  long long index[kMaxDims] = {};
  long long off_a = 0, off_b = 0;
  for (long long base = 0; base < total; base += inner) {
    for (long long i = 0; i < inner; ++i) out[base + i] = binary_formula<Op>(a[off_a + i * sa], b[off_b + i * sb]);
    for (int d = nd - 2; d >= 0; --d) {
      off_a += layout.a_stride[d];
      off_b += layout.b_stride[d];
      if (++index[d] < layout.out_shape[d]) break;
      off_a -= layout.a_stride[d] * layout.out_shape[d];
      off_b -= layout.b_stride[d] * layout.out_shape[d];
      index[d] = 0;
    }
  }
}

// The ops whose formulas call erf or e^x, and nothing 16 lanes cannot do (no comparison): on f32
// they run on AVX-512 lanes where the CPU has them (Note [formulas on lanes]).
constexpr bool runs_on_lanes(UnaryOp op) { return op == UnaryOp::erf || op == UnaryOp::gelu; }
constexpr bool runs_on_lanes(ActivationGrad op) { return op == ActivationGrad::erf || op == ActivationGrad::gelu; }

OpArgs<lanes::F32x16> lane_args(OpArgs<float> args) { return {lanes::F32x16(args.a), lanes::F32x16(args.b)}; }

template <UnaryOp Op>
__attribute__((target("avx512f"), flatten)) void unary_lanes(const float* x, float* y, std::size_t n,
                                                             OpArgs<float> args) {
  const OpArgs<lanes::F32x16> a = lane_args(args);
  for (std::size_t i = 0; i < n; i += 16) {
    const std::size_t count = std::min<std::size_t>(16, n - i);
    lanes::store(y + i, unary_formula<Op>(lanes::load(x + i, count), a), count);
  }
}

template <ActivationGrad Op>
__attribute__((target("avx512f"), flatten)) void activation_grad_lanes(const float* dy, const float* saved, float* dx,
                                                                       std::size_t n, WriteMode mode,
                                                                       OpArgs<float> args) {
  const OpArgs<lanes::F32x16> a = lane_args(args);
  for (std::size_t i = 0; i < n; i += 16) {
    const std::size_t count = std::min<std::size_t>(16, n - i);
    lanes::F32x16 g = activation_grad_formula<Op>(lanes::load(dy + i, count), lanes::load(saved + i, count), a);
    if (mode == WriteMode::accumulate) g = lanes::load(dx + i, count) + g;
    lanes::store(dx + i, g, count);
  }
}

}  // namespace

template <class T>
void unary(UnaryOp op, const T* x, T* y, std::size_t n, OpArgs<T> args) {
  with_unary_op(op, [&](auto op_c) {
    constexpr UnaryOp Op = decltype(op_c)::value;
    if constexpr (std::is_same_v<T, float> && runs_on_lanes(Op)) {
      if (cpu_has_avx512f())
        return parallel_for(n, kElementsPerPiece, [&](std::size_t begin, std::size_t end) {
          unary_lanes<Op>(x + begin, y + begin, end - begin, args);
        });
    }
    map(x, y, n, [args](T v) { return unary_formula<Op>(v, args); });
  });
}

template <class T>
void binary(BinaryOp op, const T* a, const T* b, T* out, std::size_t n) {
  with_binary_op(op, [&](auto op_c) {
    parallel_for(n, kElementsPerPiece, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) out[i] = binary_formula<decltype(op_c)::value>(a[i], b[i]);
    });
  });
}

template <class T>
void binary_broadcast(BinaryOp op, const T* a, const T* b, T* out, const BroadcastLayout& layout) {
  with_binary_op(op, [&](auto op_c) { binary_broadcast_loop<decltype(op_c)::value>(a, b, out, layout); });
}

template <class T>
void expand(const T* x, T* out, const BroadcastLayout& layout, T scale) {
  // The same odometer walk as binary_broadcast, over one operand, its rows (the last dim) split
  // across threads: each part finds its first row's offset by division, then walks. A row read
  // contiguously and unscaled (a permute's copy that keeps the last dim) is one memcpy.
  const BroadcastLayout& l = layout;
  const long long n = l.numel();
  if (n == 0) return;
  if (l.ndim == 0) {
    out[0] = x[0] * scale;
    return;
  }
  const int nd = l.ndim;
  const long long inner = l.out_shape[nd - 1], sa = l.a_stride[nd - 1];
  const bool copy_rows = sa == 1 && scale == T(1);
  const auto rows = static_cast<std::size_t>(n / inner);
  parallel_for(
      rows, items_per_piece(static_cast<std::size_t>(inner)),
      [&](std::size_t first, std::size_t last) {
        long long index[kMaxDims] = {};
        long long off = 0;
        for (long long d = nd - 2, rest = static_cast<long long>(first); d >= 0; --d) {
          index[d] = rest % l.out_shape[d];
          rest /= l.out_shape[d];
          off += index[d] * l.a_stride[d];
        }
        for (std::size_t row = first; row < last; ++row) {
          T* to = out + static_cast<long long>(row) * inner;
          if (copy_rows)
            std::memcpy(to, x + off, static_cast<std::size_t>(inner) * sizeof(T));
          else
            for (long long i = 0; i < inner; ++i) to[i] = x[off + i * sa] * scale;
          for (int d = nd - 2; d >= 0; --d) {
            off += l.a_stride[d];
            if (++index[d] < l.out_shape[d]) break;
            off -= l.a_stride[d] * l.out_shape[d];
            index[d] = 0;
          }
        }
      },
      1);
}

template <class T>
void activation_grad(ActivationGrad op, const T* dy, const T* saved, T* dx, std::size_t n, WriteMode mode,
                     OpArgs<T> args) {
  with_activation_grad(op, [&](auto op_c) {
    if constexpr (std::is_same_v<T, float> && runs_on_lanes(decltype(op_c)::value)) {
      if (cpu_has_avx512f())
        return parallel_for(n, kElementsPerPiece, [&](std::size_t begin, std::size_t end) {
          activation_grad_lanes<decltype(op_c)::value>(dy + begin, saved + begin, dx + begin, end - begin, mode, args);
        });
    }
    // One loop per (op, mode), so each vectorizes.
    parallel_for(n, kElementsPerPiece, [&](std::size_t begin, std::size_t end) {
      if (mode == WriteMode::overwrite) {
        for (std::size_t i = begin; i < end; ++i)
          dx[i] = activation_grad_formula<decltype(op_c)::value>(dy[i], saved[i], args);
      } else {
        for (std::size_t i = begin; i < end; ++i)
          dx[i] += activation_grad_formula<decltype(op_c)::value>(dy[i], saved[i], args);
      }
    });
  });
}

namespace {
__attribute__((always_inline)) inline void activation_grad_bf16_loop(ActivationGrad op, const bfloat16* __restrict dy,
                                                                     const bfloat16* __restrict saved,
                                                                     bfloat16* __restrict dx, std::size_t n,
                                                                     OpArgs<float> args) {
  with_activation_grad(op, [&](auto op_c) {
    for (std::size_t i = 0; i < n; ++i)
      dx[i] = bfloat16(activation_grad_formula<decltype(op_c)::value>(static_cast<float>(dy[i]),
                                                                      static_cast<float>(saved[i]), args));
  });
}
// Compiled again for AVX-512, where the bf16 rounding vectorizes (Note [CPU dispatch]).
__attribute__((target("avx512f,avx512bw"), flatten)) void activation_grad_bf16_avx512(
    ActivationGrad op, const bfloat16* dy, const bfloat16* saved, bfloat16* dx, std::size_t n, OpArgs<float> args) {
  activation_grad_bf16_loop(op, dy, saved, dx, n, args);
}
}  // namespace

void activation_grad_bf16(ActivationGrad op, const bfloat16* dy, const bfloat16* saved, bfloat16* dx, std::size_t n,
                          OpArgs<float> args) {
  parallel_for(n, kElementsPerPiece, [&](std::size_t begin, std::size_t end) {
    const std::size_t count = end - begin;
    if (cpu_has_avx512bw())
      activation_grad_bf16_avx512(op, dy + begin, saved + begin, dx + begin, count, args);
    else
      activation_grad_bf16_loop(op, dy + begin, saved + begin, dx + begin, count, args);
  });
}

template <class T>
void select(const std::uint8_t* cond, const T* a, const T* b, T* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = select_formula(cond[i], a[i], b[i]);
}

template <class T>
void fill(T* y, T value, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = value;
}

namespace {

// f32 ↔ bf16, the casts mixed precision runs most (each parameter and activation once a step):
// the scalar formulas of Note [half conversions] in a loop the compiler vectorizes, compiled once
// for AVX-512 and once for the baseline (Note [CPU dispatch]). Integer arithmetic only, so both
// give the same bits.
template <class From, class To, To (*convert)(From)>
__attribute__((always_inline)) inline void convert_all(const From* __restrict x, To* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = convert(x[i]);
}
constexpr auto to_bf16 = convert_all<float, std::uint16_t, half_bits::bf16_from_f32>;
constexpr auto from_bf16 = convert_all<std::uint16_t, float, half_bits::f32_from_bf16>;

__attribute__((target("avx512f,avx512bw"))) void f32_to_bf16_avx512(const float* x, std::uint16_t* y, std::size_t n) {
  to_bf16(x, y, n);
}
__attribute__((target("avx512f,avx512bw"))) void bf16_to_f32_avx512(const std::uint16_t* x, float* y, std::size_t n) {
  from_bf16(x, y, n);
}

void f32_to_bf16_serial(const float* x, std::uint16_t* y, std::size_t n) {
  if (cpu_has_avx512bw())
    f32_to_bf16_avx512(x, y, n);
  else
    to_bf16(x, y, n);
}

void f32_to_bf16(const float* x, std::uint16_t* y, std::size_t n) {
  parallel_for(n, kElementsPerPiece,
               [&](std::size_t begin, std::size_t end) { f32_to_bf16_serial(x + begin, y + begin, end - begin); });
}

void bf16_to_f32(const std::uint16_t* x, float* y, std::size_t n) {
  parallel_for(n, kElementsPerPiece, [&](std::size_t begin, std::size_t end) {
    if (cpu_has_avx512bw())
      bf16_to_f32_avx512(x + begin, y + begin, end - begin);
    else
      from_bf16(x + begin, y + begin, end - begin);
  });
}

}  // namespace

void f32_to_bf16_on_this_thread(const float* x, bfloat16* y, std::size_t n) {
  static_assert(sizeof(bfloat16) == sizeof(std::uint16_t), "bfloat16 is its bits");
  f32_to_bf16_serial(x, reinterpret_cast<std::uint16_t*>(y), n);
}

void cast(DType from, const void* x, DType to, void* y, std::size_t n) {
  if (from == DType::f32 && to == DType::bf16)
    return f32_to_bf16(static_cast<const float*>(x), static_cast<std::uint16_t*>(y), n);
  if (from == DType::bf16 && to == DType::f32)
    return bf16_to_f32(static_cast<const std::uint16_t*>(x), static_cast<float*>(y), n);
  visit_dtype(from, [&](auto from_zero) {
    visit_dtype(to, [&](auto to_zero) {
      using From = decltype(from_zero);
      using To = decltype(to_zero);
      const From* in = static_cast<const From*>(x);
      To* out = static_cast<To*>(y);
      for (std::size_t i = 0; i < n; ++i) out[i] = cast_formula<From, To>(in[i]);
    });
  });
}

void cast_list(const CastList& list, DType to) {
  for (int i = 0; i < list.count; ++i) cast(DType::f32, list.from[i], to, list.to[i], list.n[i]);
}

void normalize_u8(const std::uint8_t* __restrict x, float* __restrict y, std::size_t n, float mean, float std) {
  const PixelScaling s = pixel_scaling(mean, std);
  for (std::size_t i = 0; i < n; ++i) y[i] = scale_pixel(x[i], s);
}

#define EMBER_INSTANTIATE_FLOAT(T)                                                             \
  template void unary<T>(UnaryOp, const T*, T*, std::size_t, OpArgs<T>);                       \
  template void binary<T>(BinaryOp, const T*, const T*, T*, std::size_t);                      \
  template void binary_broadcast<T>(BinaryOp, const T*, const T*, T*, const BroadcastLayout&); \
  template void expand<T>(const T*, T*, const BroadcastLayout&, T);                            \
  template void select<T>(const std::uint8_t*, const T*, const T*, T*, std::size_t);           \
  template void activation_grad<T>(ActivationGrad, const T*, const T*, T*, std::size_t, WriteMode, OpArgs<T>);
EMBER_INSTANTIATE_FLOAT(float)
EMBER_INSTANTIATE_FLOAT(double)
#undef EMBER_INSTANTIATE_FLOAT

#define EMBER_INSTANTIATE_FILL(name, T, ...) template void fill<T>(T*, T, std::size_t);
EMBER_FORALL_DTYPES(EMBER_INSTANTIATE_FILL)  // Note [the dtype list]
#undef EMBER_INSTANTIATE_FILL

}  // namespace ember::kernels::cpu
