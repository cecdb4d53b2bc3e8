// Optimizers against hand-computed references, their state across a save and load, and the
// learning-rate schedulers — written once for "a device" and run on each (optim_cpu, optim_cuda:
// the CUDA side's multi-tensor update kernels against the same references).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "core/io/serialize.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "support/device_under_test.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::device_under_test;
using ember::testing::message_of;

namespace {

// Sets p.grad to `g` (a fixed gradient for every step, so the references are easy to compute).
void set_grad(Tensor& p, const std::vector<float>& g) { p.set_grad(from_vector(g, p.shape()).to(p.device())); }

// A parameter on the device under test.
Tensor param(const std::vector<float>& v) {
  return from_vector(v, {static_cast<std::int64_t>(v.size())}).to(device_under_test()).set_requires_grad();
}

// What the host reads back: a tensor's values, or its one value.
std::vector<float> values_of(const Tensor& t) { return t.cpu().to_vector<float>(); }
float value_of(const Tensor& t) { return t.cpu().item<float>(); }

}  // namespace

TEST_CASE("SGD without momentum: p -= lr·(g + wd·p)") {
  Tensor p = param({1.0f, -2.0f});
  optim::SGD sgd({p}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(p, {0.5f, 1.0f});
  sgd.step();
  // p0 = 1: 1 − 0.1·(0.5 + 0.5·1) = 0.9;  p0 = −2: −2 − 0.1·(1 − 1) = −2
  CHECK(values_of(p)[0] == Approx(0.9f));
  CHECK(values_of(p)[1] == Approx(-2.0f));
}

TEST_CASE("SGD with momentum, dampening and Nesterov follows PyTorch for several steps") {
  SECTION("momentum 0.9: buf1 = g, then buf = 0.9·buf + g") {
    Tensor p = param({1.0f});
    optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
    const double expected[] = {1 - 0.1 * 1.0, 1 - 0.1 * 1.0 - 0.1 * 1.9, 1 - 0.1 * (1.0 + 1.9 + 2.71)};
    for (double e : expected) {
      set_grad(p, {1.0f});
      sgd.step();
      CHECK(value_of(p) == Approx(e).epsilon(1e-6));
    }
  }
  SECTION("dampening 0.5: the first buffer is g itself, later ones add (1 − 0.5)·g") {
    Tensor p = param({0.0f});
    optim::SGD sgd({p}, {.lr = 1.0, .momentum = 0.5, .dampening = 0.5});
    double buf = 0, value = 0;
    for (int step = 1; step <= 4; ++step) {
      buf = step == 1 ? 2.0 : 0.5 * buf + 0.5 * 2.0;
      value -= buf;
      set_grad(p, {2.0f});
      sgd.step();
      CHECK(value_of(p) == Approx(value).epsilon(1e-6));
    }
  }
  SECTION("momentum turned on after two plain steps: the buffer starts then, as PyTorch's does") {
    Tensor p = param({0.0f});
    optim::SGD sgd({p}, {.lr = 1.0, .dampening = 0.5});
    double value = 0, buf = 0;
    for (int step = 1; step <= 5; ++step) {
      if (step == 3) sgd.param_groups()[0].options.momentum = 0.5;
      // PyTorch: no buffer until momentum is set; then buf = d at its first step, later
      // buf = 0.5·buf + (1 − 0.5)·d.
      buf = step < 3 ? 0.0 : (step == 3 ? 2.0 : 0.5 * buf + 0.5 * 2.0);
      value -= step < 3 ? 2.0 : buf;
      set_grad(p, {2.0f});
      sgd.step();
      CHECK(value_of(p) == Approx(value).epsilon(1e-6));
    }
  }
  SECTION("Nesterov with weight decay") {
    Tensor p = param({1.0f});
    optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    double value = 1.0, buf = 0;
    for (int step = 1; step <= 5; ++step) {
      const double d = 0.3 + 0.01 * value;
      buf = step == 1 ? d : 0.9 * buf + d;
      value -= 0.1 * (d + 0.9 * buf);
      set_grad(p, {0.3f});
      sgd.step();
      CHECK(value_of(p) == Approx(value).epsilon(1e-5));
    }
  }
}

TEST_CASE("Adam: bias correction makes the first step lr·sign(g); later steps follow PyTorch") {
  Tensor p = param({1.0f, -1.0f});
  optim::Adam adam({p}, {.lr = 0.01});
  set_grad(p, {0.3f, -4.0f});
  adam.step();
  CHECK(values_of(p)[0] == Approx(1.0f - 0.01f).epsilon(1e-6));
  CHECK(values_of(p)[1] == Approx(-1.0f + 0.01f).epsilon(1e-6));
  // Reference for more steps with a changing gradient and L2 weight decay.
  Tensor q = param({0.5f});
  optim::Adam adam2({q}, {.lr = 0.05, .weight_decay = 0.1, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6});
  double value = 0.5, m = 0, v = 0;
  for (int t = 1; t <= 6; ++t) {
    const double grad = 0.2 * t - 0.5;
    const double g = grad + 0.1 * value;
    m = m + (1 - 0.8) * (g - m);
    v = 0.99 * v + (1 - 0.99) * g * g;
    value -= (0.05 / (1 - std::pow(0.8, t))) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.99, t)) + 1e-6);
    set_grad(q, {static_cast<float>(grad)});
    adam2.step();
    CHECK(value_of(q) == Approx(value).epsilon(1e-5));
  }
}

