// scaled_dot_product_attention: the fused kernels of kernels/attention.h (both devices), and the
// reference path written with ops (matmul → softmax → dropout → matmul), which tests compare them
// with and which runs the shapes the GPU's fused kernels do not take (heads wider than
// kMaxFusedHeadDim, f64).
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/autocast.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/attention.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;

constexpr const char* kOp = "scaled_dot_product_attention";

struct Dims {
  Shape batch;
  std::int64_t q_len, kv_len, head_dim, value_dim;
};

void check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  ext::check_defined(op, {"query", q});
  ext::check_defined(op, {"key", k});
  ext::check_defined(op, {"value", v});
  ext::check_same_device(op, {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", o.attn_mask}});
  ext::check_same_dtype(op, {"query", q}, {"key", k});
  ext::check_same_dtype(op, {"query", q}, {"value", v});
  ext::check_floating(op, {"query", q});
}

// The checks of the op's arguments, given the shapes of q, k and v as it attends over them (the
// heads split out, for scaled_dot_product_attention_heads).
Dims check_attention(const Tensor& q, const AttentionOptions& o, const Shape& qs, const Shape& ks, const Shape& vs) {
  EMBER_CHECK(qs.size() >= 2 && ks.size() == qs.size() && vs.size() == qs.size(), ShapeError, kOp,
              ": query, key and value need the same number of dims, at least 2 ([..., L, E], [..., S, E], [..., S, "
              "Ev]); got shapes ",
              shape_str(qs), ", ", shape_str(ks), " and ", shape_str(vs));
  const std::size_t nd = qs.size();
  const Shape batch(qs.begin(), qs.end() - 2);
  const bool batches_equal = Shape(ks.begin(), ks.end() - 2) == batch && Shape(vs.begin(), vs.end() - 2) == batch;
  EMBER_CHECK(batches_equal && ks[nd - 1] == qs[nd - 1] && vs[nd - 2] == ks[nd - 2], ShapeError, kOp, ": shapes ",
              shape_str(qs), ", ", shape_str(ks), " and ", shape_str(vs),
              " do not fit [..., L, E], [..., S, E], [..., S, Ev] with the same batch dims (broadcast them first)");
  EMBER_CHECK(o.dropout_p >= 0.0 && o.dropout_p <= 1.0, ValueError, kOp, ": dropout_p must be in [0, 1], got ",
              o.dropout_p);
  const Dims dims{batch, qs[nd - 2], ks[nd - 2], qs[nd - 1], vs[nd - 1]};
  if (!o.attn_mask.defined()) return dims;
  EMBER_CHECK(!o.is_causal, ValueError, kOp,
              ": attn_mask and is_causal together; pass one (a causal mask as attn_mask, or is_causal alone)");
  const Tensor& mask = o.attn_mask;
  EMBER_CHECK(mask.dtype() == DType::u8 || mask.dtype() == q.dtype(), DTypeError, kOp,
              ": attn_mask must be u8 (nonzero: attend) or the query's dtype ", q.dtype(),
              " (added to the scores), not ", mask.dtype());
  EMBER_CHECK(!mask.requires_grad(), ValueError, kOp, ": attn_mask gets no gradient; pass attn_mask.detach()");
  bool fits = mask.dim() <= static_cast<int>(nd);
  for (std::size_t i = 0; fits && i < mask.shape().size(); ++i) {
    const std::int64_t want = (i + 1 == mask.shape().size())   ? dims.kv_len
                              : (i + 2 == mask.shape().size()) ? dims.q_len
                                                               : batch[batch.size() - (mask.shape().size() - 2 - i)];
    const std::int64_t have = mask.shape()[i];
    fits = have == want || have == 1;
  }
  EMBER_CHECK(fits, ShapeError, kOp, ": attn_mask of shape ", shape_str(mask.shape()), " does not broadcast to ",
              shape_str([&] {
                Shape full = batch;
                full.push_back(dims.q_len);
                full.push_back(dims.kv_len);
                return full;
              }()),
              " ([..., L, S])");
  return dims;
}

Dims check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  check_inputs(kOp, q, k, v, o);
  return check_attention(q, o, q.shape(), k.shape(), v.shape());
}

