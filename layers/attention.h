// MultiheadAttention, as torch.nn.MultiheadAttention: its parameter names (in_proj_weight,
// in_proj_bias, out_proj.weight, out_proj.bias), its masks' conventions and its need_weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/tensor/random.h"
#include "layers/linear.h"
#include "layers/module.h"

namespace ember::nn {

// What one call of MultiheadAttention::attend may add, with PyTorch's defaults and conventions:
// the masks here say where *not* to attend (True, or −∞ added), the opposite of a boolean mask
// given to scaled_dot_product_attention.
struct AttendOptions {
  Tensor key_padding_mask = {};  // [N, S] (or [S] unbatched): True (or a float added) ignores key j
  Tensor attn_mask = {};         // [L, S] or [N·H, L, S]: True (or a float added) masks a pair
  // The weights are the score matrix itself, so asking for them (PyTorch's default) takes the
  // unfused path: matmul → softmax → dropout → matmul. Without them the fused op runs.
  bool need_weights = true;
  bool average_attn_weights = true;  // the weights averaged over the heads: [N, L, S]
  bool is_causal = false;            // a causal mask, without attn_mask (as the op's is_causal)
};

// Attention over `num_heads` heads of embed_dim / num_heads each: q, k, v projected by one packed
// in_proj (xavier-uniform weight, zero bias), scaled_dot_product_attention per head, then
// out_proj (Linear's init, zero bias). Inputs are [L, N, E] (or [N, L, E] with batch_first) or an
// unbatched [L, E]. Dropout applies to the attention probabilities in training mode only, its
// mask drawn from a counter-based stream seeded at construction (as nn::Dropout's).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false, Generator* generator = nullptr,
                     std::optional<std::uint64_t> dropout_seed = std::nullopt);
  // Self-attention without weights, the call a transformer block makes (fused).
  Tensor forward(const Tensor& input) override;
  // PyTorch's forward(query, key, value, ...): the output and, when asked, the weights ([N, L, S]
  // averaged, or [N, H, L, S]); an undefined tensor otherwise.
  std::pair<Tensor, Tensor> attend(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttendOptions& options = {});
  std::string type_name() const override { return "MultiheadAttention"; }
  std::int64_t embed_dim() const { return embed_dim_; }
  std::int64_t num_heads() const { return heads_; }
  std::uint64_t* random_offset() override { return &offset_; }

 private:
  std::int64_t embed_dim_, heads_;
  double dropout_;
  bool batch_first_;
  std::uint64_t seed_, offset_ = 0;
  Tensor in_proj_weight_, in_proj_bias_;
  std::shared_ptr<Linear> out_proj_;
};

}  // namespace ember::nn
