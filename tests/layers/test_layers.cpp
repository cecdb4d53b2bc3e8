// nn::Module and the built-in layers: names, initialization, modes, state dicts, summaries,
// checkpoints, and LeakyReLU (the layer with its own kernels).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>

#include <unistd.h>
#include <cmath>

#include <filesystem>

#include "core/ops/gradcheck.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/optimizer.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

namespace {

// The tutorial's 784-hidden-10 MLP, initialized from `seed`.
std::shared_ptr<nn::Sequential> mlp(std::int64_t hidden, std::uint64_t seed) {
  Generator g(seed);
  return nn::mlp(784, {hidden}, 10, &g);
}

// A module composed of others, with PyTorch-style attribute names.
class TwoLayer : public nn::Module {
 public:
  TwoLayer() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 2, false));
    register_buffer("scale", full({1}, 2.0));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x))); }
  std::string type_name() const override { return "TwoLayer"; }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ember_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST_CASE("a layer shared between two places: parameters once, state_dict under both names, one update") {
  Generator g(3);
  auto shared = std::make_shared<nn::Linear>(3, 3, true, &g);
  nn::Sequential model{shared, std::make_shared<nn::ReLU>(), shared};
  std::vector<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias"});
  CHECK(model.parameters().size() == 2);
  CHECK(model.parameter_count() == 12);
  const StateDict state = model.state_dict();
  CHECK(find_tensor(state, "0.weight") != nullptr);
  CHECK(find_tensor(state, "2.weight") != nullptr);  // as PyTorch's state_dict keeps both
  CHECK(state.size() == 4);
  // One SGD step changes the weight by lr·grad once, not twice.
  optim::SGD sgd(model.parameters(), {.lr = 0.5});
  const Tensor x = randn({2, 3}, {}, &g);
  sum(model(x)).backward();
  const std::vector<float> w = shared->weight().to_vector<float>(), grad = shared->weight().grad().to_vector<float>();
  sgd.step();
  std::vector<float> expected(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) expected[i] = w[i] - 0.5f * grad[i];
  EMBER_REQUIRE_CLOSE(shared->weight().to_vector<float>(), expected, 0.0, 1e-6);
}

TEST_CASE("PyTorch spellings build a Sequential, and a wrong input shape names the layer") {
  auto a = std::make_shared<nn::Linear>(4, 3), b = std::make_shared<nn::Linear>(3, 2);
  auto model = std::make_shared<nn::Sequential>(a, std::make_shared<nn::GELU>("tanh"), b);
  CHECK(model->size() == 3);
  nn::Sequential braced{a, std::make_shared<nn::Tanh>(), b};
  CHECK(braced.size() == 3);
  CHECK_THAT(message_of<ShapeError>([&] {
               (*model)(zeros({2, 5}));
             }),
             Contains("Linear '0': expected an input whose last dim is in_features = 4, got an input of shape [2, 5]"));
  CHECK_THAT(message_of<ShapeError>([&] {
               nn::Conv2d(3, 4, 3)(zeros({1, 2, 8, 8}));
             }),
             Contains("Conv2d: expected [N, 3 (in_channels), H, W]"));
  CHECK(nn::LayerNorm({3}).repr() == "LayerNorm((3,), eps=1e-05, elementwise_affine=True)");
  CHECK(nn::GELU("tanh").repr() == "GELU(approximate='tanh')");
  CHECK_THROWS_AS(nn::GELU("fast"), ValueError);
}

TEST_CASE("an optimizer given the same tensor twice refuses it, naming both places") {
  auto layer = std::make_shared<nn::Linear>(2, 2);
  std::vector<Tensor> params = layer->parameters();
  params.push_back(layer->weight());
  const std::string message = message_of<ValueError>([&] { optim::SGD sgd(params, {.lr = 0.1}); });
  CHECK_THAT(message, Contains("the same tensor twice: parameter 2 of group 0 is parameter 0 of group 0"));
  CHECK_THROWS_AS(optim::Adam(std::vector<optim::ParamGroup>{{{layer->weight()}, {}}, {{layer->weight()}, {}}}),
                  ValueError);
}