// The mask as the kernels read it: a strided view of [B, L, S] (strides 0 where it broadcasts).
// On CUDA the kernels read the batch offsets from a copy in the mask's device memory.
struct MaskView {
  kernels::AttentionMask mask;
  std::vector<std::size_t> offsets;
  Tensor device_offsets;
};

MaskView mask_view(const Tensor& mask, const Dims& dims) {
  MaskView view;
  if (!mask.defined()) return view;
  Shape full = dims.batch;
  full.push_back(dims.q_len);
  full.push_back(dims.kv_len);
  // Strides of each dim of `full` in the (dense) mask, right-aligned; 0 where the mask has 1.
  std::vector<std::size_t> strides(full.size(), 0);
  std::size_t stride = 1;
  for (std::size_t i = 0; i < mask.shape().size(); ++i) {
    const std::size_t from_end = mask.shape().size() - 1 - i;
    const std::int64_t size = mask.shape()[from_end];
    strides[full.size() - 1 - i] = size == 1 ? 0 : stride;
    stride *= static_cast<std::size_t>(size);
  }
  const std::size_t batch = static_cast<std::size_t>(numel_of(dims.batch));
  view.offsets.resize(batch);
  for (std::size_t b = 0; b < batch; ++b) {
    std::size_t rest = b, offset = 0;
    for (std::size_t d = dims.batch.size(); d-- > 0;) {
      const auto size = static_cast<std::size_t>(dims.batch[d]);
      offset += rest % size * strides[d];
      rest /= size;
    }
    view.offsets[b] = offset;
  }
  const std::size_t* offsets = view.offsets.data();
  if (mask.is_cuda()) {
    static_assert(sizeof(std::size_t) == sizeof(std::int64_t), "the offsets travel as i64");
    const std::vector<std::int64_t> as_i64(view.offsets.begin(), view.offsets.end());
    view.device_offsets =
        from_vector(as_i64, {static_cast<std::int64_t>(batch)}, {.dtype = DType::i64, .device = mask.device()});
    offsets = reinterpret_cast<const std::size_t*>(view.device_offsets.raw<std::int64_t>());
  }
  view.mask = {mask.dtype() == DType::u8 ? kernels::AttentionMaskKind::boolean : kernels::AttentionMaskKind::additive,
               mask.raw_bytes(), offsets, strides[full.size() - 2], strides[full.size() - 1]};
  return view;
}

kernels::AttentionShape kernel_shape(const Dims& d) {
  return {static_cast<std::size_t>(numel_of(d.batch)), static_cast<std::size_t>(d.q_len),
          static_cast<std::size_t>(d.kv_len), static_cast<std::size_t>(d.head_dim),
          static_cast<std::size_t>(d.value_dim)};
}

