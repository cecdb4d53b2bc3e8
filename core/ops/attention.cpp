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

Dims check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  ext::check_defined(kOp, {"query", q});
  ext::check_defined(kOp, {"key", k});
  ext::check_defined(kOp, {"value", v});
  ext::check_same_device(kOp, {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", o.attn_mask}});
  ext::check_same_dtype(kOp, {"query", q}, {"key", k});
  ext::check_same_dtype(kOp, {"query", q}, {"value", v});
  ext::check_floating(kOp, {"query", q});
  EMBER_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError, kOp,
              ": query, key and value need the same number of dims, at least 2 ([..., L, E], [..., S, E], [..., S, "
              "Ev]); got shapes ",
              shape_str(q.shape()), ", ", shape_str(k.shape()), " and ", shape_str(v.shape()));
  const std::size_t nd = q.shape().size();
  const Shape batch(q.shape().begin(), q.shape().end() - 2);
  const bool batches_equal =
      Shape(k.shape().begin(), k.shape().end() - 2) == batch && Shape(v.shape().begin(), v.shape().end() - 2) == batch;
  EMBER_CHECK(batches_equal && k.shape()[nd - 1] == q.shape()[nd - 1] && v.shape()[nd - 2] == k.shape()[nd - 2],
              ShapeError, kOp, ": shapes ", shape_str(q.shape()), ", ", shape_str(k.shape()), " and ",
              shape_str(v.shape()),
              " do not fit [..., L, E], [..., S, E], [..., S, Ev] with the same batch dims (broadcast them first)");
  EMBER_CHECK(o.dropout_p >= 0.0 && o.dropout_p <= 1.0, ValueError, kOp, ": dropout_p must be in [0, 1], got ",
              o.dropout_p);
  const Dims dims{batch, q.shape()[nd - 2], k.shape()[nd - 2], q.shape()[nd - 1], v.shape()[nd - 1]};
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

// Whether the fused kernels take these inputs: every shape on the CPU (f32, f64); f32 heads of at
// most kMaxFusedHeadDim on CUDA.
bool fused_takes(const Tensor& q, const Dims& dims) {
  return !q.is_cuda() || (q.dtype() == DType::f32 && kernels::cuda_attention_fits(kernel_shape(dims)));
}

// The fused path, recorded for autograd with its own backward.
Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, const Dims& dims) {
  Shape out_shape = dims.batch;
  out_shape.push_back(dims.q_len);
  out_shape.push_back(dims.value_dim);
  Tensor out = ext::new_empty(q, out_shape);
  Shape lse_shape = dims.batch;
  lse_shape.push_back(dims.q_len);
  Tensor lse = ext::new_empty(q, lse_shape);
  const Tensor mask = o.attn_mask.defined() ? o.attn_mask.detach() : Tensor();
  const kernels::AttentionShape shape = kernel_shape(dims);
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
    ext::dispatch(
        q,
        [&](auto zero) {
          using T = decltype(zero);
          kernels::cpu::attention_forward<T>(q.raw<T>(), k.raw<T>(), v.raw<T>(), out.raw<T>(), lse.raw<T>(), shape,
                                             params_with(view));
        },
        [&](auto stream) {
          kernels::cuda::attention_forward(q.raw<float>(), k.raw<float>(), v.raw<float>(), out.raw<float>(),
                                           lse.raw<float>(), shape, params_with(view), stream);
        });
  }
  if (autograd::needs_recording({&q, &k, &v})) {
    autograd::record(out, kOp, {&q, &k, &v},
                     [q_ = q.detach(), k_ = k.detach(), v_ = v.detach(), out_ = out.detach(), lse, mask, dims, shape,
                      params_with](const Tensor& g, NeedsGrad) {
                       Tensor dq = ext::new_empty(q_, q_.shape()), dk = ext::new_empty(k_, k_.shape()),
                              dv = ext::new_empty(v_, v_.shape());
                       const MaskView view = mask_view(mask, dims);
                       ext::dispatch(
                           q_,
                           [&](auto zero) {
                             using T = decltype(zero);
                             kernels::cpu::attention_backward<T>(q_.raw<T>(), k_.raw<T>(), v_.raw<T>(), out_.raw<T>(),
                                                                 g.raw<T>(), lse.raw<T>(), dq.raw<T>(), dk.raw<T>(),
                                                                 dv.raw<T>(), shape, params_with(view));
                           },
                           [&](auto stream) {
                             Tensor row_dot = ext::new_empty(lse, lse.shape());  // D = rowsum(dO∘O)
                             kernels::cuda::attention_backward(q_.raw<float>(), k_.raw<float>(), v_.raw<float>(),
                                                               out_.raw<float>(), g.raw<float>(), lse.raw<float>(),
                                                               row_dot.raw<float>(), dq.raw<float>(), dk.raw<float>(),
                                                               dv.raw<float>(), shape, params_with(view), stream);
                           });
                       return Gradients{dq, dk, dv};
                     });
  }
  return out;
}

// The op on inputs autocast has already cast: fused where the kernels take them, else the
// reference path, whose own ops must not cast again (autocast applies at the op's boundary, once).
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, const Dims& dims) {
  if (fused_takes(q, dims)) return fused(q, k, v, o, dims);
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
  if (is_half(q.dtype())) {  // in f32, rounded once (Note [half precision]); the casts carry the gradients
    AttentionOptions wide = o;
    if (o.attn_mask.defined() && o.attn_mask.dtype() != DType::u8) wide.attn_mask = ext::widened(o.attn_mask);
    return attend(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), wide, dims).to(q.dtype());
  }
  return attend(q, k, v, o, dims);
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
