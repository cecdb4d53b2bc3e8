// The CPU's fused attention (Note [fused attention] in kernels/attention.h): tiles of 128 queries
// by 128 keys (docs/results/attention-cpu.md: against 64 × 64, each operand tile is packed for the
// GEMM half as often), each tile's products by the CPU GEMM for small products (gemm_small: in
// cache, on the task's own thread; gemm_bf16_small for bf16, Note [bf16 attention]), the softmax
// bookkeeping in between, in the compute type.
//
// Note [the forward's transposed scores]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The forward computes each tile of scores transposed, keys by queries: sᵀ = K·Qᵀ. A task is one
// tile of queries against every key tile, so Q's tile is the operand that stays: it is transposed
// once per task (f32 on AVX-512), and the GEMM reads it in place, where s = Q·Kᵀ had K's tile
// packed for every pair of tiles (6% of the forward at L 1,024). And 16 queries' statistics are one
// register: the maximum and the sum of a tile run down its keys, a register per 16 queries, with no
// reduction across lanes. Each score is the same sum of products, in the same order, as in s; P̃ᵀ
// is then the transposed A of P̃·V, which the GEMM reads as stored. The backward keeps s = Q·Kᵀ:
// its task is a whole batch element, and it needs P row by row beside D.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/attention_softmax.h"
#include "kernels/cpu/transpose_avx512.h"
#include "kernels/cpu_features.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {
namespace {

constexpr std::size_t kQueryTile = 128, kKeyTile = 128;
// A tile's row stride, whichever way it stands (the forward's scores are keys by queries): 9 cache
// lines, not 8. The products read their tiles down a column too (a transposed A: P̃ᵀ, dSᵀ, the
// forward's sᵀ), and rows 512 bytes apart fall into an eighth of the L1 cache's sets, more rows
// than the cache has ways.
constexpr std::size_t kTileStride = 144;
static_assert(kTileStride >= kQueryTile && kTileStride >= kKeyTile);
static_assert(kQueryTile <= kSoftmaxTileRows);

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

// Scratch of the thread running a task (thread_scratch: reused from task to task, not zeroed):
// every value is written before it is read (the GEMM with β = 0 does not read C). Zeroing three
// 64 KiB tiles per task took a sixth of the backward at the ViT's sizes, and allocating them per
// task gave the freed pages back to the system, each task faulting them in again (a tenth of the
// ViT's bf16 step).
enum class Scratch : std::uint8_t { scores, dprob, rounded, sums0, sums1, sums2, queries };
template <class U>
U* scratch(Scratch slot, std::size_t count = std::max(kQueryTile, kKeyTile) * kTileStride) {
  static_assert(kAttentionFirstSlot + 7 <= kScratchSlots);
  return thread_scratch<U>(kAttentionFirstSlot + static_cast<std::size_t>(slot), count);
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

// ---- The tiles' products -------------------------------------------------------------------------
// Note [bf16 attention]
// In bf16 the inputs and outputs are bf16 and everything between is f32, as in PyTorch's CPU
// flash attention: the products run on the bf16 GEMM (VDPBF16PS where the CPU has AVX512-BF16,
// Note [bf16 GEMM paths]) with f32 sums, the softmax statistics m, l and lse, the output's and the
// gradients' running sums and D stay f32, and an f32 tile that is a product's operand (P, P̃, dS)
// is rounded once to bf16 first. So the results are not the bits of the f32 kernel on widened
// copies (Note [half precision]): P·V sums bf16-rounded probabilities. Each element is still one
// fixed sum, whatever the thread count, and the scalar path gives the same bits as the vector one.

// s (a tile, row stride kTileStride) = α·a·bᵀ over `depth` values: `rows` rows of a and `cols` rows
// of b. bf16's GEMM takes no α: the f32 sums are scaled after.
template <class T>
void rows_by_rows(std::size_t rows, std::size_t cols, std::size_t depth, compute_t<T> alpha, Rows<const T> a,
                  Rows<const T> b, compute_t<T>* s) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    gemm_bf16_small(Transpose::no, Transpose::yes, rows, cols, depth, a.at, a.stride, b.at, b.stride, s, kTileStride,
                    false);
    if (alpha != 1.0f)
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) s[r * kTileStride + c] *= alpha;
  } else {
    gemm_small<T>(Transpose::no, Transpose::yes, rows, cols, depth, alpha, a.at, a.stride, b.at, b.stride, T(0), s,
                  kTileStride);
  }
}

