// The Vision Transformer of torchvision.models.vision_transformer, module for module and name for
// name, so that a checkpoint loads strictly into torchvision's VisionTransformer built with the
// same sizes and a 1-channel conv_proj (scripts/compare/vit_reference.py writes that model out):
//
//   class_token                          [1, 1, D]
//   conv_proj.weight, .bias              [D, C, P, P], [D]    patches of P×P, stride P
//   encoder.pos_embedding                [1, T, D]            T = (H/P)·(W/P) + 1
//   encoder.layers.encoder_layer_<i>.    an EncoderBlock:
//     ln_1, self_attention (in_proj_weight [3D, D], in_proj_bias, out_proj), ln_2,
//     mlp.0 (Linear D → M), mlp.3 (Linear M → D)    (mlp.1 GELU, mlp.2 and mlp.4 Dropout)
//   encoder.ln.weight, .bias             [D]
//   heads.head.weight, .bias             [classes, D]
//
// Pre-norm blocks, exact GELU, LayerNorm eps 1e-6, and torchvision's initialization: conv_proj
// truncated normal of std √(1/fan_in) and zero bias, pos_embedding N(0, 0.02²), class_token zero,
// the MLPs' weights xavier-uniform with N(0, 10⁻¹²) biases, and a zero head.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/io/serialize.h"
#include "core/tensor/random.h"
#include "layers/attention.h"
#include "layers/container.h"
#include "layers/conv.h"
#include "layers/dropout.h"
#include "layers/normalization.h"

namespace ember::nn {

struct VitShape {
  std::int64_t height = 28, width = 28, channels = 1;
  std::int64_t patch = 7;    // P: divides the height and the width
  std::int64_t hidden = 64;  // D: the token width, a multiple of heads
  std::int64_t depth = 4;    // encoder blocks
  std::int64_t heads = 4;
  std::int64_t mlp = 128;  // M: the blocks' MLP width
  std::int64_t classes = 10;
  double dropout = 0.0, attention_dropout = 0.0;
  std::int64_t tokens() const { return (height / patch) * (width / patch) + 1; }  // T, the class token's included
};

// x + self_attention(ln_1(x)), then x + mlp(ln_2(x)), on [N, T, D] (torchvision's EncoderBlock).
class EncoderBlock : public Module {
 public:
  EncoderBlock(const VitShape& shape, Generator& generator);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "EncoderBlock"; }

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<MultiheadAttention> self_attention_;
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<Sequential> mlp_;
};

// Adds the position table, then the blocks, then a LayerNorm (torchvision's Encoder).
class Encoder : public Module {
 public:
  Encoder(const VitShape& shape, Generator& generator);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "Encoder"; }

 private:
  Tensor pos_embedding_;
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<Sequential> layers_;
  std::shared_ptr<LayerNorm> ln_;
};

// Images [N, C, H, W] → logits [N, classes]: patches embedded by a strided convolution, a class
// token in front, the encoder, and a linear head on the class token's output.
class VisionTransformer : public Module {
 public:
  explicit VisionTransformer(const VitShape& shape, Generator* generator = nullptr);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "VisionTransformer"; }
  const VitShape& shape() const { return shape_; }

 private:
  VitShape shape_;
  Tensor class_token_;
  std::shared_ptr<Conv2d> conv_proj_;
  std::shared_ptr<Encoder> encoder_;
  std::shared_ptr<Sequential> heads_;
};

std::shared_ptr<VisionTransformer> vit(const VitShape& shape, Generator* generator = nullptr);

// The ViT whose state dict this is, from its tensor shapes (the patch from conv_proj, the width,
// depth, MLP width and classes) for images of `height`×`width`; the heads cannot be read from the
// shapes, so `heads` is taken as given (a multiple check only). FormatError naming `name` when the
// tensors are not a ViT's.
VitShape vit_shape_of(const StateDict& state, const std::string& name, std::int64_t heads, std::int64_t height = 28,
                      std::int64_t width = 28);

}  // namespace ember::nn
