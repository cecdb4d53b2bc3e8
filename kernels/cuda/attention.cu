// The GPU's fused attention (Note [fused attention] in kernels/attention.h), f32:
//   - forward: a block takes up to 16 query rows of one batch element (its warps take every fourth
//     row) and walks the keys in tiles of 32, one key per lane, K and V staged in shared memory;
//     a row's tile maximum and sum are warp reductions, and its output values are spread over the
//     warp's lanes, in registers;
//   - backward, in three launches so that no float is added atomically: D = rowsum(dO∘O), one warp
//     per row; dK and dV, a block per group of keys walking the queries in tiles of 32, one query per
//     lane; dQ, a block per group of queries walking the keys, one key per lane. Each output element
//     is summed by one lane in a fixed order: the same bits on every run and every schedule.
// Rows are at most kMaxFusedHeadDim wide (head_dim and value_dim); wider ones take the op's
// reference path. A block's shared memory stays within the 48 KiB every launch may use.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/dropout.h"

namespace ember::kernels::cuda {
namespace {

constexpr unsigned kWarps = 4, kThreads = kWarps * kWarp;
constexpr unsigned kTile = kWarp;                           // keys (or queries) per tile: one per lane
constexpr unsigned kMaxRowsPerWarp = 4;                     // so a block holds at most 16 rows
constexpr unsigned kMaxPerLane = kMaxFusedHeadDim / kWarp;  // a row's values, spread over the lanes
constexpr std::size_t kSharedLimit = 48 * 1024;
constexpr unsigned kFullMask = 0xffffffffu;

// Everything a kernel needs but the pointers, which travel as arguments of their own (so that a
// runtime checking each launch's memory sees them all: Note [launching kernels]).
struct Geometry {
  std::size_t batch, q_len, kv_len, head_dim, value_dim;
  std::size_t mask_row_stride, mask_col_stride;
  bool causal;
  float scale, dropout_p, keep_scale;
  std::uint64_t seed, offset;
};

// The mask's data: `keep` (u8, nonzero = attend) or `add` (added to the scaled score), or neither.
// Kernels take the three pointers as arguments of their own and make this inside.
struct MaskData {
  const std::uint8_t* keep;
  const float* add;
  const std::size_t* batch_offsets;
};

// The scaled, masked score of query i and key j of batch element b, from their dot product.
__device__ float masked_score(float dot, std::size_t b, std::size_t i, std::size_t j, const Geometry& g,
                              const MaskData& m) {
  if (g.causal && j > i) return -INFINITY;
  float s = dot * g.scale;
  if (m.keep || m.add) {
    const std::size_t at = m.batch_offsets[b] + i * g.mask_row_stride + j * g.mask_col_stride;
    if (m.keep) {
      if (m.keep[at] == 0) return -INFINITY;
    } else {
      s += m.add[at];
    }
  }
  return s;
}

// x times the dropout's keep/(1 − p) for probability (b, i, j): its counter is the element index
// of the [B, L, S] probabilities, as on the CPU.
__device__ float dropped(float x, std::size_t b, std::size_t i, std::size_t j, const Geometry& g) {
  if (g.dropout_p <= 0.0f) return x;
  const std::uint64_t counter = (static_cast<std::uint64_t>(b) * g.q_len + i) * g.kv_len + j;
  return dropout_apply(dropout_keeps(g.seed, g.offset + counter, g.dropout_p), x, g.keep_scale);
}

// Σ a[e]·b[e] over n values, in order.
__device__ float dot(const float* a, const float* b, std::size_t n) {
  float sum = 0.0f;
  for (std::size_t e = 0; e < n; ++e) sum += a[e] * b[e];
  return sum;
}

// Copies `rows` dense rows of `width` floats into shared memory at a row stride of `stride`
// (width + 1 where lanes read down a column: the padding puts each lane on a bank of its own).
__device__ void stage_rows(float* to, std::size_t stride, const float* from, std::size_t rows, std::size_t width) {
  for (std::size_t idx = threadIdx.x; idx < rows * width; idx += blockDim.x)
    to[idx / width * stride + idx % width] = from[idx];
}

// acc[u] += Σ_c weight_c · rows[c·stride + lane + u·32] over the tile's `count` rows, where lane c
// holds weight_c: every lane adds up its own values, in the tile's order.
__device__ void accumulate(float (&acc)[kMaxPerLane], float weight, const float* rows, std::size_t stride,
                           std::size_t count, std::size_t width, unsigned lane) {
  for (unsigned c = 0; c < count; ++c) {
    const float w = __shfl_sync(kFullMask, weight, static_cast<int>(c));
#pragma unroll
    for (unsigned u = 0; u < kMaxPerLane; ++u) {
      const std::size_t x = lane + u * kWarp;
      if (x < width) acc[u] += w * rows[c * stride + x];
    }
  }
}

// The rows of one batch element that this block takes: [first, first + count) of `length`, in
// groups of block_rows (the grid is batch × ⌈length / block_rows⌉ blocks).
struct BlockRows {
  std::size_t b, first, count;
};
__device__ BlockRows rows_of_block(std::size_t length, unsigned block_rows) {
  const std::size_t groups = ceil_div(length, block_rows);
  const std::size_t first = blockIdx.x % groups * block_rows;
  return {blockIdx.x / groups, first, length - first < block_rows ? length - first : block_rows};
}

__global__ void attention_forward_kernel(const float* q, const float* k, const float* v, float* out, float* lse,
                                         Geometry g, const std::uint8_t* mask_keep, const float* mask_add,
                                         const std::size_t* mask_offsets, unsigned block_rows) {
  const MaskData m{mask_keep, mask_add, mask_offsets};
  const std::size_t E = g.head_dim, Ev = g.value_dim, L = g.q_len;
  const auto [b, i0, rows] = rows_of_block(L, block_rows);
  const unsigned warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* qs = dynamic_shared<float>();  // [block_rows][E]
  float* ks = qs + block_rows * E;      // [kTile][E + 1]
  float* vs = ks + kTile * (E + 1);     // [kTile][Ev]
  stage_rows(qs, E, q + (b * L + i0) * E, rows, E);
  float row_max[kMaxRowsPerWarp], row_sum[kMaxRowsPerWarp], acc[kMaxRowsPerWarp][kMaxPerLane];
#pragma unroll
  for (unsigned t = 0; t < kMaxRowsPerWarp; ++t) {
    row_max[t] = -INFINITY;
    row_sum[t] = 0.0f;
#pragma unroll
    for (unsigned u = 0; u < kMaxPerLane; ++u) acc[t][u] = 0.0f;
  }
  const std::size_t seen = g.causal && i0 + rows < g.kv_len ? i0 + rows : g.kv_len;
  for (std::size_t j0 = 0; j0 < seen; j0 += kTile) {
    const std::size_t cols = seen - j0 < kTile ? seen - j0 : kTile;
    __syncthreads();  // the last tile's readers are done
    stage_rows(ks, E + 1, k + (b * g.kv_len + j0) * E, cols, E);
    stage_rows(vs, Ev, v + (b * g.kv_len + j0) * Ev, cols, Ev);
    __syncthreads();
#pragma unroll
    for (unsigned t = 0; t < kMaxRowsPerWarp; ++t) {
      const std::size_t r = warp + t * kWarps, i = i0 + r;
      if (r >= rows) break;  // r is the warp's, not the lane's: the whole warp leaves together
      const float s =
          lane < cols ? masked_score(dot(qs + r * E, ks + lane * (E + 1), E), b, i, j0 + lane, g, m) : -INFINITY;
      const float new_max = fmaxf(row_max[t], warp_max(s));
      if (new_max == -INFINITY) continue;                // nothing to attend to yet: this tile adds nothing
      const float rescale = expf(row_max[t] - new_max);  // 0 while the maximum was −∞
      const float probability = expf(s - new_max);       // 0 for a masked key and past the last key
      row_sum[t] = row_sum[t] * rescale + warp_sum(probability);
      row_max[t] = new_max;
#pragma unroll
      for (unsigned u = 0; u < kMaxPerLane; ++u) acc[t][u] *= rescale;
      const float weight = lane < cols ? dropped(probability, b, i, j0 + lane, g) : 0.0f;
      accumulate(acc[t], weight, vs, Ev, cols, Ev, lane);
    }
  }
#pragma unroll
  for (unsigned t = 0; t < kMaxRowsPerWarp; ++t) {
    const std::size_t r = warp + t * kWarps, i = i0 + r;
    if (r >= rows) break;
    const float inverse = row_sum[t] > 0.0f ? 1.0f / row_sum[t] : 0.0f;
#pragma unroll
    for (unsigned u = 0; u < kMaxPerLane; ++u) {
      const std::size_t x = lane + u * kWarp;
      if (x < Ev) out[(b * L + i) * Ev + x] = acc[t][u] * inverse;
    }
    if (lane == 0) lse[b * L + i] = row_sum[t] > 0.0f ? row_max[t] + logf(row_sum[t]) : -INFINITY;
  }
}

// D[row] = Σ dO[row]∘O[row], one warp per row.
__global__ void attention_row_dot_kernel(const float* out, const float* dout, float* d, std::size_t rows,
                                         std::size_t width) {
  const std::size_t row = global_thread() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  float sum = 0.0f;
  for (std::size_t x = lane; x < width; x += kWarp) sum += dout[row * width + x] * out[row * width + x];
  sum = warp_sum(sum);
  if (lane == 0) d[row] = sum;
}

// Probability (b, i, j) recomputed from the forward's lse, and dS = P∘(dP̃·Z/(1 − p) − D), from
// the dot products q_i·k_j and dO_i·v_j. Writes P̃ (what the forward weighted v_j by) to `weight`.
struct Recomputed {
  float weight, ds;
};
__device__ Recomputed recompute(float qk, float dov, std::size_t b, std::size_t i, std::size_t j, float row_lse,
                                float row_d, const Geometry& g, const MaskData& m) {
  const float s = masked_score(qk, b, i, j, g, m);
  const float probability = row_lse == -INFINITY ? 0.0f : expf(s - row_lse);
  return {dropped(probability, b, i, j, g), probability * (dropped(dov, b, i, j, g) - row_d)};
}

// The backward kernels' shared memory: the block's own rows, E then Ev wide (keys and values for
// dK and dV, queries and their dO for dQ), then the walked tile's, padded (shared_floats below).
struct BackwardShared {
  float *own_e, *own_ev, *tile_e, *tile_ev;  // [block_rows][E], [block_rows][Ev], [kTile][E + 1], [kTile][Ev + 1]
};
__device__ BackwardShared backward_shared(unsigned block_rows, std::size_t E, std::size_t Ev) {
  float* own_e = dynamic_shared<float>();
  float* own_ev = own_e + block_rows * E;
  float* tile_e = own_ev + block_rows * Ev;
  return {own_e, own_ev, tile_e, tile_e + kTile * (E + 1)};
}

// dK and dV of up to block_rows keys of one batch element, walking the queries (from the first
// that can see them) in tiles of 32, one query per lane.
__global__ void attention_backward_kv_kernel(const float* q, const float* k, const float* v, const float* dout,
                                             const float* lse, const float* d, float* dk, float* dv, Geometry g,
                                             const std::uint8_t* mask_keep, const float* mask_add,
                                             const std::size_t* mask_offsets, unsigned block_rows) {
  const MaskData m{mask_keep, mask_add, mask_offsets};
  const std::size_t E = g.head_dim, Ev = g.value_dim, L = g.q_len, S = g.kv_len;
  const auto [b, j0, keys] = rows_of_block(S, block_rows);
  const unsigned warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const auto [ks, vs, qs, dos] = backward_shared(block_rows, E, Ev);
  stage_rows(ks, E, k + (b * S + j0) * E, keys, E);
  stage_rows(vs, Ev, v + (b * S + j0) * Ev, keys, Ev);
  float dk_acc[kMaxRowsPerWarp][kMaxPerLane] = {}, dv_acc[kMaxRowsPerWarp][kMaxPerLane] = {};
  for (std::size_t i0 = g.causal ? j0 / kTile * kTile : 0; i0 < L; i0 += kTile) {
    const std::size_t count = L - i0 < kTile ? L - i0 : kTile;
    __syncthreads();
    stage_rows(qs, E + 1, q + (b * L + i0) * E, count, E);
    stage_rows(dos, Ev + 1, dout + (b * L + i0) * Ev, count, Ev);
    __syncthreads();
    const std::size_t i = i0 + lane;
    const float row_lse = lane < count ? lse[b * L + i] : -INFINITY, row_d = lane < count ? d[b * L + i] : 0.0f;
#pragma unroll
    for (unsigned t = 0; t < kMaxRowsPerWarp; ++t) {
      const std::size_t r = warp + t * kWarps, j = j0 + r;
      if (r >= keys) break;
      Recomputed p{0.0f, 0.0f};
      if (lane < count)
        p = recompute(dot(qs + lane * (E + 1), ks + r * E, E), dot(dos + lane * (Ev + 1), vs + r * Ev, Ev), b, i, j,
                      row_lse, row_d, g, m);
      accumulate(dv_acc[t], p.weight, dos, Ev + 1, count, Ev, lane);
      accumulate(dk_acc[t], p.ds, qs, E + 1, count, E, lane);
    }
  }
#pragma unroll
  for (unsigned t = 0; t < kMaxRowsPerWarp; ++t) {
    const std::size_t r = warp + t * kWarps, j = j0 + r;
    if (r >= keys) break;
#pragma unroll
    for (unsigned u = 0; u < kMaxPerLane; ++u) {
      const std::size_t x = lane + u * kWarp;
      if (x < E) dk[(b * S + j) * E + x] = dk_acc[t][u] * g.scale;
      if (x < Ev) dv[(b * S + j) * Ev + x] = dv_acc[t][u];
    }
  }
}

// dQ of up to block_rows queries of one batch element, walking the keys in tiles of 32, one key per
// lane.
__global__ void attention_backward_q_kernel(const float* q, const float* k, const float* v, const float* dout,
                                            const float* lse, const float* d, float* dq, Geometry g,
                                            const std::uint8_t* mask_keep, const float* mask_add,
                                            const std::size_t* mask_offsets, unsigned block_rows) {
  const MaskData m{mask_keep, mask_add, mask_offsets};
  const std::size_t E = g.head_dim, Ev = g.value_dim, L = g.q_len;
  const auto [b, i0, rows] = rows_of_block(L, block_rows);
  const unsigned warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const auto [qs, dos, ks, vs] = backward_shared(block_rows, E, Ev);
  stage_rows(qs, E, q + (b * L + i0) * E, rows, E);
  stage_rows(dos, Ev, dout + (b * L + i0) * Ev, rows, Ev);
  float acc[kMaxRowsPerWarp][kMaxPerLane] = {};
  const std::size_t seen = g.causal && i0 + rows < g.kv_len ? i0 + rows : g.kv_len;
  for (std::size_t j0 = 0; j0 < seen; j0 += kTile) {
    const std::size_t cols = seen - j0 < kTile ? seen - j0 : kTile;
    __syncthreads();
    stage_rows(ks, E + 1, k + (b * g.kv_len + j0) * E, cols, E);
    stage_rows(vs, Ev + 1, v + (b * g.kv_len + j0) * Ev, cols, Ev);
    __syncthreads();
#pragma unroll
    for (unsigned t = 0; t < kMaxRowsPerWarp; ++t) {
      const std::size_t r = warp + t * kWarps, i = i0 + r;
      if (r >= rows) break;
      float ds = 0.0f;
      if (lane < cols)
        ds = recompute(dot(qs + r * E, ks + lane * (E + 1), E), dot(dos + r * Ev, vs + lane * (Ev + 1), Ev), b, i,
                       j0 + lane, lse[b * L + i], d[b * L + i], g, m)
                 .ds;
      accumulate(acc[t], ds, ks, E + 1, cols, E, lane);
    }
  }
#pragma unroll
  for (unsigned t = 0; t < kMaxRowsPerWarp; ++t) {
    const std::size_t r = warp + t * kWarps, i = i0 + r;
    if (r >= rows) break;
#pragma unroll
    for (unsigned u = 0; u < kMaxPerLane; ++u) {
      const std::size_t x = lane + u * kWarp;
      if (x < E) dq[(b * L + i) * E + x] = acc[t][u] * g.scale;
    }
  }
}

Geometry geometry_of(const AttentionShape& shape, const AttentionParams& p) {
  return {shape.batch,
          shape.q_len,
          shape.kv_len,
          shape.head_dim,
          shape.value_dim,
          p.mask.row_stride,
          p.mask.col_stride,
          p.causal,
          static_cast<float>(p.scale),
          p.dropout_p,
          dropout_scale<float>(p.dropout_p),
          p.seed,
          p.offset};
}

MaskData mask_data_of(const AttentionMask& mask) {
  return {mask.kind == AttentionMaskKind::boolean ? static_cast<const std::uint8_t*>(mask.data) : nullptr,
          mask.kind == AttentionMaskKind::additive ? static_cast<const float*>(mask.data) : nullptr,
          mask.batch_offsets};
}

// A block's rows (16, else 8 or 4, as the shared memory allows) and the launch for `length` rows
// per batch element, where `shared_floats(rows)` is what a block of that many rows stages.
template <class SharedFloats>
LaunchShape blocks_of_rows(std::size_t batch, std::size_t length, SharedFloats shared_floats, unsigned& rows) {
  rows = kWarps * kMaxRowsPerWarp;
  while (rows > kWarps && shared_floats(rows) * sizeof(float) > kSharedLimit) rows /= 2;
  return {dim3(static_cast<unsigned>(batch * ceil_div(length, rows))), dim3(kThreads),
          shared_floats(rows) * sizeof(float)};
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const AttentionShape& shape, const AttentionParams& params, cudaStream_t stream) {
  if (shape.batch == 0 || shape.q_len == 0) return;
  const std::size_t E = shape.head_dim, Ev = shape.value_dim;
  const MaskData m = mask_data_of(params.mask);
  unsigned rows = 0;
  const LaunchShape launch_shape = blocks_of_rows(
      shape.batch, shape.q_len, [&](std::size_t r) { return r * E + kTile * (E + 1) + kTile * Ev; }, rows);
  launch<attention_forward_kernel>(launch_shape, stream, q, k, v, out, lse, geometry_of(shape, params), m.keep, m.add,
                                   m.batch_offsets, rows);
}

void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* dout,
                        const float* lse, float* row_dot, float* dq, float* dk, float* dv, const AttentionShape& shape,
                        const AttentionParams& params, cudaStream_t stream) {
  if (shape.batch == 0) return;
  const std::size_t E = shape.head_dim, Ev = shape.value_dim, rows_in_all = shape.batch * shape.q_len;
  const Geometry g = geometry_of(shape, params);
  const MaskData m = mask_data_of(params.mask);
  const auto shared_floats = [&](std::size_t r) { return r * (E + Ev) + kTile * (E + 1) + kTile * (Ev + 1); };
  if (rows_in_all > 0)
    launch<attention_row_dot_kernel>(LaunchShape{dim3(static_cast<unsigned>(ceil_div(rows_in_all, kBlock / kWarp)))},
                                     stream, out, dout, row_dot, rows_in_all, Ev);
  unsigned rows = 0;
  if (shape.kv_len > 0) {
    const LaunchShape kv = blocks_of_rows(shape.batch, shape.kv_len, shared_floats, rows);
    launch<attention_backward_kv_kernel>(kv, stream, q, k, v, dout, lse, row_dot, dk, dv, g, m.keep, m.add,
                                         m.batch_offsets, rows);
  }
  if (shape.q_len > 0) {
    const LaunchShape qs = blocks_of_rows(shape.batch, shape.q_len, shared_floats, rows);
    launch<attention_backward_q_kernel>(qs, stream, q, k, v, dout, lse, row_dot, dq, g, m.keep, m.add, m.batch_offsets,
                                        rows);
  }
}

}  // namespace ember::kernels::cuda