// A tile of the compute type as a product's operand: the tile itself, or for bf16 its `rows` ×
// `cols` values (row stride kTileStride) rounded once, as the cast rounds, into `rounded` (same
// layout).
template <class T>
const T* operand(const compute_t<T>* tile, std::size_t rows, std::size_t cols, T* rounded) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    for (std::size_t r = 0; r < rows; ++r)
      f32_to_bf16_on_this_thread(tile + r * kTileStride, rounded + r * kTileStride, cols);
    return rounded;
  } else {
    return tile;
  }
}

// c (row stride ldc) = op(tile)·b + β·c, β 0 or 1: op(tile) [m, depth] from an operand() (stored
// [depth, m] where transposed), b `depth` rows of n inputs.
template <class T>
void tile_by_rows(Transpose ta, std::size_t m, std::size_t n, std::size_t depth, const T* tile, Rows<const T> b,
                  compute_t<T> beta, compute_t<T>* c, std::size_t ldc) {
  if constexpr (std::is_same_v<T, bfloat16>)
    gemm_bf16_small(ta, Transpose::no, m, n, depth, tile, kTileStride, b.at, b.stride, c, ldc, beta != 0.0f);
  else
    gemm_small<T>(ta, Transpose::no, m, n, depth, T(1), tile, kTileStride, b.at, b.stride, beta, c, ldc);
}

// Sums of the compute type over `count` rows of `dim` values that end in rows of T from `first`
// on: summed in place where T is the compute type; for bf16 in f32 scratch (`slot`), rounded into
// them once by finish().
template <class T>
class Sums {
 public:
  using C = compute_t<T>;
  Sums(Rows<T> out, std::size_t first, std::size_t count, std::size_t dim, Scratch slot)
      : out_(out), first_(first), count_(count), dim_(dim) {
    if constexpr (std::is_same_v<T, C>)
      rows_ = {out.row(first), out.stride};
    else
      rows_ = {scratch<C>(slot, count * dim), dim};
  }
  const Rows<C>& rows() const { return rows_; }
  void finish() const {
    if constexpr (!std::is_same_v<T, C>)
      for (std::size_t i = 0; i < count_; ++i) f32_to_bf16_on_this_thread(rows_.row(i), out_.row(first_ + i), dim_);
  }

 private:
  Rows<T> out_;
  std::size_t first_, count_, dim_;
  Rows<C> rows_;
};

// ---- The softmax's bookkeeping ------------------------------------------------------------------

// The mask and causality on a tile of scores of queries [i0, i0 + rows) against keys [j0, j0 +
// cols) of batch element b, score (r, c) at s[r·query_step + c·key_step]: −∞ where the mask or
// causality says "do not attend". An additive mask holds the compute type.
template <class C>
void mask_tile(C* s, std::size_t query_step, std::size_t key_step, std::size_t b, std::size_t i0, std::size_t rows,
               std::size_t j0, std::size_t cols, const AttentionParams& p) {
  const AttentionMask& mask = p.mask;
  for (std::size_t r = 0; r < rows; ++r) {
    C* scores = s + r * query_step;
    const std::size_t i = i0 + r;
    if (mask.kind != AttentionMaskKind::none) {
      const std::size_t base = mask.batch_offsets[b] + i * mask.row_stride;
      for (std::size_t c = 0; c < cols; ++c) {
        const std::size_t at = base + (j0 + c) * mask.col_stride;
        if (mask.kind == AttentionMaskKind::boolean) {
          if (static_cast<const std::uint8_t*>(mask.data)[at] == 0) scores[c * key_step] = kMinusInfinity<C>;
        } else {
          scores[c * key_step] += static_cast<const C*>(mask.data)[at];
        }
      }
    }
    if (p.causal)
      for (std::size_t c = (i >= j0 ? i - j0 + 1 : 0); c < cols; ++c) scores[c * key_step] = kMinusInfinity<C>;
  }
}

