// Embedding, MultiheadAttention, TransformerEncoderLayer and the Vision Transformer: names, shapes, the fused
// and unfused paths, dropout's modes and stream, gradients, and reading a ViT's shape back
// (PyTorch's values are compared in tests/interop/vit_torch.py).
#include <catch2/catch.hpp>

#include "core/ops/autocast.h"
#include "core/ops/gradcheck.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "layers/nn.h"
#include "support/helpers.h"
#include "train/checkpoint.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

namespace {

nn::VitShape tiny_vit() {
  nn::VitShape s;
  s.height = s.width = 8, s.patch = 4, s.hidden = 8, s.depth = 2, s.heads = 2, s.mlp = 16, s.classes = 3;
  return s;
}

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(name);
  return out;
}

double max_difference(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b)).reshape({-1})).item<double>(); }

}  // namespace

TEST_CASE("MultiheadAttention: PyTorch's names and shapes, fused and unfused alike") {
  Generator g(1);
  nn::MultiheadAttention mha(8, 2, 0.0, true, /*batch_first=*/true, &g);
  CHECK(names(mha) == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(mha.state_dict()[0].second.shape() == Shape{24, 8});
  const Tensor x = randn({3, 5, 8}, {}, &g);
  const Tensor fused = mha(x);
  CHECK(fused.shape() == Shape{3, 5, 8});
  auto [unfused, weights] = mha.attend(x, x, x);
  CHECK(max_difference(fused, unfused) < 1e-5);
  CHECK(weights.shape() == Shape{3, 5, 5});  // averaged over the heads
  CHECK(max_difference(sum(weights, std::vector<int>{-1}), ones({3, 5})) < 1e-5);
  auto [per_head_out, per_head] = mha.attend(x, x, x, {.average_attn_weights = false});
  CHECK(per_head.shape() == Shape{3, 2, 5, 5});
  // Unbatched [L, E] is the batch of one.
  const Tensor first = slice(x, 0, 0, 1).reshape({5, 8});
  CHECK(max_difference(mha(first), slice(fused, 0, 0, 1).reshape({5, 8})) < 1e-5);
  // Sequence-first layout: the same numbers, transposed.
  Generator g2(1);
  nn::MultiheadAttention seq_first(8, 2, 0.0, true, /*batch_first=*/false, &g2);
  CHECK(max_difference(seq_first(permute(x, {1, 0, 2})), permute(fused, {1, 0, 2})) < 1e-5);
  // A key padded out gets no weight.
  const Tensor padding = from_vector<std::uint8_t>({0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {3, 5});
  auto [masked, masked_weights] = mha.attend(x, x, x, {.key_padding_mask = padding});
  CHECK(max(slice(masked_weights, 0, 0, 1).reshape({5, 5}), -1).to_vector<float>().size() == 5);
  CHECK(max(abs(slice(slice(masked_weights, 0, 0, 1), 2, 4, 1)).reshape({-1})).item<double>() == 0.0);
  CHECK(max_difference(mha.attend(x, x, x, {.key_padding_mask = padding, .need_weights = false}).first, masked) < 1e-5);
}

TEST_CASE("MultiheadAttention: errors name the layer and the expected shapes") {
  CHECK_THAT(message_of<ValueError>([] { nn::MultiheadAttention(10, 3); }), Contains("multiple of num_heads"));
  nn::MultiheadAttention mha(8, 2, 0.0, true, true);
  CHECK_THAT(message_of<ShapeError>([&] {
               mha(zeros({2, 5, 6}));
             }),
             Contains("MultiheadAttention") && Contains("[N, L, E]") && Contains("embed_dim = 8"));
  CHECK_THAT(message_of<ShapeError>([&] {
               const Tensor x = zeros({2, 5, 8});
               mha.attend(x, x, x, {.attn_mask = zeros({4, 4}, {.dtype = DType::u8})});
             }),
             Contains("attn_mask of [L, S] = [5, 5]"));
}

TEST_CASE("MultiheadAttention: dropout only while training, from its own stream, kept by checkpoints") {
  Generator g(2);
  auto mha = std::make_shared<nn::MultiheadAttention>(8, 2, 0.5, true, true, &g, 77);
  const Tensor x = randn({2, 6, 8}, {}, &g);
  mha->eval();
  const Tensor quiet = (*mha)(x);
  CHECK(*mha->random_offset() == 0);
  mha->train();
  const Tensor first = (*mha)(x), second = (*mha)(x);
  CHECK(*mha->random_offset() == 2u * (2 * 2 * 6 * 6));  // N·H·L·S probabilities per call, two calls
  CHECK(max_difference(first, quiet) > 1e-3);
  CHECK(max_difference(first, second) > 1e-3);
  // The unfused path draws the same mask at the same position.
  *mha->random_offset() = 0;
  CHECK(max_difference(mha->attend(x, x, x).first, first) < 1e-5);
  nn::Sequential model{mha, std::make_shared<nn::Dropout>(0.1, 3)};
  CHECK(train::random_offsets(model).size() == 2);
}

TEST_CASE("MultiheadAttention: gradcheck through the fused path, in f64") {
  Generator g(4);
  nn::MultiheadAttention mha(4, 2, 0.0, true, true, &g);
  mha.to(DType::f64);
  const Tensor x = randn({2, 3, 4}, {.dtype = DType::f64}, &g).set_requires_grad();
  const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& v) { return mha(v[0]); }, {x});
  INFO(r.report);
  CHECK(r.passed);
}

