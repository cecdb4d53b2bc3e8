// The CPU's fused attention (Note [fused attention] in kernels/attention.h): tiles of 128 queries
// by 128 keys (docs/results/attention-cpu.md: against 64 × 64, each K tile is packed for the GEMM
// half as often), each tile's products by the CPU GEMM for small products (gemm_small: in cache,
// on the task's own thread), the softmax bookkeeping in between.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu_features.h"
#include "kernels/dropout.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {
namespace {

constexpr std::size_t kQueryTile = 128, kKeyTile = 128;

template <class T>
constexpr T kMinusInfinity = -std::numeric_limits<T>::infinity();

// Runs body(task) for tasks [0, tasks), grouped into pieces of about kGemmProductsPerPiece
// multiply-adds (`work` per task) so that small attention stays on one thread. Each task writes
// only its own outputs, so the grouping does not change a bit.
template <class Body>
void for_each_task(std::size_t tasks, double work, Body&& body) {
  const double by_work = static_cast<double>(tasks) * work / kGemmProductsPerPiece;
  const std::size_t pieces = std::clamp<std::size_t>(static_cast<std::size_t>(by_work), 1, tasks > 0 ? tasks : 1);
  parallel_parts(pieces, [&](std::size_t first, std::size_t last) {
    for (std::size_t t = first * tasks / pieces; t < last * tasks / pieces; ++t) body(t);
  });
}

// A tile's scratch, not zeroed: every value is written before it is read (the GEMM with β = 0 does
// not read C). Zeroing three 64 KiB tiles per task took a sixth of the backward at the ViT's sizes.
template <class T>
std::unique_ptr<T[]> tile_scratch() {
  return std::make_unique_for_overwrite<T[]>(kQueryTile * kKeyTile);
}

// One batch element's rows of an input or output: its first row and the distance between rows
// (attention_rows).
template <class T>
struct Rows {
  T* at;
  std::size_t stride;
  T* row(std::size_t i) const { return at + i * stride; }
};
template <class T>
Rows<T> rows_of(T* data, const AttentionShape& shape, std::size_t b, std::size_t len, std::size_t dim,
                std::size_t stride = 0) {
  const AttentionRows r = attention_rows(shape, b, len, dim, stride);
  return {data + r.start, r.stride};
}

// The scaled scores of queries [i0, i0 + rows) against keys [j0, j0 + cols) of batch element b,
// masked: s[r·kKeyTile + c]. −∞ where the mask or causality says "do not attend".
template <class T>
void scores_tile(Rows<const T> q, Rows<const T> k, T* s, std::size_t b, std::size_t i0, std::size_t rows,
                 std::size_t j0, std::size_t cols, const AttentionShape& shape, const AttentionParams& p) {
  gemm_small<T>(Transpose::no, Transpose::yes, rows, cols, shape.head_dim, static_cast<T>(p.scale), q.row(i0), q.stride,
                k.row(j0), k.stride, T(0), s, kKeyTile);
  const AttentionMask& mask = p.mask;
  for (std::size_t r = 0; r < rows; ++r) {
    T* row = s + r * kKeyTile;
    const std::size_t i = i0 + r;
    if (mask.kind != AttentionMaskKind::none) {
      const std::size_t base = mask.batch_offsets[b] + i * mask.row_stride;
      for (std::size_t c = 0; c < cols; ++c) {
        const std::size_t at = base + (j0 + c) * mask.col_stride;
        if (mask.kind == AttentionMaskKind::boolean) {
          if (static_cast<const std::uint8_t*>(mask.data)[at] == 0) row[c] = kMinusInfinity<T>;
        } else {
          row[c] += static_cast<const T*>(mask.data)[at];
        }
      }
    }
    if (p.causal)
      for (std::size_t c = (i >= j0 ? i - j0 + 1 : 0); c < cols; ++c) row[c] = kMinusInfinity<T>;
  }
}

// out[c] = e^(in[c] − shift) for c < n (in and out may be the same), and their sum: 16 at a time
// with exp_avx512 for f32 where the CPU has AVX-512, else std::exp in order. A tile row is at
// most kKeyTile long; each path is fixed for the machine, so the bits do not depend on threads.
__attribute__((target("avx512f"))) float exp_shifted_avx512(const float* in, float shift, float* out, std::size_t n) {
  __m512 sum = _mm512_setzero_ps();
  const __m512 by = _mm512_set1_ps(shift);
  for (std::size_t c = 0; c < n; c += 16) {
    const __mmask16 lanes = n - c >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - c)) - 1);
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, in + c), by));
    _mm512_mask_storeu_ps(out + c, lanes, e);
    sum = _mm512_mask_add_ps(sum, lanes, sum, e);
  }
  // The lanes added as a tree (halves, then quarters, …): 4 dependent additions, where 16 in a row
  // made the latency of a row's sum a third of the forward's time at the ViT's rows of 50. Masked
  // forms, as in exp_avx512.h (GCC bug 105593; _mm512_reduce_add_ps trips it too).
  constexpr __mmask16 kAll = 0xffff;
  sum = _mm512_add_ps(sum, _mm512_maskz_shuffle_f32x4(kAll, sum, sum, _MM_SHUFFLE(1, 0, 3, 2)));
  sum = _mm512_add_ps(sum, _mm512_maskz_shuffle_f32x4(kAll, sum, sum, _MM_SHUFFLE(2, 3, 0, 1)));
  sum = _mm512_add_ps(sum, _mm512_maskz_permute_ps(kAll, sum, _MM_SHUFFLE(1, 0, 3, 2)));
  sum = _mm512_add_ps(sum, _mm512_maskz_permute_ps(kAll, sum, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_cvtss_f32(sum);
}

// The largest of row[0, n): 16 lanes at a time for f32 on AVX-512 (a scalar loop carries its
// running maximum through one register, the latency of a compare per element).
__attribute__((target("avx512f"))) float row_max_avx512(const float* row, std::size_t n) {
  const __m512 lowest = _mm512_set1_ps(kMinusInfinity<float>);
  __m512 best = lowest;
  for (std::size_t c = 0; c < n; c += 16) {
    const __mmask16 lanes = n - c >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - c)) - 1);
    best = _mm512_mask_max_ps(best, 0xffff, best, _mm512_mask_loadu_ps(lowest, lanes, row + c));
  }
  alignas(64) float parts[16];
  _mm512_store_ps(parts, best);
  return *std::max_element(parts, parts + 16);
}