TEST_CASE("Sequential names its children 0, 1, ... and parameters with dotted names") {
  auto model = mlp(32, 0);
  std::vector<std::string> names;
  for (const auto& [name, p] : model->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(model->parameter_count() == 784 * 32 + 32 + 32 * 10 + 10);
  CHECK(model->parameters().size() == 4);
  CHECK(model->repr() ==
        "Sequential(\n"
        "  (0): Linear(in_features=784, out_features=32, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=32, out_features=10, bias=True)\n"
        ")");
  const Tensor y = (*model)(rand({5, 784}));
  CHECK(y.shape() == Shape{5, 10});
  TwoLayer two;
  names.clear();
  for (const auto& [name, t] : two.state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight"});
  CHECK(two.named_buffers().size() == 1);
  CHECK(two.fc1->name() == "fc1");
}

TEST_CASE("Sequential's fused Linear+ReLU gives the plain path's values and gradients") {
  Generator g(9);
  auto model = nn::mlp(784, {16}, 10, &g);
  // By default nn::mlp fuses nothing: linear_relu rounds its bias differently, so it is opt-in.
  CHECK_FALSE(model->fused_at(0));
  CHECK(nn::mlp(784, {16}, 10, &g, FusionOptions::all())->fused_at(0));
  const Tensor x = rand({6, 784});
  const Tensor y = randint(0, 10, {6}, {.dtype = DType::i64});
  std::vector<std::vector<float>> outputs, grads;
  for (bool fused : {true, false}) {
    if (fused)
      CHECK(model->fuse(FusionOptions::all()) == 1);
    else
      model->unfuse();
    CHECK(model->fused_at(0) == fused);
    model->zero_grad();
    const Tensor logits = (*model)(x);
    outputs.push_back(logits.to_vector<float>());
    cross_entropy(logits, y).backward();
    std::vector<float> all;
    for (const Tensor& p : model->parameters()) {
      const auto g = p.grad().to_vector<float>();
      all.insert(all.end(), g.begin(), g.end());
    }
    grads.push_back(all);
  }
  EMBER_REQUIRE_CLOSE(outputs[0], outputs[1], 1e-6, 1e-5);
  EMBER_REQUIRE_CLOSE(grads[0], grads[1], 1e-7, 1e-5);
}

namespace {
// A Linear whose forward does something else: fusing it would silently skip that.
class DoublingLinear : public nn::Linear {
 public:
  using nn::Linear::Linear;
  Tensor forward(const Tensor& input) override { return nn::Linear::forward(input) * 2.0; }
};
}  // namespace

TEST_CASE("fusing Linear→ReLU never bypasses a subclass's forward, and follows the switch") {
  nn::Sequential model{std::make_shared<DoublingLinear>(3, 2), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::ReLU>()};
  CHECK(model.fuse(FusionOptions::all()) == 1);  // only the plain Linear at 2
  CHECK((!model.fused_at(0) && model.fused_at(2)));
  const Tensor x = ones({1, 3});
  const auto& first = static_cast<const nn::Linear&>(*model.named_children()[0].second);
  const Tensor expected = relu(linear(x, first.weight(), first.bias()) * 2.0);
  const auto& second = static_cast<const nn::Linear&>(*model.named_children()[2].second);
  EMBER_REQUIRE_CLOSE(model(x).to_vector<float>(),
                      relu(linear(expected, second.weight(), second.bias())).to_vector<float>(), 1e-6, 1e-6);
  const FusionScope unfused(false);
  CHECK(model.fuse(FusionOptions::all()) == 0);  // the off-switch wins over the options
  CHECK_FALSE(model.fused_at(2));
  CHECK_FALSE(nn::mlp(4, {4}, 2, nullptr, FusionOptions::all())->fused_at(0));
}

TEST_CASE("FusionOptions fuse exactly the groups they name") {
  Generator g(2);
  auto model = nn::cnn(nn::CnnShape{.c1 = 2, .c2 = 3, .hidden = 4}, &g, FusionOptions::none());
  CHECK(model->fuse(FusionOptions::none()) == 0);
  // Conv2d(0)→ReLU, Conv2d(2)→ReLU→MaxPool2d(4), Linear(7)→ReLU.
  CHECK(model->fuse({}) == 2);  // the defaults: both convolutions, not the Linear
  CHECK((model->fused_with(0) == 1 && model->fused_with(2) == 2 && !model->fused_at(7)));
  CHECK(model->fuse({.conv2d_relu = true, .conv2d_relu_max_pool2d = false, .linear_relu = false}) == 2);
  CHECK((model->fused_with(0) == 1 && model->fused_with(2) == 1));
  CHECK(model->fuse({.conv2d_relu = false, .conv2d_relu_max_pool2d = true, .linear_relu = true}) == 2);
  CHECK((!model->fused_at(0) && model->fused_with(2) == 2 && model->fused_with(7) == 1));
}

TEST_CASE("FusionScope restores the fusion switch at the end of its scope, also when an exception ends it") {
  const bool before = fusion_enabled();
  try {
    const FusionScope flipped(!before);
    CHECK(fusion_enabled() == !before);
    throw std::runtime_error("leaving the scope");
  } catch (const std::runtime_error&) {
  }
  CHECK(fusion_enabled() == before);
}

TEST_CASE("Linear uses PyTorch's default initialization from the seeded generator") {
  Generator a(3), b(3);
  nn::Linear l1(100, 50, true, &a), l2(100, 50, true, &b);
  CHECK(l1.weight().to_vector<float>() == l2.weight().to_vector<float>());
  const double bound = 1.0 / std::sqrt(100.0);
  const auto w = l1.weight().to_vector<float>();
  double sum = 0, sq = 0;
  for (float v : w) {
    CHECK(std::abs(v) <= bound);
    sum += v;
    sq += v * v;
  }
  // U(−b, b) has mean 0 and variance b²/3.
  CHECK(sum / w.size() == Approx(0.0).margin(0.005));
  CHECK(sq / w.size() == Approx(bound * bound / 3).epsilon(0.05));
  for (float v : l1.bias().to_vector<float>()) CHECK(std::abs(v) <= bound);
  CHECK(l1.weight().shape() == Shape{50, 100});
  CHECK(l1.weight().requires_grad());
  CHECK_THROWS_AS(nn::Linear(0, 3), ValueError);
}

TEST_CASE("train/eval reach every submodule; Dropout is seeded and the identity in eval") {
  auto model = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::Dropout>(0.25, 7)});
  CHECK(model->is_training());
  const Tensor x = ones({10000});
  const auto y = (*model)(x).to_vector<float>();
  std::size_t zeros_count = 0;
  for (float v : y) {
    CHECK((v == 0.0f || v == Approx(1.0f / 0.75f)));
    zeros_count += v == 0.0f;
  }
  CHECK(zeros_count / 10000.0 == Approx(0.25).margin(0.02));
  nn::Dropout same(0.25, 7);
  CHECK(same(x).to_vector<float>() == y);
  model->eval();
  CHECK_FALSE(model->named_children()[0].second->is_training());
  CHECK((*model)(x).to_vector<float>() == x.to_vector<float>());
  CHECK_THROWS_AS(nn::Dropout(1.5), ValueError);
  CHECK(nn::Flatten()(zeros({2, 1, 28, 28})).shape() == Shape{2, 784});
}