double scale_of(const AttentionOptions& o, const Dims& d) {
  return o.scale.value_or(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
}

// Whether the fused kernels take these inputs: every shape on the CPU (f32, f64, bf16); f32 heads
// of at most kMaxFusedHeadDim on CUDA.
bool fused_takes(const Tensor& q, const Dims& dims) {
  return !q.is_cuda() || (q.dtype() == DType::f32 && kernels::cuda_attention_fits(kernel_shape(dims)));
}

// What the fused path reads: q, k and v as three tensors, dense ([..., L, E]: the op) or with the
// heads side by side in each row (heads > 0: scaled_dot_product_attention_heads); or one tensor
// whose rows hold q, k and v as column blocks (scaled_dot_product_attention_qkv). The last two on
// the CPU only.
struct Operands {
  std::vector<Tensor> inputs;  // {q, k, v}, or {qkv}: what autograd records
  std::int64_t heads = 0;      // the heads side by side in each row; 0: dense
  bool packed() const { return inputs.size() == 1; }
  const Tensor& q() const { return inputs[0]; }
};

// The kernels' pointers into the operands and into their gradients: q, k and v, or one tensor and
// its column blocks at 0, H·E and 2·H·E.
template <class T>
struct Pointers {
  T *q, *k, *v;
};
template <class T>
Pointers<T> pointers(const Operands& ops, const std::vector<Tensor>& tensors, const Dims& dims) {
  if (!ops.packed()) return {tensors[0].raw<T>(), tensors[1].raw<T>(), tensors[2].raw<T>()};
  T* qkv = tensors[0].raw<T>();
  const std::int64_t block = ops.heads * dims.head_dim;
  return {qkv, qkv + block, qkv + 2 * block};
}

// The fused path, recorded for autograd with its own backward.
Tensor fused(const Operands& ops, const AttentionOptions& o, const Dims& dims) {
  const Tensor& q = ops.q();
  Shape out_shape = dims.batch;
  out_shape.push_back(dims.q_len);
  out_shape.push_back(dims.value_dim);
  if (ops.heads > 0) out_shape = {q.size(0), q.size(1), ops.heads * dims.value_dim};
  Tensor out = ext::new_empty(q, out_shape);
  Shape lse_shape = dims.batch;
  lse_shape.push_back(dims.q_len);
  Tensor lse = ext::new_empty(q, lse_shape, is_half(q.dtype()) ? DType::f32 : q.dtype());  // the compute type
  const Tensor mask = o.attn_mask.defined() ? o.attn_mask.detach() : Tensor();
  kernels::AttentionShape shape = kernel_shape(dims);
  shape.heads_in_rows = static_cast<std::size_t>(ops.heads);
  if (ops.packed()) shape.q_stride = shape.kv_stride = static_cast<std::size_t>(q.size(2));
  // Everything but the mask's view, which points into memory each call makes for itself.
  const kernels::AttentionParams params{
      {}, o.is_causal, scale_of(o, dims), static_cast<float>(o.dropout_p), o.dropout_seed, o.dropout_offset};
  const auto params_with = [params](const MaskView& view) {
    kernels::AttentionParams with = params;
    with.mask = view.mask;
    return with;
  };
  {
    const MaskView view = mask_view(mask, dims);
    ext::dispatch_with_half(
        q,
        [&](auto zero) {
          using T = decltype(zero);
          const Pointers<T> in = pointers<T>(ops, ops.inputs, dims);
          kernels::cpu::attention_forward<T>(in.q, in.k, in.v, out.raw<T>(), lse.raw<kernels::compute_t<T>>(), shape,
                                             params_with(view));
        },
        [&](auto, auto stream) {  // f32 only: the op widens 16-bit inputs on CUDA
          const Pointers<float> in = pointers<float>(ops, ops.inputs, dims);
          kernels::cuda::attention_forward(in.q, in.k, in.v, out.raw<float>(), lse.raw<float>(), shape,
                                           params_with(view), stream);
        });
  }
  if (autograd::needs_recording(ops.inputs)) {
    Operands saved{{}, ops.heads};
    for (const Tensor& input : ops.inputs) saved.inputs.push_back(input.detach());
    autograd::record(out, kOp, ops.inputs,
                     [saved, out_ = out.detach(), lse, mask, dims, shape, params_with](const Tensor& g, NeedsGrad) {
                       Gradients grads;
                       for (const Tensor& input : saved.inputs) grads.push_back(ext::new_empty(input, input.shape()));
                       const MaskView view = mask_view(mask, dims);
                       ext::dispatch_with_half(
                           saved.q(),
                           [&](auto zero) {
                             using T = decltype(zero);
                             const Pointers<T> in = pointers<T>(saved, saved.inputs, dims),
                                               d = pointers<T>(saved, grads, dims);
                             kernels::cpu::attention_backward<T>(in.q, in.k, in.v, out_.raw<T>(), g.raw<T>(),
                                                                 lse.raw<kernels::compute_t<T>>(), d.q, d.k, d.v, shape,
                                                                 params_with(view));
                           },
                           [&](auto, auto stream) {
                             const Pointers<float> in = pointers<float>(saved, saved.inputs, dims),
                                                   d = pointers<float>(saved, grads, dims);
                             Tensor row_dot = ext::new_empty(lse, lse.shape());  // D = rowsum(dO∘O)
                             kernels::cuda::attention_backward(in.q, in.k, in.v, out_.raw<float>(), g.raw<float>(),
                                                               lse.raw<float>(), row_dot.raw<float>(), d.q, d.k, d.v,
                                                               shape, params_with(view), stream);
                           });
                       return grads;
                     });
  }
  return out;
}

// A 16-bit op computes in f32, rounded once (Note [half precision]); the casts carry the gradients.
// Except bf16 on a CPU whose bf16 kernels are in use (ext::uses_cpu_bf16_kernels), which the fused
// kernels take as it is (Note [bf16 attention]), with an additive mask in f32 all the same.
bool widens(const Tensor& q) { return is_half(q.dtype()) && !ext::uses_cpu_bf16_kernels(q); }
AttentionOptions widened_options(const AttentionOptions& o) {
  AttentionOptions wide = o;
  if (o.attn_mask.defined() && o.attn_mask.dtype() != DType::u8) wide.attn_mask = ext::widened(o.attn_mask);
  return wide;
}

// The op on inputs autocast has already cast: fused where the kernels take them, else the
// reference path, whose own ops must not cast again (autocast applies at the op's boundary, once).
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, const Dims& dims) {
  if (fused_takes(q, dims)) return fused({{q, k, v}}, o, dims);
  const ext::AutocastOff no_autocast;
  return scaled_dot_product_attention_reference(q, k, v, o);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  if (const ext::AutocastInputs cast{OpKey::scaled_dot_product_attention, {&q, &k, &v, &o.attn_mask}}) {
    AttentionOptions cast_options = o;
    cast_options.attn_mask = cast[3];
    return scaled_dot_product_attention(cast[0], cast[1], cast[2], cast_options);
  }
  const Dims dims = check_attention(q, k, v, o);
  if (widens(q))
    return attend(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), widened_options(o), dims).to(q.dtype());
  return attend(q, k, v, widened_options(o), dims);
}

