// The Vision Transformer: EncoderBlock, Encoder, VisionTransformer, and reading one's shape back.
#include "layers/vision_transformer.h"

#include <cmath>
#include <vector>

#include "base/error.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "layers/activation.h"
#include "layers/linear.h"
#include "layers/residual.h"

namespace ember::nn {

namespace {

constexpr double kLayerNormEps = 1e-6;  // torchvision's partial(nn.LayerNorm, eps=1e-6)

// Overwrites a parameter's values (the initialization torchvision gives it).
void set_values(Tensor parameter, const Tensor& values) {
  const NoGradGuard no_grad;
  parameter.copy_(values.reshape(parameter.shape()));
}

// N(0, std²) truncated to [−2, 2] (trunc_normal_'s default bounds, absolute, not in stds).
Tensor truncated_normal(const Shape& shape, double std, Generator& g) {
  std::size_t count = 1;
  for (std::int64_t d : shape) count *= static_cast<std::size_t>(d);
  std::vector<float> values(count);
  for (float& v : values) {
    double x = 0;
    do x = g.normal() * std;
    while (x < -2.0 || x > 2.0);
    v = static_cast<float>(x);
  }
  return from_vector(values, shape);
}

std::shared_ptr<Linear> mlp_linear(std::int64_t in, std::int64_t out, Generator& g) {
  auto layer = std::make_shared<Linear>(in, out, true, &g);
  const double bound = std::sqrt(6.0 / static_cast<double>(in + out));  // xavier_uniform_
  set_values(layer->weight(), uniform({out, in}, -bound, bound, {}, &g));
  set_values(layer->bias(), mul(randn({out}, {}, &g), 1e-6));
  return layer;
}

}  // namespace

EncoderBlock::EncoderBlock(const VitShape& s, Generator& g) {
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(std::vector{s.hidden}, kLayerNormEps));
  self_attention_ = register_module("self_attention",
                                    std::make_shared<MultiheadAttention>(s.hidden, s.heads, s.attention_dropout, true,
                                                                         /*batch_first=*/true, &g, g.next_u64()));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(s.dropout, g.next_u64()));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(std::vector{s.hidden}, kLayerNormEps));
  mlp_ = register_module("mlp", std::make_shared<Sequential>());
  mlp_->append(mlp_linear(s.hidden, s.mlp, g));
  mlp_->append(std::make_shared<GELU>());
  mlp_->append(std::make_shared<Dropout>(s.dropout, g.next_u64()));
  mlp_->append(mlp_linear(s.mlp, s.hidden, g));
  mlp_->append(std::make_shared<Dropout>(s.dropout, g.next_u64()));
}

Tensor EncoderBlock::forward(const Tensor& input) {
  check_input_shape(input.dim() == 3, input, "an input of [N, T, D]");
  const Tensor x = residual_add(input, (*dropout_)((*self_attention_)((*ln_1_)(input))));
  return residual_add(x, (*mlp_)((*ln_2_)(x)));
}

Encoder::Encoder(const VitShape& s, Generator& g) {
  pos_embedding_ = register_parameter("pos_embedding", mul(randn({1, s.tokens(), s.hidden}, {}, &g), 0.02));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(s.dropout, g.next_u64()));
  layers_ = register_module("layers", std::make_shared<Sequential>());
  for (std::int64_t i = 0; i < s.depth; ++i)
    layers_->append(detail::concat("encoder_layer_", i), std::make_shared<EncoderBlock>(s, g));
  ln_ = register_module("ln", std::make_shared<LayerNorm>(std::vector{s.hidden}, kLayerNormEps));
}

Tensor Encoder::forward(const Tensor& input) {
  check_input_shape(
      input.dim() == 3 && input.size(1) == pos_embedding_.size(1) && input.size(2) == pos_embedding_.size(2), input,
      detail::concat("an input of [N, ", pos_embedding_.size(1), ", ", pos_embedding_.size(2), "]"));
  return (*ln_)((*layers_)((*dropout_)(residual_add(input, pos_embedding_))));
}

