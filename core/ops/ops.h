// The functional API: every op users call, on the CPU or a CUDA device alike. Differentiable ops
// record themselves for autograd when an input requires grad (see core/tensor/autograd.h); docs/ops.md
// lists them with their backends and derivative rules. Ops that fuse several of these into one
// pass live apart, in core/ops/fused.h (namespace ember::fused).
//
// Every op checks that its tensors share one device and throws DeviceError naming the op and
// the argument otherwise; dtype and shape mismatches throw DTypeError / ShapeError naming both
// sides. Floating-point ops take f32 on every backend and f64 on the CPU.
#pragma once

#include <concepts>
#include <optional>
#include <span>
#include <vector>

#include "core/tensor/tensor.h"
#include "kernels/elementwise_math.h"

namespace ember {

// Elementwise arithmetic with NumPy-style broadcasting; gradients are summed back to each
// input's shape.
Tensor add(const Tensor& input, const Tensor& other);
Tensor sub(const Tensor& input, const Tensor& other);
Tensor mul(const Tensor& input, const Tensor& other);
Tensor div(const Tensor& input, const Tensor& other);
// With a scalar: input·scale + shift covers +, −, · and / by a number.
Tensor add(const Tensor& input, double other);
Tensor mul(const Tensor& input, double other);
Tensor affine(const Tensor& input, double scale, double shift);

Tensor neg(const Tensor& input);
Tensor exp(const Tensor& input);
Tensor log(const Tensor& input);
Tensor sqrt(const Tensor& input);
Tensor pow(const Tensor& input, double exponent);
// The activations without arguments, one function each: sigmoid, tanh, relu, erf, gelu (exact:
// x·Φ(x), Φ the standard normal CDF), rsqrt (1/√x),
// abs (gradient sign(x), 0 at 0, as PyTorch's) and the rest of EMBER_ACTIVATIONS in
// kernels/elementwise_math.h (Note [op lists]); docs/ops.md gives each one's formula.
#define EMBER_DECLARE_ACTIVATION(name, ...) Tensor name(const Tensor& input);
EMBER_ACTIVATIONS(EMBER_DECLARE_ACTIVATION)
#undef EMBER_DECLARE_ACTIVATION
// x for x > 0, negative_slope·x otherwise (PyTorch's leaky_relu; −0 stays −0).
Tensor leaky_relu(const Tensor& input, double negative_slope = 0.01);
// Each element limited to [min, max] (either bound may be ±∞); gradient 1 inside, bounds included.
Tensor clamp(const Tensor& input, double min, double max);
// Elementwise extremes with broadcasting; NaN propagates; a tie splits the gradient in halves.
Tensor maximum(const Tensor& input, const Tensor& other);
Tensor minimum(const Tensor& input, const Tensor& other);
// cond ? input : other, elementwise with broadcasting; cond is u8 (nonzero: true, as a
// comparison's result) or any dtype compared with 0. No gradient flows to cond.
Tensor where(const Tensor& cond, const Tensor& input, const Tensor& other);
// Comparisons with broadcasting, as u8 masks of 1 and 0 (not differentiable); NaN compares false
// except in ne.
Tensor gt(const Tensor& input, const Tensor& other);
Tensor lt(const Tensor& input, const Tensor& other);
Tensor ge(const Tensor& input, const Tensor& other);
Tensor le(const Tensor& input, const Tensor& other);
Tensor eq(const Tensor& input, const Tensor& other);
Tensor ne(const Tensor& input, const Tensor& other);
Tensor gt(const Tensor& input, double other);
Tensor lt(const Tensor& input, double other);

// Matrix products. matmul as torch.matmul: [m, k]·[k, n] → [m, n]; [..., m, k]·[..., k, n] →
// [..., m, n] with the batch dims broadcast (one product per batch element); a 1-D input is a row
// and a 1-D other a column, their added dim dropped from the result. linear: input [..., in] ·
// weightᵀ (weight is [out, in], PyTorch's layout) + bias [out] → [..., out]; bias may be undefined.
Tensor matmul(const Tensor& input, const Tensor& other);
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());
Tensor transpose(const Tensor& input);  // swaps the last two dims (a copy)

