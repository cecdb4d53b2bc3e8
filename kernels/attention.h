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
// undropped, normalizes). Each batch element's backward runs on one thread in a fixed tile order:
// no float atomics, the same bits at any thread count.
// A row whose scores are all −∞ (masked everywhere) has l = 0: its output is 0, its lse −∞ and its
// gradients 0, as PyTorch's _safe_softmax gives since 2.5. A large finite negative additive mask is
// not "masked": such a row is a softmax like any other.
// Dropout keeps probability (b, i, j) when dropout_keeps(seed, offset + (b·L + i)·S + j, p): the
// element index of the [B, L, S] probabilities, so the reference path (dropout() on that tensor)
// drops the same ones, whatever the tiling and the thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common.h"

namespace ember::kernels {

struct AttentionShape {
  std::size_t batch = 0, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;  // B, L, S, E, Ev
};

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

// out [B, L, Ev] and lse [B, L] (−∞ for a fully masked row). T: float or double.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, T* out, T* lse, const AttentionShape& shape,
                       const AttentionParams& params);
// dq, dk, dv (overwritten) from dout and the forward's out and lse.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* dout, const T* lse, T* dq, T* dk,
                        T* dv, const AttentionShape& shape, const AttentionParams& params);

}  // namespace ember::kernels::cpu