TEST_CASE("VisionTransformer: torchvision's names, shapes, gradients and shape read back") {
  Generator g(5);
  auto model = nn::vit(tiny_vit(), &g);
  const std::vector<std::string> keys = names(*model);
  CHECK(keys.front() == "class_token");
  CHECK(keys[1] == "conv_proj.weight");
  CHECK(keys[3] == "encoder.pos_embedding");
  CHECK(keys[4] == "encoder.layers.encoder_layer_0.ln_1.weight");
  CHECK(std::find(keys.begin(), keys.end(), "encoder.layers.encoder_layer_1.mlp.3.bias") != keys.end());
  CHECK(keys.back() == "heads.head.bias");
  CHECK(model->state_dict()[3].second.shape() == Shape{1, 5, 8});  // (8/4)² patches and the class token
  const Tensor images = randn({4, 1, 8, 8}, {}, &g);
  const Tensor logits = (*model)(images);
  CHECK(logits.shape() == Shape{4, 3});
  CHECK(max(abs(logits).reshape({-1})).item<double>() == 0.0);  // torchvision's zero head
  cross_entropy(logits, from_vector<std::int64_t>({0, 1, 2, 1}, {4})).backward();
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK(p.grad().defined());
  }
  const nn::VitShape back = nn::vit_shape_of(model->state_dict(), "m", 2, 8, 8);
  CHECK((back.patch == 4 && back.hidden == 8 && back.depth == 2 && back.mlp == 16 && back.classes == 3));
  CHECK_THAT(message_of<FormatError>([&] { nn::vit_shape_of(model->state_dict(), "m.safetensors", 2, 12, 12); }),
             Contains("m.safetensors") && Contains("pos_embedding"));
  CHECK_THAT(message_of<ShapeError>([&] {
               (*model)(zeros({2, 1, 9, 9}));
             }),
             Contains("VisionTransformer") && Contains("[N, 1, 8, 8]"));
  CHECK_THAT(message_of<ValueError>([] {
               nn::VitShape bad = tiny_vit();
               bad.patch = 3;
               nn::vit(bad);
             }),
             Contains("patch size 3"));
}

TEST_CASE("VisionTransformer: gradcheck of a whole tiny model, in f64") {
  Generator g(6);
  nn::VitShape s = tiny_vit();
  s.depth = 1;
  auto model = nn::vit(s, &g);
  model->to(DType::f64);
  {
    const NoGradGuard no_grad;  // a nonzero head, or every input gradient is zero
    for (auto& [name, p] : model->named_parameters())
      if (name.rfind("heads.", 0) == 0) p.copy_(randn(p.shape(), {.dtype = DType::f64}, &g));
  }
  const Tensor images = randn({2, 1, 8, 8}, {.dtype = DType::f64}, &g).set_requires_grad();
  const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& v) { return (*model)(v[0]); }, {images});
  INFO(r.report);
  CHECK(r.passed);
}

TEST_CASE("Sequential: children named as appended, as from PyTorch's OrderedDict") {
  nn::Sequential heads;
  heads.append("head", std::make_shared<nn::Linear>(4, 2));
  CHECK(names(heads) == std::vector<std::string>{"head.weight", "head.bias"});
  CHECK_THAT(message_of<ValueError>([&] { heads.append("head", std::make_shared<nn::ReLU>()); }),
             Contains("exists already"));
}

TEST_CASE("TransformerEncoderLayer: PyTorch's names, both norm orders, dropout only in training, clear errors") {
  Generator g(3);
  nn::TransformerEncoderLayer post(8, 2, {.dim_feedforward = 16, .dropout = 0.0}, &g);
  CHECK(names(post) == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                                "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                                "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                                                "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  const Tensor x = randn({5, 3, 8}, {}, &g);  // [L, N, E]
  const Tensor y = post(x);
  CHECK(y.shape() == x.shape());
  // Post-norm ends in norm2 (weight 1, bias 0): every token of the output has mean 0.
  CHECK(max(abs(mean(y, -1)).reshape({-1})).item<double>() < 1e-5);
  nn::TransformerEncoderLayer pre(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .norm_first = true}, &g);
  CHECK(max(abs(mean(pre(x), -1)).reshape({-1})).item<double>() > 1e-3);  // ends in a residual sum
  nn::TransformerEncoderLayer dropped(8, 2, {.dim_feedforward = 16, .dropout = 0.5, .batch_first = true}, &g);
  const Tensor batch_first = randn({3, 5, 8}, {}, &g);
  dropped.eval();
  CHECK(max_difference(dropped(batch_first), dropped(batch_first)) == 0.0);
  dropped.train();
  CHECK(max_difference(dropped(batch_first), dropped(batch_first)) > 0.0);  // the streams move on
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"}),
                    Contains("activation must be \"relu\" or \"gelu\", got \"tanh\""));
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(8, 3), Contains("multiple of num_heads"));
}