namespace {

// [N, len, H·dim] as [N, H, len, dim] (a copy), and back.
Shape split_shape(const Tensor& x, std::int64_t heads) { return {x.size(0), heads, x.size(1), x.size(2) / heads}; }
Tensor split_heads(const Tensor& x, std::int64_t heads) {
  return permute(reshape(x, {x.size(0), x.size(1), heads, x.size(2) / heads}), {0, 2, 1, 3});
}
Tensor merge_heads(const Tensor& x) {
  return reshape(permute(x, {0, 2, 1, 3}), {x.size(0), x.size(2), x.size(1) * x.size(3)});
}

// The heads' op on inputs autocast has already cast: the CPU's fused kernels in place; elsewhere
// the heads split out, the op, and the heads merged.
Tensor attend_heads(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, const Dims& dims,
                    std::int64_t heads) {
  if (!q.is_cuda()) return fused({{q, k, v}, heads}, o, dims);
  return merge_heads(attend(split_heads(q, heads), split_heads(k, heads), split_heads(v, heads), o, dims));
}

// The qkv op on inputs autocast has already cast: the CPU's fused kernels on the column blocks in
// place; elsewhere the blocks sliced out and the heads' op.
Tensor attend_qkv(const Tensor& qkv, const AttentionOptions& o, const Dims& dims, std::int64_t heads) {
  if (!qkv.is_cuda()) return fused({{qkv}, heads}, o, dims);
  const std::int64_t width = qkv.size(2) / 3;
  return attend_heads(slice(qkv, 2, 0, width), slice(qkv, 2, width, width), slice(qkv, 2, 2 * width, width), o, dims,
                      heads);
}

}  // namespace

