// torch.nn.TransformerEncoderLayer (layers/transformer.h).
#include "layers/transformer.h"

#include "base/error.h"
#include "core/ops/ops.h"
#include "layers/activation.h"  // gelu
#include "layers/residual.h"

namespace ember::nn {

TransformerEncoderLayer::TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                                                 const TransformerEncoderLayerOptions& options, Generator* generator)
    : options_(options) {
  EMBER_CHECK(options.activation == "relu" || options.activation == "gelu", ValueError,
              "TransformerEncoderLayer: activation must be \"relu\" or \"gelu\", got \"", options.activation, "\"");
  EMBER_CHECK(options.dim_feedforward > 0, ValueError,
              "TransformerEncoderLayer: dim_feedforward must be positive, got ", options.dim_feedforward);
  Generator& g = generator ? *generator : default_generator();
  // Registered in PyTorch's order, so that named_parameters() lists them as its state_dict does.
  self_attn_ =
      register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, options.dropout, true,
                                                                        options.batch_first, &g, g.next_u64()));
  linear1_ = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward, true, &g));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(options.dropout, g.next_u64()));
  linear2_ = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model, true, &g));
  norm1_ = register_module("norm1", std::make_shared<LayerNorm>(std::vector{d_model}, options.layer_norm_eps));
  norm2_ = register_module("norm2", std::make_shared<LayerNorm>(std::vector{d_model}, options.layer_norm_eps));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(options.dropout, g.next_u64()));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(options.dropout, g.next_u64()));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) { return forward(src, {}); }

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttendOptions& masks) {
  if (options_.norm_first) {
    const Tensor x = residual_add(src, self_attention_block(norm1_->forward(src), masks));
    return residual_add(x, feed_forward_block(norm2_->forward(x)));
  }
  const Tensor x = norm1_->forward(residual_add(src, self_attention_block(src, masks)));
  return norm2_->forward(residual_add(x, feed_forward_block(x)));
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const AttendOptions& masks) {
  AttendOptions options = masks;
  options.need_weights = false;
  return dropout1_->forward(self_attn_->attend(x, x, x, options).first);
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  const Tensor hidden = linear1_->forward(x);
  const Tensor activated = options_.activation == "relu" ? relu(hidden) : nn::gelu(hidden);
  return dropout2_->forward(linear2_->forward(dropout_->forward(activated)));
}

}  // namespace ember::nn