TEST_CASE("Embedding: rows by index, repeats summed in the gradient, padding_idx, clear errors") {
  Generator g(3);
  nn::Embedding table(5, 3, -1, &g);  // padding_idx -1 is row 4
  CHECK(names(table) == std::vector<std::string>{"weight"});
  CHECK(table.extra_repr() == "5, 3, padding_idx=4");
  CHECK(table.weight().narrow(0, 4, 1).to_vector<float>() == std::vector<float>(3, 0.0f));
  const Tensor index = from_vector<std::int64_t>({1, 4, 1, 0, 2, 1}, {2, 3});
  const Tensor out = table(index);
  CHECK(out.shape() == Shape{2, 3, 3});
  CHECK(out.narrow(0, 1, 1).reshape({3, 3}).narrow(0, 0, 1).to_vector<float>() ==
        table.weight().narrow(0, 0, 1).to_vector<float>());
  const Tensor upstream = randn({2, 3, 3}, {}, &g);
  sum(mul(out, upstream)).backward();
  const std::vector<float> grad = table.weight().grad().to_vector<float>(), dy = upstream.to_vector<float>();
  for (std::size_t c = 0; c < 3; ++c) {
    CHECK(grad[3 + c] == dy[c] + dy[6 + c] + dy[15 + c]);  // row 1, at positions 0, 2 and 5, in that order
    CHECK(grad[9 + c] == 0.0f);                            // row 3: never looked up
    CHECK(grad[12 + c] == 0.0f);                           // row 4: the padding row
  }
  // i32 indices give the same rows.
  CHECK(table(index.to(DType::i32)).to_vector<float>() == out.to_vector<float>());
  CHECK_THAT(message_of<IndexError>([&] {
               table(from_vector<std::int64_t>({0, 5, -1}, {3}));
             }),
             Contains("embedding: index 5 at position 1 of the input is out of range [0, 5)"));
  CHECK_THAT(message_of<DTypeError>([&] { table(from_vector<float>({0, 1}, {2})); }), Contains("embedding"));
  CHECK_THAT(message_of<ValueError>([&] { embedding(index, table.weight(), 5); }),
             Contains("embedding: padding_idx 5 must be within [-num_embeddings, num_embeddings) = [-5, 5)"));
  CHECK_THROWS_AS(nn::Embedding(3, 2, 3), ValueError);
  CHECK_THROWS_AS(embedding(index, ones({5})), ShapeError);
}

TEST_CASE("Embedding: gradcheck in f64, with repeated indices") {
  Generator g(4);
  const Tensor weight = randn({4, 3}, {.dtype = DType::f64}, &g).set_requires_grad();
  const Tensor index = from_vector<std::int32_t>({3, 0, 3, 2, 3}, {5});
  const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& x) { return embedding(index, x[0]); }, {weight});
  INFO(r.report);
  CHECK(r.passed);
}

TEST_CASE("VisionTransformer and TransformerEncoderLayer under bf16 autocast: an f32 residual stream") {
  // The blocks' products return bf16 and the residual stream is f32 (the class token and position
  // embedding): the residual adds widen the bf16 branch, as PyTorch's type promotion does.
  Generator g(8);
  auto model = nn::vit(tiny_vit(), &g);
  const Tensor images = randn({4, 1, 8, 8}, {}, &g);
  const Tensor labels = from_vector<std::int64_t>({0, 2, 1, 2}, {4});
  const Tensor exact = (*model)(images);
  Tensor logits, loss;
  {
    const auto scope = autocast(Device::cpu(), DType::bf16);
    logits = (*model)(images);
    loss = cross_entropy(logits, labels, 0.1);
  }
  CHECK(logits.dtype() == DType::bf16);  // the head is a Linear
  CHECK(loss.dtype() == DType::f32);
  // bf16 products (8 significant bits) through four blocks: a few hundredths of logits around 1.
  CHECK(max_difference(logits.to(DType::f32), exact) < 0.1);
  loss.backward();
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::f32);
  }
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true}, &g);
  const Tensor src = randn({2, 5, 8}, {}, &g);
  const auto scope = autocast(Device::cpu(), DType::bf16);
  CHECK(layer(src).dtype() == DType::f32);  // the last LayerNorm gets the f32 stream
}