// Convolutional networks, NCHW. conv2d: cross-correlation of input [N, C, H, W] with weight
// [K, C, KH, KW] (+ bias [K]) → [N, K, OH, OW], zero padding. max_pool2d: window `kernel`,
// `stride` (0: the kernel size). batch_norm over (N, H, W) per channel: in training it normalizes
// with the batch's statistics and moves running_mean/running_var (updated in place) by
// `momentum`; in evaluation it uses the running statistics.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), int stride = 1,
              int padding = 0);
Tensor max_pool2d(const Tensor& input, int kernel, int stride = 0);
Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
// F.layer_norm: each input's trailing `normalized_shape` normalized by its own mean and biased
// variance, then times weight plus bias (that shape; either may be undefined). One kernel per
// direction (kernels/layer_norm.h).
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// F.embedding: out[..., :] = weight[input[...], :], input i64 or i32 of any shape, weight
// [num_embeddings, embedding_dim] → input's shape + [embedding_dim]. Only weight gets a gradient;
// the padding_idx row (negative: from the end) gets none. An index outside [0, num_embeddings)
// throws IndexError (on CUDA at the next synchronization, its row of the output zero). The
// gradient is summed in the same order on both devices, without atomics: the same bits
// (Note [deterministic embedding gradient] in kernels/embedding.h).
Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<std::int64_t> padding_idx = std::nullopt);

// Attention as torch.nn.functional.scaled_dot_product_attention (PyTorch 2.15's semantics):
// softmax(scale·q·kᵀ + mask)·v over q [..., L, E], k [..., S, E], v [..., S, Ev] with equal batch
// dims → [..., L, Ev]. attn_mask broadcasts to [..., L, S]: u8 (nonzero = attend, as PyTorch's
// bool masks; the opposite of nn.MultiheadAttention's) or q's dtype (added to the scores), and gets
// no gradient. is_causal lets query i see keys j ≤ i (top-left aligned when L ≠ S); a mask
// together with is_causal is an error. scale defaults to 1/√E. Dropout on the probabilities when
// dropout_p > 0, from (dropout_seed, dropout_offset) as dropout() draws it on the [..., L, S]
// probabilities. A row masked everywhere gives output 0 and gradient 0. On the CPU it runs fused
// (Note [fused attention] in kernels/attention.h: memory linear in L and S); elsewhere, and in
// scaled_dot_product_attention_reference, as matmul → softmax → dropout → matmul.
struct AttentionOptions {
  Tensor attn_mask = {};
  double dropout_p = 0.0;
  bool is_causal = false;
  std::optional<double> scale = std::nullopt;
  std::uint64_t dropout_seed = 0, dropout_offset = 0;
};
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionOptions& options = {});
Tensor scaled_dot_product_attention_reference(const Tensor& query, const Tensor& key, const Tensor& value,
                                              const AttentionOptions& options = {});
// The same attention over heads side by side in each row, as a projection gives them: query
// [N, L, H·E], key [N, S, H·E], value [N, S, H·Ev] → [N, L, H·Ev], H = heads. Its values are those
// of splitting the heads out (reshape to [N, L, H, E], permute to [N, H, L, E]), attending with the
// same options (attn_mask broadcasts to [N, H, L, S]) and merging them back; on the CPU the fused
// kernels read and write the rows in place, without those four copies (nn::MultiheadAttention's
// path; PyTorch's reaches its fused kernel through views).
Tensor scaled_dot_product_attention_heads(const Tensor& query, const Tensor& key, const Tensor& value,
                                          std::int64_t heads, const AttentionOptions& options = {});
// The heads' op on one tensor holding query, key and value side by side in each row, as one
// packed projection gives them (self-attention): qkv [N, L, 3·H·E] → [N, L, H·E]; its gradient
// is one tensor of qkv's shape, written in place by the CPU's fused kernels.
Tensor scaled_dot_product_attention_qkv(const Tensor& qkv, std::int64_t heads, const AttentionOptions& options = {});
// The reference path's probabilities, softmax(q·kᵀ·scale + mask) after dropout, [..., L, S]: what
// the output is the product of with value (nn::MultiheadAttention's weights).
Tensor scaled_dot_product_attention_weights(const Tensor& query, const Tensor& key,
                                            const AttentionOptions& options = {});

