// torch.nn.TransformerEncoderLayer: its names, defaults and both orders of normalization, so that
// its checkpoints load strictly into PyTorch's layer built with the same arguments:
//
//   self_attn.in_proj_weight [3D, D], .in_proj_bias [3D], .out_proj.weight [D, D], .out_proj.bias
//   linear1.weight [F, D], .bias [F]        linear2.weight [D, F], .bias [D]
//   norm1.weight, .bias [D]                 norm2.weight, .bias [D]
//   (dropout, dropout1, dropout2: no parameters)
//
// Post-norm by default (norm_first false): x = norm1(x + sa(x)), then x = norm2(x + ff(x)); with
// norm_first: x = x + sa(norm1(x)), then x = x + ff(norm2(x)). sa is self-attention without weights
// followed by dropout1; ff is linear2(dropout(activation(linear1(x)))) followed by dropout2.
// Initialization: MultiheadAttention's and Linear's own (PyTorch's layer adds none of its own). The
// activation is a function, as PyTorch stores it: no module, no entry in the state dict. PyTorch's
// bias=False (norms with a weight and no bias) is not offered: ember's LayerNorm has both or neither.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor/random.h"
#include "layers/attention.h"
#include "layers/dropout.h"
#include "layers/linear.h"
#include "layers/normalization.h"

namespace ember::nn {

struct TransformerEncoderLayerOptions {
  std::int64_t dim_feedforward = 2048;  // F
  double dropout = 0.1;
  std::string activation = "relu";  // or "gelu" (exact)
  double layer_norm_eps = 1e-5;
  bool batch_first = false;  // [N, L, D] rather than [L, N, D]
  bool norm_first = false;
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead, const TransformerEncoderLayerOptions& options = {},
                          Generator* generator = nullptr);
  Tensor forward(const Tensor& src) override;
  // forward with PyTorch's src_mask, src_key_padding_mask and is_causal (MultiheadAttention's masks:
  // True or an added −∞ means do not attend).
  Tensor forward(const Tensor& src, const AttendOptions& masks);
  std::string type_name() const override { return "TransformerEncoderLayer"; }

 private:
  Tensor self_attention_block(const Tensor& x, const AttendOptions& masks);
  Tensor feed_forward_block(const Tensor& x);

  TransformerEncoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_;
};

}  // namespace ember::nn