template <class T>
T row_max(const T* row, std::size_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (cpu_has_avx512f()) return row_max_avx512(row, n);
  return *std::max_element(row, row + n);
}

template <class T>
T exp_shifted(const T* in, T shift, T* out, std::size_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (cpu_has_avx512f()) return exp_shifted_avx512(in, shift, out, n);
  T sum = 0;
  for (std::size_t c = 0; c < n; ++c) {
    out[c] = std::exp(in[c] - shift);
    sum += out[c];
  }
  return sum;
}

// Probability (b, i, j) times the dropout's keep/(1 − p), as the forward multiplies V by it.
template <class T>
T dropped(T probability, std::size_t b, std::size_t i, std::size_t j, const AttentionShape& shape,
          const AttentionParams& p, T keep_scale) {
  if (p.dropout_p <= 0.0f) return probability;
  const std::uint64_t counter = (static_cast<std::uint64_t>(b) * shape.q_len + i) * shape.kv_len + j;
  return dropout_apply(dropout_keeps(p.seed, p.offset + counter, p.dropout_p), probability, keep_scale);
}

// The last key tile that query rows [i0, i0 + rows) can see (causal: up to the last row's index).
std::size_t keys_seen(std::size_t i0, std::size_t rows, const AttentionShape& shape, const AttentionParams& p) {
  return p.causal ? std::min(shape.kv_len, i0 + rows) : shape.kv_len;
}

}  // namespace

