// Every differentiable op of the op table against finite differences (gradcheck, f64, CPU), every
// op's backward accumulating into an existing .grad, and small models written with ember ops.
#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include "core/ops/gradcheck.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "core/tensor/random.h"
#include "layers/nn.h"
#include "support/helpers.h"
#include "support/op_table.h"

using namespace ember;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor input(const Shape& shape, std::uint64_t seed, double low = -1.0, double high = 1.0) {
  Generator g(seed);
  return uniform(shape, low, high, {.dtype = DType::f64}, &g).set_requires_grad();
}

void require_gradcheck(const Fn& fn, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(fn, inputs);
  INFO(r.report);
  REQUIRE(r.passed);
}

// backward twice into the same leaves gives twice the gradient of once: .grad accumulates.
void require_accumulates(const Fn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.detach().clone().set_requires_grad(t.requires_grad()));
  auto scalar = [&] { return sum(fn(leaves) * fn(leaves).detach()); };  // a non-trivial upstream gradient
  scalar().backward();
  std::vector<std::vector<double>> once;
  for (const Tensor& t : leaves)
    once.push_back(t.requires_grad() ? t.grad().to_vector<double>() : std::vector<double>{});
  scalar().backward();
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (!leaves[i].requires_grad()) continue;
    const auto twice = leaves[i].grad().to_vector<double>();
    std::vector<double> expected;
    for (double v : once[i]) expected.push_back(2 * v);
    EMBER_REQUIRE_CLOSE(twice, expected, 1e-12, 1e-12);
  }
}

}  // namespace

// Every sample of every differentiable op in the op table (tests/support/op_table.h) but those at
// kinks and ties and the large shapes kept for the devices.
TEST_CASE("every differentiable op passes gradcheck and accumulates into .grad") {
  for (const testing::OpInfo& op : testing::op_table()) {
    if (!op.differentiable) continue;
    for (const testing::Sample& s : op.samples()) {
      const std::vector<std::size_t> differentiated = testing::differentiated_inputs(op, s);
      if (!s.gradcheck || differentiated.empty()) continue;
      SECTION(op.name + ": " + s.label) {
        // gradcheck perturbs every input it is given: it gets the differentiated ones, and the
        // others (targets, masks, running statistics) stay as they are.
        std::vector<Tensor> leaves;
        for (std::size_t i : differentiated) leaves.push_back(s.inputs[i].clone().set_requires_grad());
        const Fn fn = [&](const std::vector<Tensor>& x) {
          std::vector<Tensor> all = s.inputs;
          for (std::size_t k = 0; k < differentiated.size(); ++k) all[differentiated[k]] = x[k];
          return s.apply(all);
        };
        require_gradcheck(fn, leaves);
        require_accumulates(fn, leaves);
      }
    }
  }
}

TEST_CASE("gradcheck reports a wrong derivative rule") {
  Fn wrong = [](const std::vector<Tensor>& x) {
    Tensor y = exp(x[0].detach());
    if (autograd::needs_recording({&x[0]})) {
      autograd::record(y, "wrong_exp", {&x[0]}, [y_saved = y.detach()](const Tensor& g, autograd::NeedsGrad) {
        return autograd::Gradients{mul(g, y_saved) * 1.01};  // off by 1%
      });
    }
    return y;
  };
  const GradcheckResult r = gradcheck(wrong, {input({4}, 1)});
  CHECK_FALSE(r.passed);
  CHECK(r.max_rel_error[0] == Approx(0.01).epsilon(0.01));
  CHECK_THAT(r.report, Catch::Matchers::Contains("input 0"));
  CHECK_THROWS_AS(gradcheck(wrong, {ones({2})}), DTypeError);  // f32 inputs are refused
}

TEST_CASE("GELU built from existing ops (tanh form) passes gradcheck with no new kernel") {
  Fn gelu = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    const double c = std::sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * pow(x, 3.0))));
  };
  require_gradcheck(gelu, {input({2, 5}, 21, -3, 3)});
}

TEST_CASE("a two-layer MLP written with ember ops: gradients match finite differences; SGD lowers the loss") {
  const Tensor x = input({8, 6}, 31).detach();
  const Tensor y = from_vector<std::int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8});
  std::vector<Tensor> params{input({5, 6}, 32), input({5}, 33), input({3, 5}, 34), input({3}, 35)};
  Fn loss_fn = [&](const std::vector<Tensor>& p) {
    return cross_entropy(linear(relu(linear(x, p[0], p[1])), p[2], p[3]), y);
  };
  require_gradcheck(loss_fn, params);

  const double before = loss_fn(params).item<double>();
  loss_fn(params).backward();
  {
    NoGradGuard no_grad;
    for (Tensor& p : params) add_(p, p.grad() * -0.5);
  }
  const double after = loss_fn(params).item<double>();
  CHECK(after < before);
}

TEST_CASE("the modules written from ops pass gradcheck: LayerNorm, GELU (both), Softmax, LogSoftmax, Tanh, Sigmoid") {
  Generator g(21);
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> modules{
      {"GELU", std::make_shared<nn::GELU>()},
      {"GELU (tanh)", std::make_shared<nn::GELU>("tanh")},
      {"Softmax (dim 1)", std::make_shared<nn::Softmax>(1)},
      {"LogSoftmax", std::make_shared<nn::LogSoftmax>()},
      {"Tanh", std::make_shared<nn::Tanh>()},
      {"Sigmoid", std::make_shared<nn::Sigmoid>()},
  };
  for (auto& [name, module] : modules) {
    SECTION(name) {
      auto m = module;
      require_gradcheck([m](auto& x) { return (*m)(x[0]); }, {input({3, 4}, 22)});
    }
  }
  SECTION("LayerNorm (its input, weight and bias)") {
    // The module's parameters are f32; gradcheck runs in f64, so the same formula with f64 leaves.
    require_gradcheck(
        [](auto& x) {
          const Tensor c = x[0] - mean(x[0], -1, true);
          return c * rsqrt(var(x[0], -1, 0, true) + 1e-5) * x[1] + x[2];
        },
        {input({3, 4}, 23), input({4}, 24, 0.5, 1.5), input({4}, 25)});
    // The module (f32 parameters) computes that formula: rows of mean 0 and biased variance 1.
    const Tensor x = uniform({3, 4}, -1, 1, {}, &g);
    nn::LayerNorm norm({4});
    const Tensor y = norm(x);
    for (float v : mean(y, -1).to_vector<float>()) CHECK(v == Approx(0.0f).margin(1e-6));
    // Each row's variance becomes v/(v + eps), not quite 1.
    const auto v_in = var(x, -1, 0).to_vector<float>(), v_out = var(y, -1, 0).to_vector<float>();
    for (std::size_t r = 0; r < v_in.size(); ++r) CHECK(v_out[r] == Approx(v_in[r] / (v_in[r] + 1e-5f)).epsilon(1e-5));
    CHECK(norm.named_parameters().size() == 2);
    CHECK_THROWS_WITH(norm(zeros({3, 5})),
                      Catch::Contains("LayerNorm: expected an input ending in normalized_shape [4]"));
  }
}