// The scaled, masked scores of queries [i0, i0 + rows) against keys [j0, j0 + cols) of batch
// element b: s[r·kTileStride + c].
template <class T, class C = compute_t<T>>
void scores_tile(Rows<const T> q, Rows<const T> k, C* s, std::size_t b, std::size_t i0, std::size_t rows,
                 std::size_t j0, std::size_t cols, const AttentionShape& shape, const AttentionParams& p) {
  rows_by_rows<T>(rows, cols, shape.head_dim, static_cast<C>(p.scale), {q.row(i0), q.stride}, {k.row(j0), k.stride}, s);
  mask_tile(s, kTileStride, 1, b, i0, rows, j0, cols, p);
}

// The forward's tile of queries as the right operand of sᵀ = K·Qᵀ (Note [the forward's transposed
// scores]): for f32 on AVX-512, Qᵀ in scratch (E rows, kTileStride apart), which the GEMM reads as
// stored; else the rows themselves, which the GEMM packs (bf16: interleaved in pairs) or reads
// transposed.
template <class T>
struct Queries {
  Rows<const T> q;  // the rows, or Qᵀ's
  Transpose op;
};
template <class T>
Queries<T> queries_operand(Rows<const T> q, std::size_t i0, std::size_t rows, std::size_t dim) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_has_avx512f()) {
      float* qt = scratch<float>(Scratch::queries, dim * kTileStride);
      transpose_words(q.row(i0), q.stride, rows, dim, qt, kTileStride);
      return {{qt, kTileStride}, Transpose::no};
    }
  }
  return {{q.row(i0), q.stride}, Transpose::yes};
}

