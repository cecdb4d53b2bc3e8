// A small attention model written outside ember, against its installed headers: a 28×28 image as
// 28 tokens (its rows), each projected to `width`, plus a learned position table (nn::Embedding),
// one pre-norm self-attention block over the tokens (the LayerNorm of layer_norm.h; its heads
// through the fused scaled_dot_product_attention op), the tokens averaged, then a Linear to the
// classes. Every piece is ember's public API: modules, ops, autograd, both devices.
#pragma once

#include <ember/ember.h>

#include "layer_norm.h"

namespace example {

class RowAttention : public ember::nn::Module {
 public:
  RowAttention(std::int64_t rows, std::int64_t cols, std::int64_t width, std::int64_t heads, std::int64_t classes)
      : rows_(rows), cols_(cols), width_(width), heads_(heads) {
    using namespace ember::nn;
    embed_ = register_module("embed", std::make_shared<Linear>(cols, width));
    positions_ = register_module("positions", std::make_shared<Embedding>(rows, width));
    norm_ = register_module("norm", std::make_shared<example::LayerNorm>(width));  // layer_norm.h's
    qkv_ = register_module("qkv", std::make_shared<Linear>(width, 3 * width));
    out_ = register_module("out", std::make_shared<Linear>(width, width));
    head_ = register_module("head", std::make_shared<Linear>(width, classes));
  }

  // images [N, 1, rows, cols] (or [N, rows·cols]) → logits [N, classes]
  ember::Tensor forward(const ember::Tensor& images) override {
    using namespace ember;
    check_input_shape(images.numel() % (rows_ * cols_) == 0, images, "images of rows × cols pixels");
    const std::int64_t n = images.numel() / (rows_ * cols_), d = width_ / heads_;
    const Tensor index = arange(rows_, {.dtype = DType::i64, .device = images.device()});
    Tensor tokens = (*embed_)(reshape(images, {n, rows_, cols_})) + (*positions_)(index);  // [N, T, width]
    // Self-attention, pre-norm: q, k and v from one projection, split into heads [N, H, T, d].
    const Tensor qkv = (*qkv_)((*norm_)(tokens));
    const auto heads = [&](int part) {
      return permute(reshape(slice(qkv, 2, part * width_, width_), {n, rows_, heads_, d}), {0, 2, 1, 3});
    };
    const Tensor mixed = scaled_dot_product_attention(heads(0), heads(1), heads(2));
    tokens = tokens + (*out_)(reshape(permute(mixed, {0, 2, 1, 3}), {n, rows_, width_}));
    return (*head_)(mean(tokens, 1));
  }
  std::string type_name() const override { return "RowAttention"; }

 private:
  std::int64_t rows_, cols_, width_, heads_;
  std::shared_ptr<ember::nn::Linear> embed_, qkv_, out_, head_;
  std::shared_ptr<ember::nn::Embedding> positions_;
  std::shared_ptr<example::LayerNorm> norm_;
};

}  // namespace example
