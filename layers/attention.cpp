// MultiheadAttention.
#include "layers/attention.h"

#include <cmath>
#include <limits>

#include "base/error.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"

namespace ember::nn {

namespace {

// Xavier (Glorot) uniform for a [fan_out, fan_in] matrix: U(±√(6 / (fan_in + fan_out))).
Tensor xavier_uniform(std::int64_t fan_out, std::int64_t fan_in, Generator& g) {
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform({fan_out, fan_in}, -bound, bound, {}, &g);
}

// A mask of MultiheadAttention's convention (True or a float added: where not to attend) as the
// op's additive float mask: −∞ where a boolean mask is True, a float mask as it is.
Tensor additive(const Tensor& mask, const Tensor& like) {
  if (mask.dtype() != DType::u8) return mask.detach();
  const TensorOptions options{.dtype = like.dtype(), .device = like.device()};
  return where(mask, scalar_tensor(-std::numeric_limits<double>::infinity(), options), scalar_tensor(0.0, options));
}

}  // namespace

MultiheadAttention::MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads, double dropout, bool bias,
                                       bool batch_first, Generator* generator,
                                       std::optional<std::uint64_t> dropout_seed)
    : embed_dim_(embed_dim),
      heads_(num_heads),
      dropout_(dropout),
      batch_first_(batch_first),
      seed_(dropout_seed ? *dropout_seed : default_generator().next_u64()) {
  EMBER_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, ValueError,
              "MultiheadAttention: embed_dim must be a positive multiple of num_heads, got embed_dim ", embed_dim,
              " and num_heads ", num_heads);
  EMBER_CHECK(dropout >= 0.0 && dropout <= 1.0, ValueError, "MultiheadAttention: dropout must be in [0, 1], got ",
              dropout);
  Generator& g = generator ? *generator : default_generator();
  // PyTorch's _reset_parameters: in_proj xavier-uniform, biases zero; out_proj keeps Linear's init.
  in_proj_weight_ = register_parameter("in_proj_weight", xavier_uniform(3 * embed_dim, embed_dim, g));
  if (bias) in_proj_bias_ = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias, &g));
  if (bias) {
    const NoGradGuard no_grad;
    Tensor out_bias = out_proj_->bias();  // a handle on the parameter
    out_bias.zero_();
  }
}

Tensor MultiheadAttention::forward(const Tensor& input) {
  return attend(input, input, input, {.need_weights = false}).first;
}

std::pair<Tensor, Tensor> MultiheadAttention::attend(const Tensor& query, const Tensor& key, const Tensor& value,
                                                     const AttendOptions& options) {
  check_input_device(query);
  check_input_device(key);
  check_input_device(value);
  const bool batched = query.dim() == 3;
  const std::string layout = batched ? (batch_first_ ? "[N, L, E]" : "[L, N, E]") : "[L, E]";
  auto fits = [&](const Tensor& t) {
    return t.dim() == query.dim() && (t.dim() == 2 || t.dim() == 3) && t.size(-1) == embed_dim_;
  };
  check_input_shape(fits(query) && fits(key) && fits(value), query,
                    detail::concat("query, key and value of ", layout, " with E = embed_dim = ", embed_dim_, "; key ",
                                   shape_str(key.shape()), ", value ", shape_str(value.shape())));
  // [N, L, E] from here on.
  auto batch_major = [&](const Tensor& t) {
    return !batched ? unsqueeze(t, 0) : batch_first_ ? t : permute(t, {1, 0, 2});
  };
  const Tensor q_in = batch_major(query), k_in = batch_major(key), v_in = batch_major(value);
  const std::int64_t n = q_in.size(0), l = q_in.size(1), s = k_in.size(1), e = embed_dim_, d = e / heads_;
  check_input_shape(k_in.size(0) == n && v_in.size(0) == n && v_in.size(1) == s, query,
                    "key and value of the query's batch, and value of the key's length");
  // Self-attention without weights: one packed projection, which the attention reads in place.
  const bool packed = query.is_same(key) && key.is_same(value) && !options.need_weights;
  // Otherwise three, by the in-projection's three row blocks.
  auto project = [&](const Tensor& x, std::int64_t part) {
    return linear(x, slice(in_proj_weight_, 0, part * e, e),
                  in_proj_bias_.defined() ? slice(in_proj_bias_, 0, part * e, e) : Tensor());
  };
  Tensor q, k, v;
  if (!packed) q = project(q_in, 0), k = project(k_in, 1), v = project(v_in, 2);
  const Tensor& like = packed ? q_in : q;  // the masks' dtype and device: the scores'
  auto heads = [&](const Tensor& t, std::int64_t len) {
    return permute(reshape(t, {n, len, heads_, d}), {0, 2, 1, 3});
  };
  AttentionOptions op;
  op.is_causal = options.is_causal;
  if (is_training() && dropout_ > 0.0) {
    op.dropout_p = dropout_;
    op.dropout_seed = seed_;
    op.dropout_offset = offset_;
    offset_ += static_cast<std::uint64_t>(n * heads_ * l * s);
  }
  if (options.attn_mask.defined()) {
    const Tensor& m = options.attn_mask;
    const bool per_head = m.dim() == 3 && m.size(0) == n * heads_ && m.size(1) == l && m.size(2) == s;
    check_input_shape((m.dim() == 2 && m.size(0) == l && m.size(1) == s) || per_head, m,
                      detail::concat("an attn_mask of [L, S] = [", l, ", ", s, "] or [N·H, L, S] = [", n * heads_, ", ",
                                     l, ", ", s, "]"));
    op.attn_mask = additive(per_head ? reshape(m, {n, heads_, l, s}) : m, like);
  }
  if (options.key_padding_mask.defined()) {
    const Tensor& m = options.key_padding_mask;
    check_input_shape(batched ? (m.dim() == 2 && m.size(0) == n && m.size(1) == s) : (m.dim() == 1 && m.size(0) == s),
                      m, detail::concat("a key_padding_mask of ", batched ? "[N, S]" : "[S]", " with S = ", s));
    const Tensor padding = additive(reshape(m, {n, 1, 1, s}), like);
    op.attn_mask = op.attn_mask.defined() ? add(op.attn_mask, padding) : padding;
  }
  Tensor out, weights;  // out: [N, L, E], the heads side by side
  if (options.need_weights) {
    const Tensor qh = heads(q, l), kh = heads(k, s), vh = heads(v, s);
    weights = scaled_dot_product_attention_weights(qh, kh, op);
    out = reshape(permute(matmul(weights, vh), {0, 2, 1, 3}), {n, l, e});
    if (options.average_attn_weights) weights = mean(weights, {1});
  } else if (packed) {
    out = scaled_dot_product_attention_qkv(linear(q_in, in_proj_weight_, in_proj_bias_), heads_, op);
  } else {
    out = scaled_dot_product_attention_heads(q, k, v, heads_, op);
  }
  Tensor y = (*out_proj_)(out);
  y = !batched ? reshape(y, {l, e}) : batch_first_ ? y : permute(y, {1, 0, 2});
  if (weights.defined() && !batched)
    weights = reshape(weights, Shape(weights.shape().begin() + 1, weights.shape().end()));
  return {y, weights};
}

}  // namespace ember::nn