TEST_CASE("zero_grad drops or zeroes gradients") {
  auto model = mlp(8, 1);
  sum((*model)(rand({2, 784}))).backward();
  for (const Tensor& p : model->parameters()) CHECK(p.grad().defined());
  model->zero_grad(false);
  for (const Tensor& p : model->parameters()) {
    REQUIRE(p.grad().defined());
    for (float v : p.grad().to_vector<float>()) CHECK(v == 0.0f);
  }
  model->zero_grad();
  for (const Tensor& p : model->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("Module::to(dtype) converts floating parameters, buffers and gradients in place, integer buffers kept") {
  Generator g(3);
  nn::Sequential model{std::make_shared<nn::Conv2d>(1, 2, 3, 1, 0, true, &g), std::make_shared<nn::BatchNorm2d>(2),
                       std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(2 * 4 * 4, 3, true, &g)};
  const Tensor x = rand({2, 1, 6, 6}, {}, &g);
  sum(model(x)).backward();
  const Tensor weight = model.named_parameters().front().second;  // a handle taken before the conversion
  const std::vector<float> before = weight.to_vector<float>();
  model.to(DType::bf16);
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    CHECK(p.dtype() == DType::bf16);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::bf16);
  }
  for (const auto& [name, b] : model.named_buffers()) {
    INFO(name);
    CHECK(b.dtype() == (name.find("num_batches_tracked") != std::string::npos ? DType::i64 : DType::bf16));
  }
  CHECK(weight.dtype() == DType::bf16);  // in place: every handle sees it
  CHECK(weight.to_vector<float>() == from_vector<float>(before, weight.shape()).to(DType::bf16).to_vector<float>());
  CHECK(model(x.to(DType::bf16)).dtype() == DType::bf16);  // a bf16 model runs on bf16 inputs
  CHECK_THROWS_AS(model.to(DType::i32), DTypeError);
}