// The forward's scores, transposed: sᵀ[c·kTileStride + r] is s[r·kTileStride + c] of scores_tile.
template <class T, class C = compute_t<T>>
void transposed_scores_tile(const Queries<T>& queries, Rows<const T> k, C* st, std::size_t b, std::size_t i0,
                            std::size_t rows, std::size_t j0, std::size_t cols, const AttentionShape& shape,
                            const AttentionParams& p) {
  const Rows<const T> keys{k.row(j0), k.stride};
  if (queries.op == Transpose::yes)
    rows_by_rows<T>(cols, rows, shape.head_dim, static_cast<C>(p.scale), keys, queries.q, st);
  else if constexpr (std::is_same_v<T, float>)  // Qᵀ as stored: queries_operand's f32 path
    gemm_small<float>(Transpose::no, Transpose::no, cols, rows, shape.head_dim, static_cast<float>(p.scale), keys.at,
                      keys.stride, queries.q.at, queries.q.stride, 0.0f, st, kTileStride);
  mask_tile(st, 1, kTileStride, b, i0, rows, j0, cols, p);
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
void attention_forward(const T* q, const T* k, const T* v, T* out, compute_t<T>* lse, const AttentionShape& shape,
                       const AttentionParams& p) {
  using C = compute_t<T>;
  const std::size_t L = shape.q_len, S = shape.kv_len, E = shape.head_dim, Ev = shape.value_dim;
  const std::size_t tiles = (L + kQueryTile - 1) / kQueryTile;
  const C keep_scale = dropout_scale<C>(p.dropout_p);
  for_each_task(shape.batch * tiles, static_cast<double>(kQueryTile * S * (E + Ev)), [&](std::size_t task) {
    const std::size_t b = task / tiles, i0 = task % tiles * kQueryTile, rows = std::min(kQueryTile, L - i0);
    const Rows<const T> qb = rows_of(q, shape, b, L, E, shape.q_stride),
                        kb = rows_of(k, shape, b, S, E, shape.kv_stride),
                        vb = rows_of(v, shape, b, S, Ev, shape.kv_stride);
    C* st = scratch<C>(Scratch::scores);  // keys by queries (Note [the forward's transposed scores])
    T* rounded = std::is_same_v<T, C> ? nullptr : scratch<T>(Scratch::rounded);
    const Queries<T> queries = queries_operand(qb, i0, rows, E);
    alignas(64) C m[kQueryTile], l[kQueryTile], rescale[kQueryTile];
    std::fill_n(m, rows, kMinusInfinity<C>);
    std::fill_n(l, rows, C(0));
    // The output rows, normalized at the end: written by the first key tile's product (β = 0),
    // summed into by the others.
    const Sums<T> sums(rows_of(out, shape, b, L, Ev), i0, rows, Ev, Scratch::sums0);
    C* acc = sums.rows().at;
    const std::size_t ld = sums.rows().stride;
    const std::size_t seen = keys_seen(i0, rows, shape, p);
    if (seen == 0)
      for (std::size_t r = 0; r < rows; ++r) std::fill(acc + r * ld, acc + r * ld + Ev, C(0));
    for (std::size_t j0 = 0; j0 < seen; j0 += kKeyTile) {
      const std::size_t cols = std::min(kKeyTile, seen - j0);
      transposed_scores_tile(queries, kb, st, b, i0, rows, j0, cols, shape, p);
      softmax_tile(st, kTileStride, cols, rows, m, l, rescale);
      if (p.dropout_p > 0.0f)
        for (std::size_t c = 0; c < cols; ++c)
          for (std::size_t r = 0; r < rows; ++r) {
            C& x = st[c * kTileStride + r];
            x = dropped(x, b, i0 + r, j0 + c, shape, p, keep_scale);
          }
      for (std::size_t r = 0; r < rows && j0 > 0; ++r)
        if (rescale[r] != C(1))
          for (std::size_t x = 0; x < Ev; ++x) acc[r * ld + x] *= rescale[r];
      tile_by_rows<T>(Transpose::yes, rows, Ev, cols, operand<T>(st, cols, rows, rounded), {vb.row(j0), vb.stride},
                      j0 == 0 ? C(0) : C(1), acc, ld);
    }
    for (std::size_t r = 0; r < rows; ++r) {
      const C inverse = l[r] > C(0) ? C(1) / l[r] : C(0);
      for (std::size_t x = 0; x < Ev; ++x) acc[r * ld + x] *= inverse;
      lse[b * L + i0 + r] = l[r] > C(0) ? m[r] + std::log(l[r]) : kMinusInfinity<C>;
    }
    sums.finish();
  });
}

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* dout, const compute_t<T>* lse, T* dq,
                        T* dk, T* dv, const AttentionShape& shape, const AttentionParams& p) {
  using C = compute_t<T>;
  const std::size_t L = shape.q_len, S = shape.kv_len, E = shape.head_dim, Ev = shape.value_dim;
  const C keep_scale = dropout_scale<C>(p.dropout_p);
  const C scale = static_cast<C>(p.scale);
  for_each_task(shape.batch, static_cast<double>(L * S * (2 * E + 2 * Ev)), [&](std::size_t b) {
    const std::size_t q_stride = shape.q_stride, kv_stride = shape.kv_stride;
    const Rows<const T> qb = rows_of(q, shape, b, L, E, q_stride), kb = rows_of(k, shape, b, S, E, kv_stride),
                        vb = rows_of(v, shape, b, S, Ev, kv_stride), ob = rows_of(out, shape, b, L, Ev),
                        dob = rows_of(dout, shape, b, L, Ev);
    const Sums<T> dq_sums(rows_of(dq, shape, b, L, E, q_stride), 0, L, E, Scratch::sums0),
        dk_sums(rows_of(dk, shape, b, S, E, kv_stride), 0, S, E, Scratch::sums1),
        dv_sums(rows_of(dv, shape, b, S, Ev, kv_stride), 0, S, Ev, Scratch::sums2);
    const Rows<C> dqb = dq_sums.rows(), dkb = dk_sums.rows(), dvb = dv_sums.rows();
    const C* lb = lse + b * L;
    // The gradients are not zeroed first: each tile's first product writes them (β = 0), the later
    // ones add to them. dQ's first is at key tile 0, which every query tile sees; dK's and dV's at
    // the first query tile the loop visits, and rows that no query tile sees are zeroed.
    const auto zero_rows = [](Rows<C> rows, std::size_t first, std::size_t last, std::size_t dim) {
      for (std::size_t i = first; i < last; ++i) std::fill(rows.row(i), rows.row(i) + dim, C(0));
    };
    if (S == 0) zero_rows(dqb, 0, L, E);
    std::vector<C> d(L);
    C *prob = scratch<C>(Scratch::scores), *dprob = scratch<C>(Scratch::dprob);
    T* rounded = std::is_same_v<T, C> ? nullptr : scratch<T>(Scratch::rounded);
    for (std::size_t i = 0; i < L; ++i) {  // D = rowsum(dO∘O)
      C dot = 0;
      for (std::size_t x = 0; x < Ev; ++x) dot += static_cast<C>(dob.row(i)[x]) * static_cast<C>(ob.row(i)[x]);
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
        const C dkv_beta = i0 == first_i0 ? C(0) : C(1), dq_beta = j0 == 0 ? C(0) : C(1);
        scores_tile(qb, kb, prob, b, i0, rows, j0, cols, shape, p);
        // P (into prob) from the saved lse, and with dropout P̃ (into dprob) for dV.
        for (std::size_t r = 0; r < rows; ++r) {
          C* row = prob + r * kTileStride;
          if (lb[i0 + r] == kMinusInfinity<C>)
            std::fill(row, row + cols, C(0));
          else
            exp_shifted(row, lb[i0 + r], row, cols);
          if (p.dropout_p > 0.0f)
            for (std::size_t c = 0; c < cols; ++c)
              dprob[r * kTileStride + c] = dropped(row[c], b, i0 + r, j0 + c, shape, p, keep_scale);
        }
        tile_by_rows<T>(Transpose::yes, cols, Ev, rows,
                        operand<T>(p.dropout_p > 0.0f ? dprob : prob, rows, cols, rounded), {dob.row(i0), dob.stride},
                        dkv_beta, dvb.row(j0), dvb.stride);
        // dP = (dO·Vᵀ)∘Z/(1 − p), then scale·dS = scale·P∘(dP − D) in place of dP: the scale of
        // dQ = scale·dS·K and dK = scale·dSᵀ·Q taken into the tile both products read.
        rows_by_rows<T>(rows, cols, Ev, C(1), {dob.row(i0), dob.stride}, {vb.row(j0), vb.stride}, dprob);
        for (std::size_t r = 0; r < rows; ++r) {
          C *ds = dprob + r * kTileStride, *pr = prob + r * kTileStride;
          if (p.dropout_p > 0.0f)
            for (std::size_t c = 0; c < cols; ++c)
              ds[c] = scale * (pr[c] * (dropped(ds[c], b, i0 + r, j0 + c, shape, p, keep_scale) - d[i0 + r]));
          else
            for (std::size_t c = 0; c < cols; ++c) ds[c] = scale * (pr[c] * (ds[c] - d[i0 + r]));
        }
        const T* ds = operand<T>(dprob, rows, cols, rounded);
        tile_by_rows<T>(Transpose::no, rows, E, cols, ds, {kb.row(j0), kb.stride}, dq_beta, dqb.row(i0), dqb.stride);
        tile_by_rows<T>(Transpose::yes, cols, E, rows, ds, {qb.row(i0), qb.stride}, dkv_beta, dkb.row(j0), dkb.stride);
      }
    }
    dq_sums.finish();
    dk_sums.finish();
    dv_sums.finish();
  });
}

#define EMBER_ATTENTION_INSTANTIATE(T)                                                                               \
  template void attention_forward<T>(const T*, const T*, const T*, T*, compute_t<T>*, const AttentionShape&,         \
                                     const AttentionParams&);                                                        \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*, const compute_t<T>*, T*, T*, \
                                      T*, const AttentionShape&, const AttentionParams&);
EMBER_ATTENTION_INSTANTIATE(float)
EMBER_ATTENTION_INSTANTIATE(double)
EMBER_ATTENTION_INSTANTIATE(bfloat16)
#undef EMBER_ATTENTION_INSTANTIATE

}  // namespace ember::kernels::cpu