// Dropout: zeroes each element with probability p and scales the rest by 1/(1 − p). Which
// elements drop is a function of (seed, offset + element index), the same on every device.
Tensor dropout(const Tensor& input, double p, std::uint64_t seed, std::uint64_t offset);

// Shapes.
Tensor reshape(const Tensor& input, Shape shape);
Tensor unsqueeze(const Tensor& input, int dim);  // a dim of size 1 inserted at dim (a view)
// The dims reordered: dim i of the result is dim dims[i] of the input (a copy, as transpose).
Tensor permute(const Tensor& input, const std::vector<int>& dims);
// The input repeated along broadcast dims to `shape` (NumPy's rules; a copy); gradient sum_to.
Tensor broadcast_to(const Tensor& input, const Shape& shape);
Tensor cat(std::span<const Tensor> tensors, int dim = 0);
Tensor cat(std::initializer_list<Tensor> tensors, int dim = 0);
// Elements [start, start+length) along any dim, as a copy (narrow shares storage, on dim 0).
Tensor slice(const Tensor& input, int dim, std::int64_t start, std::int64_t length);

// Reductions. With no dims: over everything, giving a scalar (shape []).
Tensor sum(const Tensor& input);
Tensor sum(const Tensor& input, std::vector<int> dims, bool keepdim = false);
Tensor mean(const Tensor& input);
Tensor mean(const Tensor& input, std::vector<int> dims, bool keepdim = false);
// Variance and standard deviation: Σ(x − mean)²/(N − correction) over everything (a scalar), or
// over the dims given (a non-empty list, as sum's), PyTorch's default correction 1 (Bessel's), 0
// for the biased (population) variance. Call std as ember::std(...): under `using namespace
// ember` a bare std(...) is ambiguous with namespace std.
Tensor var(const Tensor& input);
Tensor std(const Tensor& input);
Tensor var(const Tensor& input, std::vector<int> dims, int correction = 1, bool keepdim = false);
Tensor std(const Tensor& input, std::vector<int> dims, int correction = 1, bool keepdim = false);
// One dim, as PyTorch spells it: sum(x, -1, true), mean(x, 1), var(x, 0). Templates so that a
// braced list of one, sum(x, {0}), still means the list: a braced list deduces no type.
template <std::integral Dim>
Tensor sum(const Tensor& input, Dim dim, bool keepdim = false) {
  return sum(input, std::vector<int>{static_cast<int>(dim)}, keepdim);
}
template <std::integral Dim>
Tensor mean(const Tensor& input, Dim dim, bool keepdim = false) {
  return mean(input, std::vector<int>{static_cast<int>(dim)}, keepdim);
}
template <std::integral Dim>
Tensor var(const Tensor& input, Dim dim, int correction = 1, bool keepdim = false) {
  return var(input, std::vector<int>{static_cast<int>(dim)}, correction, keepdim);
}
template <std::integral Dim>
Tensor std(const Tensor& input, Dim dim, int correction = 1, bool keepdim = false) {
  return std(input, std::vector<int>{static_cast<int>(dim)}, correction, keepdim);
}
// Sums `input` down to `shape` (which it must broadcast from): broadcasting's backward.
Tensor sum_to(const Tensor& input, const Shape& shape);