TEST_CASE("state_dict round trip and load_state_dict's errors") {
  auto a = mlp(16, 1), b = mlp(16, 2);
  const Tensor x = rand({3, 784});
  CHECK((*a)(x).to_vector<float>() != (*b)(x).to_vector<float>());
  b->load_state_dict(a->state_dict());
  CHECK((*a)(x).to_vector<float>() == (*b)(x).to_vector<float>());

  StateDict partial = a->state_dict();
  partial.pop_back();
  partial.emplace_back("3.weight", zeros({1}));
  const std::string message = message_of<ValueError>([&] { b->load_state_dict(partial); });
  CHECK_THAT(message, Contains("Error(s) in loading state_dict for Sequential"));
  CHECK_THAT(message, Contains("Missing key(s) in state_dict: \"2.bias\""));
  CHECK_THAT(message, Contains("Unexpected key(s) in state_dict: \"3.weight\""));
  CHECK_NOTHROW(b->load_state_dict(partial, /*strict=*/false));

  auto wrong = mlp(20, 3);
  CHECK_THAT(message_of<ValueError>([&] { b->load_state_dict(wrong->state_dict()); }),
             Contains("size mismatch for 0.weight: copying a param with shape [20, 784] from checkpoint, the shape "
                      "in current model is [16, 784]"));
  StateDict typed = a->state_dict();
  typed[1].second = typed[1].second.to(DType::f64);
  CHECK_THAT(message_of<ValueError>([&] { b->load_state_dict(typed, false); }),
             Contains("dtype mismatch for 0.bias: the checkpoint has f64, the current model has f32"));
}

TEST_CASE("save and load a model checkpoint with metadata") {
  auto a = mlp(12, 4), b = mlp(12, 5);
  const std::string path = temp_path("model.safetensors");
  nn::save(*a, path, {{"epoch", "3"}});
  const auto metadata = nn::load(*b, path);
  CHECK(metadata.at("epoch") == "3");
  CHECK(metadata.at("format") == "ember");
  CHECK_THAT(metadata.at("model"), Contains("Linear(in_features=784, out_features=12, bias=True)"));
  const Tensor x = rand({2, 784});
  CHECK((*a)(x).to_vector<float>() == (*b)(x).to_vector<float>());
  auto small = mlp(10, 6);
  CHECK_THAT(message_of<ValueError>([&] { nn::load(*small, path); }), Contains(path));
  std::filesystem::remove(path);
}

TEST_CASE("LeakyReLU: values, gradcheck, accumulation") {
  const Tensor x = from_vector<float>({-2, -0.5f, 0.5f, 3}, {4});
  CHECK(nn::LeakyReLU(0.1)(x).to_vector<float>() == std::vector<float>{-0.2f, -0.05f, 0.5f, 3.0f});
  CHECK(nn::LeakyReLU(0.2).repr() == "LeakyReLU(negative_slope=0.2)");
  const Tensor in = from_vector<double>({-0.9, -0.3, 0.2, 0.7, 1.5, -2.0}, {2, 3}).set_requires_grad();
  const auto fn = [](const std::vector<Tensor>& v) { return nn::leaky_relu(v[0], 0.05); };
  const GradcheckResult r = gradcheck(fn, {in});
  INFO(r.report);
  CHECK(r.passed);
  Tensor leaf = in.detach().clone().set_requires_grad();
  sum(nn::leaky_relu(leaf, 0.05)).backward();
  sum(nn::leaky_relu(leaf, 0.05)).backward();
  CHECK(leaf.grad().to_vector<double>() == std::vector<double>{0.1, 0.1, 2, 2, 2, 0.1});
  // As in PyTorch: −0 stays −0, NaN stays NaN, ±∞ keep their sign (one formula on both backends).
  const float inf = std::numeric_limits<float>::infinity();
  const auto special =
      nn::leaky_relu(from_vector<float>({-0.0f, std::nanf(""), inf, -inf}, {4}), 0.1).to_vector<float>();
  CHECK((special[0] == 0.0f && std::signbit(special[0])));
  CHECK(std::isnan(special[1]));
  CHECK((special[2] == inf && special[3] == -inf));
}