VisionTransformer::VisionTransformer(const VitShape& s, Generator* generator) : shape_(s) {
  EMBER_CHECK(s.patch > 0 && s.height % s.patch == 0 && s.width % s.patch == 0, ValueError,
              "VisionTransformer: the patch size ", s.patch, " must divide the image size ", s.height, "×", s.width);
  EMBER_CHECK(s.channels > 0 && s.depth > 0 && s.mlp > 0 && s.classes > 0, ValueError,
              "VisionTransformer: channels, depth, mlp and classes must be positive");
  Generator& g = generator ? *generator : default_generator();
  // Registered first, as torchvision's state dict lists it first (a module's own tensors lead).
  class_token_ = register_parameter("class_token", zeros({1, 1, s.hidden}));
  conv_proj_ =
      register_module("conv_proj", std::make_shared<Conv2d>(s.channels, s.hidden, s.patch, s.patch, 0, true, &g));
  const std::int64_t fan_in = s.channels * s.patch * s.patch;
  set_values(conv_proj_->weight(), truncated_normal({s.hidden, s.channels, s.patch, s.patch},
                                                    std::sqrt(1.0 / static_cast<double>(fan_in)), g));
  for (auto& [name, t] : conv_proj_->named_parameters())
    if (name == "bias") set_values(t, zeros(t.shape()));
  encoder_ = register_module("encoder", std::make_shared<Encoder>(s, g));
  heads_ = register_module("heads", std::make_shared<Sequential>());
  auto head = std::make_shared<Linear>(s.hidden, s.classes, true, &g);
  set_values(head->weight(), zeros(head->weight().shape()));
  set_values(head->bias(), zeros(head->bias().shape()));
  heads_->append("head", head);
}

Tensor VisionTransformer::forward(const Tensor& input) {
  const VitShape& s = shape_;
  check_input_shape(
      input.dim() == 4 && input.size(1) == s.channels && input.size(2) == s.height && input.size(3) == s.width, input,
      detail::concat("images of [N, ", s.channels, ", ", s.height, ", ", s.width, "]"));
  const std::int64_t n = input.size(0), patches = s.tokens() - 1;
  // [N, D, H/P, W/P] → [N, patches, D], the class token in front.
  const Tensor tokens = permute(reshape((*conv_proj_)(input), {n, s.hidden, patches}), {0, 2, 1});
  const Tensor x = (*encoder_)(cat({broadcast_to(class_token_, {n, 1, s.hidden}), tokens}, 1));
  return (*heads_)(reshape(slice(x, 1, 0, 1), {n, s.hidden}));
}

std::shared_ptr<VisionTransformer> vit(const VitShape& shape, Generator* generator) {
  return std::make_shared<VisionTransformer>(shape, generator);
}

VitShape vit_shape_of(const StateDict& state, const std::string& name, std::int64_t heads, std::int64_t height,
                      std::int64_t width) {
  auto shape_of = [&](const std::string& key, std::size_t dims) {
    const Tensor* t = find_tensor(state, key);
    EMBER_CHECK(t && t->dim() == static_cast<int>(dims), FormatError, name, ": not a ViT: expected a ", dims,
                "-dim tensor '", key, "'", t ? detail::concat(", found ", shape_str(t->shape())) : std::string(""));
    return t->shape();
  };
  VitShape s;
  const Shape conv = shape_of("conv_proj.weight", 4);
  s.hidden = conv[0], s.channels = conv[1], s.patch = conv[2], s.height = height, s.width = width, s.heads = heads;
  s.mlp = shape_of("encoder.layers.encoder_layer_0.mlp.0.weight", 2)[0];
  s.classes = shape_of("heads.head.weight", 2)[0];
  s.depth = 0;
  while (find_tensor(state, detail::concat("encoder.layers.encoder_layer_", s.depth, ".ln_1.weight"))) ++s.depth;
  EMBER_CHECK(conv[2] == conv[3] && height % s.patch == 0 && width % s.patch == 0 && s.hidden % heads == 0, FormatError,
              name, ": a ViT with ", shape_str(conv), " patches and ", heads, " heads does not fit images of ", height,
              "×", width);
  EMBER_CHECK(shape_of("encoder.pos_embedding", 3) == (Shape{1, s.tokens(), s.hidden}), FormatError, name,
              ": encoder.pos_embedding is not [1, ", s.tokens(), ", ", s.hidden, "] for images of ", height, "×",
              width);
  return s;
}

}  // namespace ember::nn