TEST_CASE("AdamW decays the weights before the update instead of adding to the gradient") {
  Tensor p = param({2.0f});
  optim::AdamW adamw({p}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(p, {1.0f});
  adamw.step();
  // p·(1 − 0.1·0.5) − 0.1·sign(g) = 2·0.95 − 0.1
  CHECK(value_of(p) == Approx(1.8f).epsilon(1e-6));
}

TEST_CASE("make_optimizer chooses by name, with the options given") {
  Tensor p = param({2.0f});
  for (const auto& [name, type] : {std::pair{"sgd", "SGD"}, {"adam", "Adam"}, {"adamw", "AdamW"}}) {
    const auto optimizer = optim::make_optimizer(name, {p}, {.lr = 0.25, .momentum = 0.5});
    CHECK(optimizer->type_name() == type);
    CHECK(optimizer->param_groups().at(0).options.lr == 0.25);
    CHECK(optimizer->param_groups().at(0).options.momentum == 0.5);
  }
  CHECK_THAT(message_of<ValueError>([&] { optim::make_optimizer("lbfgs", {p}, {}); }),
             Contains("unknown optimizer 'lbfgs': expected sgd, adam or adamw"));
}

TEST_CASE("parameters without a gradient are skipped; zero_grad drops or zeroes") {
  Tensor a = param({1.0f}), b = param({1.0f});
  optim::SGD sgd({a, b}, {.lr = 1.0});
  set_grad(a, {1.0f});
  sgd.step();
  CHECK(value_of(a) == 0.0f);
  CHECK(value_of(b) == 1.0f);
  sgd.zero_grad(false);
  CHECK(value_of(a.grad()) == 0.0f);
  sgd.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_THROWS_AS(optim::SGD({a}, {.lr = -1.0}), ValueError);
  CHECK_THROWS_AS(optim::SGD({a}, {.lr = 0.1, .nesterov = true}), ValueError);
  CHECK_THROWS_AS(optim::SGD({zeros({2})}, {.lr = 0.1}), ValueError);
}

TEST_CASE("a changed learning rate takes effect at the next step") {
  Tensor p = param({0.0f});
  optim::SGD sgd({p}, {.lr = 1.0});
  set_grad(p, {1.0f});
  sgd.step();
  sgd.param_groups()[0].options.lr = 0.25;
  sgd.step();
  CHECK(value_of(p) == Approx(-1.25f));
}

TEMPLATE_TEST_CASE("optimizer state saved to a checkpoint resumes exactly", "", optim::SGD, optim::Adam) {
  auto make_params = [] { return std::vector<Tensor>{param({1.0f, 2.0f, 3.0f}), param({-1.0f})}; };
  auto grads_for = [](int step) {
    return std::vector<std::vector<float>>{{0.1f * step, -0.2f, 0.3f}, {std::sin(static_cast<float>(step))}};
  };
  const optim::GroupOptions options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01};
  auto run = [&](std::vector<Tensor>& params, TestType& opt, int from, int to) {
    for (int s = from; s < to; ++s) {
      const auto g = grads_for(s);
      for (std::size_t i = 0; i < params.size(); ++i) set_grad(params[i], g[i]);
      opt.step();
    }
  };
  std::vector<Tensor> straight = make_params();
  TestType reference(straight, options);
  run(straight, reference, 0, 4);

  std::vector<Tensor> resumed = make_params();
  TestType first(resumed, options);
  run(resumed, first, 0, 2);
  const std::string path = (std::filesystem::temp_directory_path() / "ember_optim_state.safetensors").string();
  const Checkpoint saved = first.state_dict();
  save_safetensors(path, saved.tensors, saved.metadata);
  std::vector<Tensor> params = make_params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    NoGradGuard no_grad;
    params[i].copy_(resumed[i]);
  }
  TestType second(params, options);
  second.load_state_dict(load_safetensors(path));
  run(params, second, 2, 4);
  for (std::size_t i = 0; i < params.size(); ++i) CHECK(values_of(params[i]) == values_of(straight[i]));
  std::filesystem::remove(path);
}