template <class T>
void attention_forward(const T* q, const T* k, const T* v, T* out, T* lse, const AttentionShape& shape,
                       const AttentionParams& p) {
  const std::size_t L = shape.q_len, S = shape.kv_len, E = shape.head_dim, Ev = shape.value_dim;
  const std::size_t tiles = (L + kQueryTile - 1) / kQueryTile;
  const T keep_scale = dropout_scale<T>(p.dropout_p);
  for_each_task(shape.batch * tiles, static_cast<double>(kQueryTile * S * (E + Ev)), [&](std::size_t task) {
    const std::size_t b = task / tiles, i0 = task % tiles * kQueryTile, rows = std::min(kQueryTile, L - i0);
    const Rows<const T> qb = rows_of(q, shape, b, L, E, shape.q_stride),
                        kb = rows_of(k, shape, b, S, E, shape.kv_stride),
                        vb = rows_of(v, shape, b, S, Ev, shape.kv_stride);
    const std::unique_ptr<T[]> scores = tile_scratch<T>();
    T* s = scores.get();
    std::vector<T> m(rows, kMinusInfinity<T>), l(rows, T(0));
    const Rows<T> ob = rows_of(out, shape, b, L, Ev);
    T* acc = ob.row(i0);  // the running output rows, normalized at the end
    const std::size_t ld = ob.stride;
    for (std::size_t r = 0; r < rows; ++r) std::fill(acc + r * ld, acc + r * ld + Ev, T(0));
    const std::size_t seen = keys_seen(i0, rows, shape, p);
    for (std::size_t j0 = 0; j0 < seen; j0 += kKeyTile) {
      const std::size_t cols = std::min(kKeyTile, seen - j0);
      scores_tile(qb, kb, s, b, i0, rows, j0, cols, shape, p);
      for (std::size_t r = 0; r < rows; ++r) {
        T* row = s + r * kKeyTile;
        const T m_new = std::max(m[r], row_max(row, cols));
        if (m_new == kMinusInfinity<T>) {  // nothing to attend to yet: this tile adds nothing
          std::fill(row, row + cols, T(0));
          continue;
        }
        const T rescale = std::exp(m[r] - m_new);  // 0 while m was −∞
        const T row_sum = exp_shifted(row, m_new, row, cols);
        if (p.dropout_p > 0.0f)
          for (std::size_t c = 0; c < cols; ++c) row[c] = dropped(row[c], b, i0 + r, j0 + c, shape, p, keep_scale);
        l[r] = l[r] * rescale + row_sum;
        m[r] = m_new;
        if (rescale != T(1))
          for (std::size_t x = 0; x < Ev; ++x) acc[r * ld + x] *= rescale;
      }
      gemm_small<T>(Transpose::no, Transpose::no, rows, Ev, cols, T(1), s, kKeyTile, vb.row(j0), vb.stride, T(1), acc,
                    ld);
    }
    for (std::size_t r = 0; r < rows; ++r) {
      const T inverse = l[r] > T(0) ? T(1) / l[r] : T(0);
      for (std::size_t x = 0; x < Ev; ++x) acc[r * ld + x] *= inverse;
      lse[b * L + i0 + r] = l[r] > T(0) ? m[r] + std::log(l[r]) : kMinusInfinity<T>;
    }
  });
}

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* dout, const T* lse, T* dq, T* dk,
                        T* dv, const AttentionShape& shape, const AttentionParams& p) {
  const std::size_t L = shape.q_len, S = shape.kv_len, E = shape.head_dim, Ev = shape.value_dim;
  const T keep_scale = dropout_scale<T>(p.dropout_p);
  const T scale = static_cast<T>(p.scale);
  for_each_task(shape.batch, static_cast<double>(L * S * (2 * E + 2 * Ev)), [&](std::size_t b) {
    const std::size_t q_stride = shape.q_stride, kv_stride = shape.kv_stride;
    const Rows<const T> qb = rows_of(q, shape, b, L, E, q_stride), kb = rows_of(k, shape, b, S, E, kv_stride),
                        vb = rows_of(v, shape, b, S, Ev, kv_stride), ob = rows_of(out, shape, b, L, Ev),
                        dob = rows_of(dout, shape, b, L, Ev);
    const Rows<T> dqb = rows_of(dq, shape, b, L, E, q_stride), dkb = rows_of(dk, shape, b, S, E, kv_stride),
                  dvb = rows_of(dv, shape, b, S, Ev, kv_stride);
    const T* lb = lse + b * L;
    // The gradients are not zeroed first: each tile's first product writes them (β = 0), the later
    // ones add to them. dQ's first is at key tile 0, which every query tile sees; dK's and dV's at
    // the first query tile the loop visits, and rows that no query tile sees are zeroed.
    const auto zero_rows = [](Rows<T> rows, std::size_t first, std::size_t last, std::size_t dim) {
      for (std::size_t i = first; i < last; ++i) std::fill(rows.row(i), rows.row(i) + dim, T(0));
    };
    if (S == 0) zero_rows(dqb, 0, L, E);
    std::vector<T> d(L);
    const std::unique_ptr<T[]> prob_tile = tile_scratch<T>(), dprob_tile = tile_scratch<T>();
    T *prob = prob_tile.get(), *dprob = dprob_tile.get();
    for (std::size_t i = 0; i < L; ++i) {  // D = rowsum(dO∘O)
      T dot = 0;
      for (std::size_t x = 0; x < Ev; ++x) dot += dob.row(i)[x] * ob.row(i)[x];
      d[i] = dot;
    }
    for (std::size_t j0 = 0; j0 < S; j0 += kKeyTile) {
      const std::size_t cols = std::min(kKeyTile, S - j0);
      const std::size_t first_i0 = p.causal ? j0 / kQueryTile * kQueryTile : 0;
      if (first_i0 >= L) {
        zero_rows(dkb, j0, j0 + cols, E);
        zero_rows(dvb, j0, j0 + cols, Ev);
      }
      for (std::size_t i0 = first_i0; i0 < L; i0 += kQueryTile) {
        const std::size_t rows = std::min(kQueryTile, L - i0);
        const T dkv_beta = i0 == first_i0 ? T(0) : T(1), dq_beta = j0 == 0 ? T(0) : T(1);
        scores_tile(qb, kb, prob, b, i0, rows, j0, cols, shape, p);
        // P (into prob) from the saved lse, and with dropout P̃ (into dprob) for dV.
        for (std::size_t r = 0; r < rows; ++r) {
          T* row = prob + r * kKeyTile;
          if (lb[i0 + r] == kMinusInfinity<T>)
            std::fill(row, row + cols, T(0));
          else
            exp_shifted(row, lb[i0 + r], row, cols);
          if (p.dropout_p > 0.0f)
            for (std::size_t c = 0; c < cols; ++c)
              dprob[r * kKeyTile + c] = dropped(row[c], b, i0 + r, j0 + c, shape, p, keep_scale);
        }
        gemm_small<T>(Transpose::yes, Transpose::no, cols, Ev, rows, T(1), p.dropout_p > 0.0f ? dprob : prob, kKeyTile,
                      dob.row(i0), dob.stride, dkv_beta, dvb.row(j0), dvb.stride);
        // dP = (dO·Vᵀ)∘Z/(1 − p), then dS = P∘(dP − D) in place of dP.
        gemm_small<T>(Transpose::no, Transpose::yes, rows, cols, Ev, T(1), dob.row(i0), dob.stride, vb.row(j0),
                      vb.stride, T(0), dprob, kKeyTile);
        for (std::size_t r = 0; r < rows; ++r) {
          T *ds = dprob + r * kKeyTile, *pr = prob + r * kKeyTile;
          if (p.dropout_p > 0.0f)
            for (std::size_t c = 0; c < cols; ++c)
              ds[c] = pr[c] * (dropped(ds[c], b, i0 + r, j0 + c, shape, p, keep_scale) - d[i0 + r]);
          else
            for (std::size_t c = 0; c < cols; ++c) ds[c] = pr[c] * (ds[c] - d[i0 + r]);
        }
        gemm_small<T>(Transpose::no, Transpose::no, rows, E, cols, scale, dprob, kKeyTile, kb.row(j0), kb.stride,
                      dq_beta, dqb.row(i0), dqb.stride);
        gemm_small<T>(Transpose::yes, Transpose::no, cols, E, rows, scale, dprob, kKeyTile, qb.row(i0), qb.stride,
                      dkv_beta, dkb.row(j0), dkb.stride);
      }
    }
  });
}

#define EMBER_ATTENTION_INSTANTIATE(T)                                                                        \
  template void attention_forward<T>(const T*, const T*, const T*, T*, T*, const AttentionShape&,             \
                                     const AttentionParams&);                                                 \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*, \
                                      const AttentionShape&, const AttentionParams&);
EMBER_ATTENTION_INSTANTIATE(float)
EMBER_ATTENTION_INSTANTIATE(double)
#undef EMBER_ATTENTION_INSTANTIATE

}  // namespace ember::kernels::cpu