Tensor scaled_dot_product_attention_qkv(const Tensor& qkv, std::int64_t heads, const AttentionOptions& o) {
  constexpr const char* op = "scaled_dot_product_attention_qkv";
  if (const ext::AutocastInputs cast{OpKey::scaled_dot_product_attention_qkv, {&qkv, &o.attn_mask}}) {
    AttentionOptions cast_options = o;
    cast_options.attn_mask = cast[1];
    return scaled_dot_product_attention_qkv(cast[0], heads, cast_options);
  }
  check_inputs(op, qkv, qkv, qkv, o);
  EMBER_CHECK(heads > 0 && qkv.dim() == 3 && qkv.size(2) % (3 * heads) == 0, ShapeError, op,
              ": qkv must be [N, L, 3·H·E] (query, key and value side by side in each row) with H = heads = ", heads,
              "; got ", shape_str(qkv.shape()));
  const Shape split = {qkv.size(0), heads, qkv.size(1), qkv.size(2) / (3 * heads)};
  const Dims dims = check_attention(qkv, o, split, split, split);
  if (widens(qkv)) return attend_qkv(qkv.to(DType::f32), widened_options(o), dims, heads).to(qkv.dtype());
  return attend_qkv(qkv, widened_options(o), dims, heads);
}

Tensor scaled_dot_product_attention_heads(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads,
                                          const AttentionOptions& o) {
  constexpr const char* op = "scaled_dot_product_attention_heads";
  if (const ext::AutocastInputs cast{OpKey::scaled_dot_product_attention_heads, {&q, &k, &v, &o.attn_mask}}) {
    AttentionOptions cast_options = o;
    cast_options.attn_mask = cast[3];
    return scaled_dot_product_attention_heads(cast[0], cast[1], cast[2], heads, cast_options);
  }
  check_inputs(op, q, k, v, o);
  const auto splits = [heads](const Tensor& x) { return x.dim() == 3 && x.size(2) % heads == 0; };
  EMBER_CHECK(heads > 0 && splits(q) && splits(k) && splits(v), ShapeError, op,
              ": query, key and value must be [N, L, H·E], [N, S, H·E] and [N, S, H·Ev] with H = heads = ", heads,
              "; got ", shape_str(q.shape()), ", ", shape_str(k.shape()), " and ", shape_str(v.shape()));
  const Dims dims = check_attention(q, o, split_shape(q, heads), split_shape(k, heads), split_shape(v, heads));
  if (widens(q))
    return attend_heads(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), widened_options(o), dims, heads)
        .to(q.dtype());
  return attend_heads(q, k, v, widened_options(o), dims, heads);
}

Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& o) {
  check_attention(q, k, v, o);
  return matmul(scaled_dot_product_attention_weights(q, k, o), v);
}

Tensor scaled_dot_product_attention_weights(const Tensor& q, const Tensor& k, const AttentionOptions& o) {
  const Dims dims = check_attention(q, k, k, o);
  const TensorOptions like{.dtype = q.dtype(), .device = q.device()};
  const Tensor minus_infinity = scalar_tensor(-std::numeric_limits<double>::infinity(), like),
               zero = scalar_tensor(0.0, like);
  Tensor scores = mul(matmul(q, transpose(k)), scale_of(o, dims));
  if (o.is_causal) {  // key j ≤ query i, top-left aligned
    const TensorOptions f32_here{.device = q.device()};
    const Tensor rows = reshape(arange(dims.q_len, f32_here), {dims.q_len, 1}),
                 cols = reshape(arange(dims.kv_len, f32_here), {1, dims.kv_len});
    scores = where(ge(rows, cols), scores, minus_infinity);
  }
  if (o.attn_mask.defined())
    scores = o.attn_mask.dtype() == DType::u8 ? where(o.attn_mask, scores, minus_infinity) : add(scores, o.attn_mask);
  // A row masked everywhere: output 0, gradient 0 (PyTorch's _safe_softmax), not softmax's NaN.
  const Tensor masked_row = unsqueeze(eq(max(scores.detach(), -1), minus_infinity), static_cast<int>(scores.dim()) - 1);
  Tensor probabilities = where(masked_row, zero, softmax(where(masked_row, zero, scores), -1));
  if (o.dropout_p > 0.0) probabilities = dropout(probabilities, o.dropout_p, o.dropout_seed, o.dropout_offset);
  return probabilities;
}

}  // namespace ember