TEST_CASE("loading the wrong optimizer state says what does not match") {
  Tensor p = param({1.0f, 2.0f});
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, {1.0f, 1.0f});
  sgd.step();
  const Checkpoint state = sgd.state_dict();
  optim::Adam adam({p}, {});
  CHECK_THAT(message_of<ValueError>([&] { adam.load_state_dict(state); }), Contains("the state is of a SGD optimizer"));
  Tensor other = param({1.0f, 2.0f, 3.0f});
  optim::SGD wrong_shape({other}, {.lr = 0.1, .momentum = 0.9});
  CHECK_THAT(message_of<ValueError>([&] { wrong_shape.load_state_dict(state); }), Contains("has shape [2]"));
  optim::SGD two_params({p, other}, {.lr = 0.1});
  CHECK_THAT(message_of<ValueError>([&] { two_params.load_state_dict(state); }), Contains("parameters in the state"));
}

TEST_CASE("schedulers follow PyTorch's formulas") {
  Tensor p = param({0.0f});
  optim::SGD sgd({p}, {.lr = 1.0});
  optim::StepLR step_lr(sgd, 2, 0.5);
  std::vector<double> seen;
  for (int e = 0; e < 5; ++e) {
    seen.push_back(sgd.param_groups()[0].options.lr);
    step_lr.step();
  }
  CHECK(seen == std::vector<double>{1.0, 1.0, 0.5, 0.5, 0.25});

  optim::SGD sgd2({p}, {.lr = 0.1});
  optim::CosineAnnealingLR cosine(sgd2, 4, 0.0);
  cosine.step();
  cosine.step();
  CHECK(sgd2.param_groups()[0].options.lr == Approx(0.05));
  cosine.step();
  cosine.step();
  CHECK(sgd2.param_groups()[0].options.lr == Approx(0.0).margin(1e-12));

  optim::SGD sgd3({p}, {.lr = 0.3});
  optim::LinearWarmup warmup(sgd3, 3, 0.25);
  CHECK(sgd3.param_groups()[0].options.lr == Approx(0.075));
  warmup.step();
  CHECK(sgd3.param_groups()[0].options.lr == Approx(0.3 * (0.25 + 0.75 / 3)));
  warmup.set_last_epoch(10);
  CHECK(sgd3.param_groups()[0].options.lr == Approx(0.3));
}

TEST_CASE("an optimizer's version grows when its state or slot tables are replaced, not on a steady step") {
  const Device device = device_under_test();
  Tensor w = ones({3, 2}).to(device).set_requires_grad(), b = ones({2}).to(device).set_requires_grad();
  w.set_grad(full({3, 2}, 0.5).to(device));
  b.set_grad(full({2}, 0.25).to(device));
  optim::Adam adam({w, b}, {.lr = 1e-2});
  const auto v0 = adam.version();
  adam.step();  // state made
  const auto v1 = adam.version();
  CHECK(v1 > v0);
  adam.step();
  adam.step();
  CHECK(adam.version() == v1);  // steady: same buffers, same slots
  adam.load_state_dict(adam.state_dict());
  CHECK(adam.version() > v1);
}

