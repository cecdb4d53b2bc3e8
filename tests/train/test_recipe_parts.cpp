// The pieces of a transformer's recipe: label smoothing, gradient clipping by global norm, chained
// schedules advanced per step, and the autograd step that applies them (PyTorch's values are
// compared in tests/interop/vit_torch.py).
#include <catch2/catch.hpp>

#include <cmath>

#include "core/ops/gradcheck.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/clip_grad.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "support/helpers.h"
#include "train/make_step.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

TEST_CASE("cross_entropy with label smoothing: the formula in f64, gradcheck, ε = 0 unchanged") {
  Generator g(1);
  const Tensor logits = randn({4, 5}, {.dtype = DType::f64}, &g);
  const Tensor target = from_vector<std::int64_t>({0, 3, 4, 1}, {4});
  const double eps = 0.2;
  // By hand: Σ_rows Σ_c −q_c·log p_c / rows with q = (1 − ε)·onehot + ε/C.
  const std::vector<double> z = logits.to_vector<double>();
  double expected = 0;
  for (int r = 0; r < 4; ++r) {
    double m = -1e300, s = 0;
    for (int c = 0; c < 5; ++c) m = std::max(m, z[r * 5 + c]);
    for (int c = 0; c < 5; ++c) s += std::exp(z[r * 5 + c] - m);
    for (int c = 0; c < 5; ++c) {
      const double log_p = z[r * 5 + c] - m - std::log(s);
      const double q = (c == target.to_vector<std::int64_t>()[r] ? 1 - eps : 0) + eps / 5;
      expected -= q * log_p / 4;
    }
  }
  CHECK(cross_entropy(logits, target, eps).item<double>() == Approx(expected).epsilon(1e-12));
  CHECK(cross_entropy(logits, target, 0.0).item<double>() == cross_entropy(logits, target).item<double>());
  const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& v) { return cross_entropy(v[0], target, eps); },
                                      {logits.clone().set_requires_grad()});
  INFO(r.report);
  CHECK(r.passed);
  CHECK_THAT(message_of<ValueError>([&] { cross_entropy(logits, target, 1.5); }), Contains("label_smoothing"));
}

TEST_CASE("clip_grad_norm: PyTorch's coefficient over all gradients, the norm before clipping") {
  Tensor a = zeros({2}).set_requires_grad(), b = zeros({1}).set_requires_grad(), none = zeros({3});
  (sum(mul(a, from_vector<float>({3, 0}, {2}))) + sum(mul(b, from_vector<float>({4}, {1})))).backward();
  const double norm = optim::clip_grad_norm({a, b, none}, 1.0);
  CHECK(norm == Approx(5.0));
  const double k = 1.0 / (5.0 + 1e-6);
  CHECK(a.grad().to_vector<float>()[0] == Approx(3 * k).epsilon(1e-6));
  CHECK(b.grad().to_vector<float>()[0] == Approx(4 * k).epsilon(1e-6));
  // Below the bound: untouched.
  CHECK(optim::clip_grad_norm({a, b}, 10.0) == Approx(1.0).epsilon(1e-5));
  CHECK(b.grad().to_vector<float>()[0] == Approx(4 * k).epsilon(1e-6));
  CHECK_THAT(message_of<ValueError>([&] { optim::clip_grad_norm({a}, 0.0); }), Contains("max_norm"));
}

TEST_CASE("SequentialLR: a warm-up then a cosine, per step, in closed form") {
  Tensor w = zeros({1}).set_requires_grad();
  optim::SGD sgd({w}, {.lr = 0.1});
  std::vector<std::unique_ptr<optim::LRScheduler>> parts;
  parts.push_back(std::make_unique<optim::LinearWarmup>(sgd, 4, 0.01));
  parts.push_back(std::make_unique<optim::CosineAnnealingLR>(sgd, 6));
  optim::SequentialLR schedule(sgd, std::move(parts), {4});
  std::vector<double> rates{sgd.param_groups()[0].options.lr};
  for (int t = 0; t < 10; ++t) {
    schedule.step();
    rates.push_back(sgd.param_groups()[0].options.lr);
  }
  const double pi = std::acos(-1.0);
  for (int t = 0; t <= 10; ++t) {
    INFO("step " << t);
    const double want = t < 4 ? 0.1 * (0.01 + 0.99 * t / 4.0) : 0.1 * (1 + std::cos(pi * (t - 4) / 6.0)) / 2;
    CHECK(rates[static_cast<std::size_t>(t)] == Approx(want).margin(1e-15));
  }
  schedule.set_last_epoch(7);  // a resume: the same rate as stepping there
  CHECK(sgd.param_groups()[0].options.lr == Approx(rates[7]).margin(1e-15));
  CHECK_THAT(message_of<ValueError>([&] {
               std::vector<std::unique_ptr<optim::LRScheduler>> one;
               one.push_back(std::make_unique<optim::StepLR>(sgd, 1));
               optim::SequentialLR(sgd, std::move(one), {3});
             }),
             Contains("one milestone fewer"));
}

namespace {

// The step make_step builds for a seeded 6-5-3 MLP and SGD, as `choice` asks, clipping and smoothing.
struct SmallRun {
  Generator g{3};
  std::shared_ptr<nn::Sequential> model = nn::mlp(6, {5}, 3, &g);
  optim::SGD sgd{model->parameters(), {.lr = 0.5}};
  std::unique_ptr<train::Step> make(train::StepChoice choice, double clip, double smoothing) {
    train::StepOptions options;
    options.choice = choice;
    options.batch_size = 4;
    options.autograd.clip_grad_norm = clip;
    options.loss = nn::Loss::cross_entropy({.label_smoothing = smoothing});
    return train::make_step(*model, sgd, options).step;
  }
};

}  // namespace

TEST_CASE("The autograd step clips and smooths as asked; the fused step refuses them") {
  auto run = [](double clip, double smoothing) {
    SmallRun r;
    auto step = r.make(train::StepChoice::autograd, clip, smoothing);
    CHECK(step->kind() == "autograd");
    const Tensor x = randn({4, 6}, {}, &r.g) * 10.0;
    step->step(x, from_vector<std::int64_t>({0, 1, 2, 0}, {4}));
    double sq = 0;  // the gradients' norm after the step's clipping
    for (const Tensor& p : r.model->parameters())
      for (float v : p.grad().to_vector<float>()) sq += static_cast<double>(v) * v;
    return std::pair{std::sqrt(sq), step->batch_loss().item<double>()};
  };
  const auto [free_norm, hard_loss] = run(0.0, 0.0);
  const auto [clipped_norm, same_loss] = run(0.25, 0.0);
  REQUIRE(free_norm > 0.25);
  CHECK(clipped_norm == Approx(0.25).epsilon(1e-4));
  CHECK(same_loss == hard_loss);
  CHECK(run(0.0, 0.3).second != hard_loss);
  SmallRun fused;
  CHECK_THAT(message_of<ValueError>([&] { fused.make(train::StepChoice::fused, 1.0, 0.0); }),
             Contains("gradient clipping"));
  CHECK_THAT(message_of<ValueError>([&] { fused.make(train::StepChoice::fused, 0.0, 0.1); }),
             Contains("label_smoothing=0.1"));
}
