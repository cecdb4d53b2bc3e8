// The fused MLP step in bf16 (Note [fused step in bf16], train/fused_mlp_step_math.cpp) against the
// autograd step under bf16 autocast on the same batches: the same losses and weights up to the
// roundings the note lists, with cuBLASLt's 16-bit epilogues and without them; a replayed graph
// gives the eager step's losses; f16 is refused with its reason.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "base/half.h"
#include "core/ops/ops.h"
#include "cuda/cuda_helpers.h"
#include "layers/models.h"
#include "optim/optimizer.h"
#include "train/fused_mlp_step.h"
#include "train/step.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

namespace {

struct Trained {
  std::vector<double> losses;  // every step's mean loss
  std::vector<float> params;   // every parameter, flattened in order
  std::vector<float> grads;    // and their gradients from the last step
  std::string description;
  std::size_t replays = 0;
};

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind, std::vector<Tensor> params) {
  if (kind == "sgd") return std::make_unique<optim::SGD>(params, optim::GroupOptions{.lr = 0.02, .momentum = 0.9});
  return std::make_unique<optim::Adam>(params, optim::GroupOptions{.lr = 1e-3});
}

// 64-48-32-10 trained for `steps` steps on batches of 32 (every seventh 13 rows, inputs uniform in
// ±input_scale) on the GPU, by the fused step with `options`, or by the autograd step in
// `options.precision` when `fused` is false.
Trained train_mlp(bool fused, train::StepOptions options, const std::string& kind = "sgd", int steps = 14,
                  double input_scale = 2) {
  Generator init(3);
  auto model = nn::mlp(64, {48, 32}, 10, &init);
  model->to(kGpu);
  auto opt = make_optimizer(kind, model->parameters());
  std::unique_ptr<train::Step> step;
  if (fused)
    step = std::make_unique<train::FusedMlpStep>(*model, *opt, 32, options);
  else
    step = std::make_unique<train::AutogradStep>(*model, *opt, train::StepOptions{.precision = options.precision});
  Generator data(9);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int b = 0; b < 7; ++b) {
    const std::int64_t rows = b == 6 ? 13 : 32;
    batches.emplace_back(uniform({rows, 64}, -input_scale, input_scale, {}, &data).to(kGpu),
                         randint(0, 10, {rows}, {.dtype = DType::i32}, &data).to(kGpu));
  }
  Trained out;
  for (int i = 0; i < steps; ++i) {
    const auto& [x, y] = batches[static_cast<std::size_t>(i) % batches.size()];
    step->step(x, y);
    out.losses.push_back(step->batch_loss().item<double>());
  }
  for (const Tensor& p : model->parameters()) {
    const auto values = p.cpu().to_vector<float>(), grads = p.grad().cpu().to_vector<float>();
    out.params.insert(out.params.end(), values.begin(), values.end());
    out.grads.insert(out.grads.end(), grads.begin(), grads.end());
  }
  out.description = step->describe();
  if (const auto* f = dynamic_cast<const train::FusedMlpStep*>(step.get())) out.replays = f->graph_replays();
  return out;
}

double relative_gap(double a, double b) { return std::abs(a - b) / std::abs(b); }

double max_loss_difference(const Trained& a, const Trained& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.losses.size(); ++i) worst = std::max(worst, relative_gap(a.losses[i], b.losses[i]));
  return worst;
}

double max_param_difference(const Trained& a, const Trained& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.params.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(a.params[i] - b.params[i])));
  return worst;
}

}  // namespace