TEST_CASE("GradScaler skips a step whose gradients overflow, backs the scale off, then trains and grows it") {
  // f32 overflows at 2^128: with the scale at 2^127, the scaled gradient 2·p·scale of p² is ∞.
  Tensor p = param({1.0f, -0.5f});
  optim::SGD sgd({p}, {.lr = 0.25});
  optim::GradScaler scaler({.init_scale = std::ldexp(1.0, 127), .growth_interval = 2});
  auto train_step = [&] {
    sgd.zero_grad();
    scaler.scale(sum(mul(p, p))).backward();
    const bool stepped = scaler.step(sgd);
    scaler.update();
    return stepped;
  };
  CHECK_FALSE(train_step());  // ∞ in the gradient: skipped, the parameters untouched
  CHECK(values_of(p) == std::vector<float>{1.0f, -0.5f});
  CHECK(scaler.get_scale() == std::ldexp(1.0, 126));
  CHECK(scaler.skipped_steps() == 1);
  CHECK(train_step());  // 2·p·2^126 is finite: unscaled to 2·p, then p − 0.25·2p = p/2
  CHECK(values_of(p) == std::vector<float>{0.5f, -0.25f});
  CHECK(train_step());  // the second good step in a row: the scale grows
  CHECK(scaler.get_scale() == std::ldexp(1.0, 127));
  CHECK(values_of(p) == std::vector<float>{0.25f, -0.125f});
  CHECK(train_step());  // now 2·0.25·2^127 = 2^126: finite
  CHECK(scaler.skipped_steps() == 1);

  // A NaN anywhere skips the step too.
  sgd.zero_grad();
  set_grad(p, {std::nanf(""), 1.0f});
  CHECK_FALSE(scaler.step(sgd));
  scaler.update();
  CHECK(scaler.skipped_steps() == 2);
}

TEST_CASE("GradScaler's state travels with a checkpoint; disabled, it is not there at all") {
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  Tensor p = param({2.0f});
  optim::SGD sgd({p}, {.lr = 0.5});
  for (int i = 0; i < 2; ++i) {
    sgd.zero_grad();
    scaler.scale(mul(p, 3.0)).backward();
    CHECK(value_of(p.grad()) == 3.0f * 1024.0f);  // scaled
    scaler.step(sgd);
    CHECK(value_of(p.grad()) == 3.0f);  // unscaled before the update
    scaler.update();
  }
  optim::GradScaler resumed;
  resumed.load_state_dict(scaler.state_dict());
  CHECK(resumed.get_scale() == 1024.0);
  for (auto* s : {&scaler, &resumed}) {  // the third good step grows both alike
    sgd.zero_grad();
    s->scale(mul(p, 3.0)).backward();
    s->step(sgd);
    s->update();
  }
  CHECK(resumed.get_scale() == 2048.0);
  CHECK(resumed.state_dict() == scaler.state_dict());
  auto broken = scaler.state_dict();
  broken["grad_scaler.scale"] = "lots";
  CHECK_THAT(message_of<ValueError>([&] { resumed.load_state_dict(broken); }),
             Contains("'grad_scaler.scale' is not a number"));
  // Once per step: a second unscale_ before update() is a mistake.
  sgd.zero_grad();
  scaler.scale(mul(p, 3.0)).backward();
  scaler.unscale_(sgd);
  CHECK_THROWS_AS(scaler.unscale_(sgd), ValueError);

  optim::GradScaler off({.enabled = false});
  const Tensor loss = mul(p, 3.0);
  CHECK(value_of(off.scale(loss)) == value_of(loss));
  sgd.zero_grad();
  set_grad(p, {1.0f});
  CHECK(off.step(sgd));
  CHECK_THROWS_AS(optim::GradScaler({.backoff_factor = 1.5}), ValueError);
}
