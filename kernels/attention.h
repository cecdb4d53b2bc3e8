// Fused scaled dot-product attention (FlashAttention's algorithm) over a batch of B independent
// (query, key, value) sets, each [L, E], [S, E] and [S, Ev], row-major and dense:
//   out = softmax(scale·q·kᵀ + mask)·v, with dropout on the probabilities.
// Note [fused attention]
// The forward walks the keys in tiles and keeps, per query row, the running maximum m, the running
// sum l of exp(s − m) and the output rows scaled by the same exp (the online softmax): the [L, S]
// score matrix is never held, only one tile of it per thread. It saves lse = m + log(l) per row.
// The backward recomputes each tile's probabilities from lse, with D = rowsum(dO∘O):
//   dV += P̃ᵀ·dO,  dP = (dO·Vᵀ)∘Z/(1 − p),  dS = P∘(dP − D),  dQ += scale·dS·K,  dK += scale·dSᵀ·Q
// where P̃ = P∘Z/(1 − p) is what the forward multiplied V by (Z the dropout's keep mask; P itself,
// undropped, normalizes). No float is added atomically, so every run gives the same bits: on the
// CPU each batch element's backward runs on one thread in a fixed tile order; on the GPU dK and dV
// are summed over the queries by one pass and dQ over the keys by another (FlashAttention-2 adds dQ
// atomically instead), each element by one lane in order.
// A row whose scores are all −∞ (masked everywhere) has l = 0: its output is 0, its lse −∞ and its
// gradients 0, as PyTorch's _safe_softmax gives since 2.5. A large finite negative additive mask is
// not "masked": such a row is a softmax like any other.
// Dropout keeps probability (b, i, j) when dropout_keeps(seed, offset + (b·L + i)·S + j, p): the
// element index of the [B, L, S] probabilities, so the reference path (dropout() on that tensor)
// drops the same ones, whatever the tiling and the thread count.
// Both devices compute these formulas; the GPU's kernels (kernels/cuda/attention.cu) take f32 rows
// of at most kMaxFusedHeadDim values (head_dim and value_dim), and the op sends wider ones down its
// reference path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common.h"
#include "kernels/elementwise_math.h"

namespace ember::kernels {

struct AttentionShape {
  std::size_t batch = 0, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;  // B, L, S, E, Ev
  // 0: each batch element's rows are dense, as above. H > 0 (the CPU's kernels only): q, k, v, out
  // and their gradients hold the heads side by side in each row, as a projection gives them —
  // [N, L, H·E] and so on, batch element b = n·H + h — and lse stays [B, L]. Then q_stride,
  // kv_stride: the distance between the rows of q and of k and v (and of their gradients), if not
  // H·E and H·Ev: 3·H·E where q, k and v are the column blocks of one packed projection.
  std::size_t heads_in_rows = 0, q_stride = 0, kv_stride = 0;
};

// Where batch element b's rows of `dim` values start, in a tensor of `len` rows per element, and
// the distance between its rows (`stride`, if not dense).
struct AttentionRows {
  std::size_t start, stride;
};
inline AttentionRows attention_rows(const AttentionShape& shape, std::size_t b, std::size_t len, std::size_t dim,
                                    std::size_t stride = 0) {
  const std::size_t heads = shape.heads_in_rows;
  if (heads == 0) return {b * len * dim, dim};
  if (stride == 0) stride = heads * dim;
  return {(b / heads) * len * stride + (b % heads) * dim, stride};
}

// The widest head the GPU's fused kernels take: each warp spreads a row over its 32 lanes, at most
// 4 values each, in registers.
constexpr std::size_t kMaxFusedHeadDim = 128;
constexpr bool cuda_attention_fits(const AttentionShape& shape) {
  return shape.head_dim <= kMaxFusedHeadDim && shape.value_dim <= kMaxFusedHeadDim;
}

enum class AttentionMaskKind : std::uint8_t { none, boolean, additive };

// The mask as a strided view of [B, L, S]: element (b, i, j) at data[batch_offsets[b] +
// i·row_stride + j·col_stride] (strides 0 where it broadcasts). Boolean: u8, nonzero = attend.
// Additive: the element type, added to the scaled scores.
struct AttentionMask {
  AttentionMaskKind kind = AttentionMaskKind::none;
  const void* data = nullptr;
  const std::size_t* batch_offsets = nullptr;  // B entries
  std::size_t row_stride = 0, col_stride = 0;
};

struct AttentionParams {
  AttentionMask mask;
  bool causal = false;  // key j attends to query i only when j ≤ i (top-left aligned, as PyTorch)
  double scale = 1.0;
  float dropout_p = 0.0f;
  std::uint64_t seed = 0, offset = 0;
};

}  // namespace ember::kernels

namespace ember::kernels::cpu {

// out [B, L, Ev] and lse [B, L] (−∞ for a fully masked row). T: float, double, or bfloat16 with
// f32 softmax statistics (lse) and an f32 additive mask (Note [bf16 attention] in
// kernels/cpu/attention.cpp).
template <class T>
void attention_forward(const T* q, const T* k, const T* v, T* out, compute_t<T>* lse, const AttentionShape& shape,
                       const AttentionParams& params);
// dq, dk, dv (overwritten) from dout and the forward's out and lse.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* dout, const compute_t<T>* lse, T* dq,
                        T* dk, T* dv, const AttentionShape& shape, const AttentionParams& params);

}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {

// As the CPU's, in f32 on `stream`; the mask's batch_offsets are in device memory. The backward
// also takes row_dot, [B, L] floats of scratch for D = rowsum(dO∘O).
void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const AttentionShape& shape, const AttentionParams& params, cudaStream_t stream);
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* dout,
                        const float* lse, float* row_dot, float* dq, float* dk, float* dv, const AttentionShape& shape,
                        const AttentionParams& params, cudaStream_t stream);

}  // namespace ember::kernels::cuda