// Softmax family over any dim (the last is the fast path; others go through a permuted copy).
Tensor softmax(const Tensor& input, int dim = -1);
Tensor log_softmax(const Tensor& input, int dim = -1);
// Mean softmax cross-entropy of logits [B, C] against class indices [B] (i32 or i64), fused.
// A target outside [0, C) throws IndexError — on CUDA at the next synchronization.
Tensor cross_entropy(const Tensor& input, const Tensor& target);
// With label smoothing ε (PyTorch's label_smoothing): the target spread as (1 − ε) on the class
// and ε/C on every class, so the loss is (1 − ε)·cross_entropy + ε·mean over classes and rows of
// −log_softmax. Composed of the ops above (their gradients and kernels); ε = 0 is cross_entropy.
Tensor cross_entropy(const Tensor& input, const Tensor& target, double label_smoothing);
// F.cross_entropy's arguments beyond the logits and targets (core/ops/criteria.cpp).
struct CrossEntropyOptions {
  Tensor weight = Tensor();  // a weight per class, [C] (undefined: 1 for every class)
  // Rows whose target is this are left out of the loss and of the mean's count; unset, every row
  // counts and a target outside [0, C) is an error. (PyTorch's default, −100, is a value no class
  // index takes: give it to ignore such rows.)
  std::optional<std::int64_t> ignore_index = std::nullopt;
  double label_smoothing = 0.0;
};
// PyTorch's formulas with its mean reduction: Σᵢ w[tᵢ]·ℓᵢ / Σᵢ w[tᵢ] over the rows not ignored,
// where ℓᵢ = (1 − ε)·(−log_softmax(x)ᵢ,ₜᵢ) + (ε/C)·Σ_c w[c]/w[tᵢ]·(−log_softmax(x)ᵢ,c). With no
// weight and no ignore_index it is cross_entropy(input, target, label_smoothing) (the fused kernel);
// else composed of log_softmax, embedding (which checks the targets), mul and sum.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options);
// F.nll_loss: −Σᵢ w[tᵢ]·input[i, tᵢ] / Σᵢ w[tᵢ] over the rows not ignored, input [B, C] (log
// probabilities), target [B] class indices. Composed as above.
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                std::optional<std::int64_t> ignore_index = std::nullopt);
// F.mse_loss: the mean of (input − target)² over every element; the shapes must be equal.
Tensor mse_loss(const Tensor& input, const Tensor& target);

// Not differentiable.
Tensor argmax(const Tensor& input, int dim = -1);              // i64, over the last dim
Tensor max(const Tensor& input, int dim = -1);                 // values over the last dim
Tensor count_equal(const Tensor& input, const Tensor& other);  // i64 scalar
// Fraction of rows whose argmax equals the target, as an f32 scalar on the input's device
// (read it with item() when you need it: that synchronizes).
Tensor accuracy(const Tensor& logits, const Tensor& target);
// u8 pixels → f32 (x/255 − mean)/std, on the input's device.
Tensor normalize_u8(const Tensor& input, float mean = 0.0f, float std = 1.0f);
// The same into `out` (f32, as many elements as `input`, on its device).
void normalize_u8(const Tensor& input, const Tensor& out, float mean, float std);
// The data pipeline's batch gather, on the tensors' device: x[r] = (images[index[r]]/255 − mean)/std
// and y[r] = labels[index[r]] for each row r of `index` (i32). images u8 [N, ...] and labels i32
// [N] as one dataset; x f32 [rows, ...] and y i32 [rows] are written.
void gather_batch(const Tensor& images, const Tensor& labels, const Tensor& index, Tensor& x, Tensor& y, float mean,
                  float std);

// In place, outside autograd (optimizers, gradient accumulation): input += other (same shape,
// or other broadcast to input's shape); input *= scale.
Tensor& add_(Tensor& input, const Tensor& other);
Tensor& mul_(Tensor& input, double scale);

// Operators.
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double b) { return affine(a, 1.0, b); }
inline Tensor operator+(double a, const Tensor& b) { return affine(b, 1.0, a); }
inline Tensor operator-(const Tensor& a, double b) { return affine(a, 1.0, -b); }
inline Tensor operator-(double a, const Tensor& b) { return affine(b, -1.0, a); }
inline Tensor operator*(const Tensor& a, double b) { return affine(a, b, 0.0); }
inline Tensor operator*(double a, const Tensor& b) { return affine(b, a, 0.0); }
inline Tensor operator/(const Tensor& a, double b) { return affine(a, 1.0 / b, 0.0); }

}  // namespace ember