TEST_CASE("the fused step in bf16 computes autocast's step, with f32 master gradients") {
  for (const bool epilogues : {true, false}) {
    INFO((epilogues ? "cuBLASLt's epilogues" : "epilogues off"));
    const train::StepOptions bf16{.precision = DType::bf16, .fused = {.gemm_epilogues = epilogues}};
    // One step on inputs in ±8, large enough that bf16's roundings show in the loss.
    const Trained fused = train_mlp(true, bf16, "sgd", 1, 8);
    const Trained autocast = train_mlp(false, bf16, "sgd", 1, 8);
    const Trained f32 = train_mlp(true, {.fused = {.gemm_epilogues = epilogues}}, "sgd", 1, 8);
    INFO(fused.description);
    CHECK_THAT(fused.description, Contains("bf16"));
    // The forward pass is autocast's, rounding for rounding: only the GEMMs' summation orders
    // differ, which can move an activation by one bf16 ulp now and then (0 on the software GPU).
    // The f32 step's loss is 2^-9-sized roundings away (6.5e-5 here).
    const double gap = relative_gap(fused.losses[0], autocast.losses[0]);
    const double f32_gap = relative_gap(f32.losses[0], autocast.losses[0]);
    std::printf("bf16 fused vs autocast (%s): loss %.2e (the f32 step's %.2e)\n", epilogues ? "epilogues" : "plain",
                gap, f32_gap);
    CHECK(gap < 5e-6);
    CHECK(f32_gap > 2e-5);
    // The gradients are autocast's but for its rounding of dW and db to bf16 (2^-9 relative), and
    // they are kept in f32: most are not bf16 values.
    REQUIRE(fused.grads.size() == autocast.grads.size());
    double scale = 0;
    for (const float g : autocast.grads) scale = std::max(scale, static_cast<double>(std::abs(g)));
    std::size_t not_bf16 = 0;
    for (std::size_t i = 0; i < fused.grads.size(); ++i) {
      const double want = autocast.grads[i], got = fused.grads[i];
      REQUIRE(std::abs(got - want) <= std::ldexp(std::abs(want), -8) + 1e-5 * scale);
      if (static_cast<float>(bfloat16(fused.grads[i])) != fused.grads[i]) ++not_bf16;
    }
    CHECK(not_bf16 > fused.grads.size() / 2);
  }
}

TEST_CASE("the fused step in bf16 trains as the autograd step under bf16 autocast does") {
  for (const std::string kind : {"sgd", "adam"})
    for (const bool epilogues : {true, false}) {
      INFO(kind << (epilogues ? ", cuBLASLt's epilogues" : ", epilogues off"));
      const train::StepOptions bf16{.precision = DType::bf16, .fused = {.gemm_epilogues = epilogues}};
      const Trained fused = train_mlp(true, bf16, kind);
      const Trained autocast = train_mlp(false, bf16, kind);
      INFO(fused.description);
      const double loss_gap = max_loss_difference(fused, autocast), param_gap = max_param_difference(fused, autocast);
      std::printf("bf16 fused vs autocast over 14 steps (%s, %s): losses %.2e, weights %.2e\n", kind.c_str(),
                  epilogues ? "epilogues" : "plain", loss_gap, param_gap);
      // Two epochs with the partial batch and the graph's replays: the gradients' 2^-9-sized
      // differences, carried on by the updates.
      CHECK(loss_gap < 1e-3);
      CHECK(param_gap < 1e-2);
    }
}

TEST_CASE("a graph-replayed bf16 step gives the eager step's losses", "[graph]") {
  const Trained eager = train_mlp(true, {.precision = DType::bf16, .fused = {.cuda_graph = false}});
  const Trained graph = train_mlp(true, {.precision = DType::bf16, .fused = {.cuda_graph = true}});
  INFO(graph.description);
  REQUIRE(graph.replays > 0);
  // The same kernels on the same data in the same order.
  for (std::size_t i = 0; i < eager.losses.size(); ++i)
    REQUIRE(graph.losses[i] == Approx(eager.losses[i]).epsilon(1e-6));
  CHECK(max_param_difference(graph, eager) < 1e-6);
}

TEST_CASE("the fused step refuses f16, naming the reason") {
  Generator init(3);
  auto model = nn::mlp(16, {8}, 4, &init);
  model->to(kGpu);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  CHECK_THROWS_WITH(train::FusedMlpStep(*model, opt, 8, {.precision = DType::f16}),
                    Contains("loss scaling") && Contains("AutogradStep"));
  CHECK_THROWS_WITH(train::FusedMlpStep(*model, opt, 8, {.precision = DType::i32}), Contains("f32 or bf16"));
}
