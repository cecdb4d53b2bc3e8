// FusedMlpStep on the CPU against the same training written with autograd ops: the same losses and
// the same weights after several steps, for SGD with momentum and for Adam, with a partial last
// batch; plain SGD's update inside the weight GEMMs (sgd_in_gemm), and where it must not apply;
// its errors; and a steady state that takes no memory from the system.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/ops/ops.h"
#include "core/tensor/storage.h"
#include "layers/models.h"
#include "layers/nn.h"
#include "optim/optimizer.h"
#include "train/fused_mlp_step.h"
#include "train/make_step.h"

using namespace ember;

namespace {

struct Batch {
  Tensor x, y;
};

std::vector<Batch> make_batches(std::int64_t in, std::int64_t classes, std::vector<std::int64_t> sizes,
                                DType label_type) {
  Generator g(42);
  std::vector<Batch> out;
  for (std::int64_t rows : sizes)
    out.push_back({uniform({rows, in}, -1.0, 1.0, {}, &g), randint(0, classes, {rows}, {.dtype = label_type}, &g)});
  return out;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind, std::vector<Tensor> params) {
  if (kind == "sgd") return std::make_unique<optim::SGD>(params, optim::GroupOptions{.lr = 0.3, .momentum = 0.9});
  return std::make_unique<optim::Adam>(params, optim::GroupOptions{.lr = 0.01, .weight_decay = 1e-3});
}

}  // namespace

TEST_CASE("FusedMlpStep trains exactly like autograd on the CPU") {
  for (const std::string kind : {"sgd", "adam"})
    for (const std::vector<std::int64_t>& hidden : {std::vector<std::int64_t>{32}, {64, 48}, {}}) {
      INFO(kind << ", " << hidden.size() << " hidden layers");
      Generator g1(7), g2(7);
      auto reference = nn::mlp(20, hidden, 10, &g1);
      auto stepped = nn::mlp(20, hidden, 10, &g2);
      auto ref_opt = make_optimizer(kind, reference->parameters());
      auto step_opt = make_optimizer(kind, stepped->parameters());
      train::FusedMlpStep step(*stepped, *step_opt, 16);
      const auto batches = make_batches(20, 10, {16, 16, 16, 16, 16, 5}, DType::i32);
      double ref_sum = 0;
      for (const Batch& b : batches) {
        Tensor loss = cross_entropy((*reference)(b.x), b.y);
        ref_opt->zero_grad();
        loss.backward();
        ref_opt->step();
        ref_sum += loss.item<double>() * static_cast<double>(b.x.size(0));
        step.step(b.x, b.y);
        CHECK(step.batch_loss().item<double>() == Approx(loss.item<double>()).epsilon(1e-5));
      }
      CHECK(step.loss_sum().item<double>() == Approx(ref_sum).epsilon(1e-5));
      const auto ref_params = reference->named_parameters(), step_params = stepped->named_parameters();
      REQUIRE(ref_params.size() == step_params.size());
      for (std::size_t p = 0; p < ref_params.size(); ++p) {
        INFO(ref_params[p].first);
        const auto want = ref_params[p].second.to_vector<float>(), got = step_params[p].second.to_vector<float>();
        const auto want_grad = ref_params[p].second.grad().to_vector<float>();
        const auto got_grad = step_params[p].second.grad().to_vector<float>();
        for (std::size_t i = 0; i < want.size(); ++i) {
          // Same kernels in the same order but for the loss gradient (one subtraction placed
          // differently) and GEMM blocking: a few float roundings per step, six steps.
          REQUIRE(got[i] == Approx(want[i]).margin(2e-6).epsilon(1e-4));
          REQUIRE(got_grad[i] == Approx(want_grad[i]).margin(1e-6).epsilon(1e-3));
        }
      }
      step.reset_loss_sum();
      CHECK(step.loss_sum().item<double>() == 0.0);
    }
}

TEST_CASE("FusedMlpStep with sgd_in_gemm updates the weights inside their GEMMs, training as autograd does") {
  for (const std::vector<std::int64_t>& hidden : {std::vector<std::int64_t>{32}, {64, 48}, {}}) {
    INFO(hidden.size() << " hidden layers");
    Generator g1(7), g2(7);
    auto reference = nn::mlp(20, hidden, 10, &g1);
    auto stepped = nn::mlp(20, hidden, 10, &g2);
    optim::SGD ref_opt(reference->parameters(), {.lr = 0.3});
    optim::SGD step_opt(stepped->parameters(), {.lr = 0.3});
    train::FusedMlpStep step(*stepped, step_opt, 16, {.fused = {.sgd_in_gemm = true}});
    for (const Batch& b : make_batches(20, 10, {16, 16, 16, 16, 16, 5}, DType::i32)) {
      Tensor loss = cross_entropy((*reference)(b.x), b.y);
      ref_opt.zero_grad();
      loss.backward();
      ref_opt.step();
      step.step(b.x, b.y);
      CHECK(step.sgd_in_gemm_applied());
      CHECK(step.batch_loss().item<double>() == Approx(loss.item<double>()).epsilon(1e-5));
    }
    CHECK(step.describe().find("inside the GEMMs") != std::string::npos);
    const auto ref_params = reference->named_parameters(), step_params = stepped->named_parameters();
    for (std::size_t p = 0; p < ref_params.size(); ++p) {
      INFO(ref_params[p].first);
      const bool weight = ref_params[p].first.find("weight") != std::string::npos;
      CHECK(step_params[p].second.grad().defined() == !weight);  // a weight's gradient was never stored
      const auto want = ref_params[p].second.to_vector<float>(), got = step_params[p].second.to_vector<float>();
      // As in the test above, and p − lr·g rounded once inside the GEMM instead of twice.
      for (std::size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == Approx(want[i]).margin(2e-6).epsilon(1e-4));
      if (weight) continue;
      const auto want_grad = ref_params[p].second.grad().to_vector<float>();
      const auto got_grad = step_params[p].second.grad().to_vector<float>();
      for (std::size_t i = 0; i < want_grad.size(); ++i)
        REQUIRE(got_grad[i] == Approx(want_grad[i]).margin(1e-6).epsilon(1e-3));
    }
  }
}

TEST_CASE("FusedMlpStep's sgd_in_gemm steps aside where the update would not be plain SGD's on every weight") {
  const auto batches = make_batches(12, 4, {8, 8}, DType::i32);
  // Each case: the optimizer over some of the parameters with some settings; the update must then
  // be the optimizer's own, bit for bit the same as without the option.
  struct Case {
    const char* name;
    bool all_params;
    optim::GroupOptions options;
  };
  for (const Case& c : {Case{"momentum", true, {.lr = 0.2, .momentum = 0.9}},
                        Case{"weight decay", true, {.lr = 0.2, .weight_decay = 0.01}},
                        Case{"a weight the optimizer does not hold", false, {.lr = 0.2}}}) {
    INFO(c.name);
    Generator g1(11), g2(11);
    auto plain = nn::mlp(12, {16}, 4, &g1), with = nn::mlp(12, {16}, 4, &g2);
    auto params = [&](nn::Module& m) {
      std::vector<Tensor> all = m.parameters();
      if (!c.all_params) all.erase(all.begin());  // the first layer's weight
      return all;
    };
    optim::SGD plain_opt(params(*plain), c.options), with_opt(params(*with), c.options);
    train::FusedMlpStep plain_step(*plain, plain_opt, 8),
        with_step(*with, with_opt, 8, {.fused = {.sgd_in_gemm = true}});
    for (const Batch& b : batches) {
      plain_step.step(b.x, b.y);
      with_step.step(b.x, b.y);
      CHECK_FALSE(with_step.sgd_in_gemm_applied());
    }
    const auto a = plain->parameters(), b = with->parameters();
    for (std::size_t p = 0; p < a.size(); ++p) {
      CHECK(a[p].to_vector<float>() == b[p].to_vector<float>());
      CHECK(b[p].grad().defined());
    }
  }
}

TEST_CASE("FusedMlpStep takes i64 labels, and keeps working after zero_grad(set_to_none)") {
  Generator g(3);
  auto model = nn::mlp(12, {8}, 4, &g);
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  train::FusedMlpStep step(*model, sgd, 8);
  const auto batches = make_batches(12, 4, {8, 8}, DType::i64);
  step.step(batches[0].x, batches[0].y);
  const float before = model->parameters()[0].to_vector<float>()[0];
  sgd.zero_grad(true);
  step.step(batches[1].x, batches[1].y);
  CHECK(model->parameters()[0].grad().defined());
  CHECK(model->parameters()[0].to_vector<float>()[0] != before);
}

TEST_CASE("FusedMlpStep rejects models and batches it cannot train, naming the reason") {
  Generator g(1);
  auto model = nn::mlp(6, {4}, 3, &g);
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  SECTION("a layer other than Linear or ReLU") {
    nn::Sequential with_dropout{std::make_shared<nn::Linear>(6, 4, true, &g), std::make_shared<nn::Dropout>(0.5, 1),
                                std::make_shared<nn::Linear>(4, 3, true, &g)};
    CHECK_THAT(train::fused_mlp_step_unsupported(with_dropout), Catch::Contains("layer 1 (Dropout) is neither"));
    CHECK_THROWS_AS(train::FusedMlpStep(with_dropout, sgd, 4), ValueError);
  }
  SECTION("a Linear shared between two places") {
    auto shared = std::make_shared<nn::Linear>(4, 4, true, &g);
    nn::Sequential twice{std::make_shared<nn::Linear>(6, 4, true, &g),
                         std::make_shared<nn::ReLU>(),
                         shared,
                         std::make_shared<nn::ReLU>(),
                         shared,
                         std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::Linear>(4, 3, true, &g)};
    CHECK_THAT(train::fused_mlp_step_unsupported(twice),
               Catch::Contains("layer 4 (Linear) is the same Linear as layer 2"));
    optim::SGD sgd_twice(twice.parameters(), {.lr = 0.1});
    CHECK_THROWS_AS(train::FusedMlpStep(twice, sgd_twice, 4), ValueError);
  }
  SECTION("no eager step before capture") {
    CHECK_THROWS_WITH(train::FusedMlpStep(*model, sgd, 4, {.fused = {.eager_steps = 0}}),
                      Catch::Contains("eager_steps must be at least 1"));
  }
  SECTION("bf16 on the CPU, where autocast's autograd step trains it") {
    CHECK_THROWS_WITH(train::FusedMlpStep(*model, sgd, 4, {.precision = DType::bf16}),
                      Catch::Contains("bf16 runs on CUDA") && Catch::Contains("AutogradStep"));
  }
  SECTION("a model ending in ReLU") {
    nn::Sequential ends_relu{std::make_shared<nn::Linear>(6, 4, true, &g), std::make_shared<nn::ReLU>()};
    CHECK_THAT(train::fused_mlp_step_unsupported(ends_relu), Catch::Contains("ends with a ReLU"));
  }
  SECTION("a batch too large, a wrong width, labels of the wrong length") {
    train::FusedMlpStep step(*model, sgd, 4);
    CHECK_THROWS_WITH(step.step(zeros({5, 6}), zeros({5}, {.dtype = DType::i32})), Catch::Contains("built for 1 to 4"));
    CHECK_THROWS_WITH(step.step(zeros({4, 7}), zeros({4}, {.dtype = DType::i32})),
                      Catch::Contains("expected x f32 [B, 6]"));
    CHECK_THROWS_WITH(step.step(zeros({4, 6}), zeros({3}, {.dtype = DType::i32})),
                      Catch::Contains("expected y i32 or i64 [4]"));
  }
  SECTION("a target out of range throws at its step, before any update") {
    train::FusedMlpStep step(*model, sgd, 4);
    const auto before = model->parameters()[0].to_vector<float>();
    CHECK_THROWS_WITH(step.step(zeros({2, 6}), from_vector<std::int32_t>({1, 3}, {2})),
                      Catch::Contains("target 3 at row 1 is out of range [0, 3)"));
    CHECK(model->parameters()[0].to_vector<float>() == before);
  }
  SECTION("a non-finite loss throws NonFiniteError") {
    auto linear = nn::mlp(6, {}, 3, &g);  // no ReLU, which would turn NaN into 0
    optim::SGD plain(linear->parameters(), {.lr = 0.1});
    train::FusedMlpStep step(*linear, plain, 4);
    Tensor x = zeros({2, 6});
    x.fill_(std::nan(""));
    CHECK_THROWS_AS(step.step(x, from_vector<std::int32_t>({0, 1}, {2})), NonFiniteError);
  }
}

TEST_CASE("FusedMlpStep in steady state takes no memory from the system") {
  for (const bool sgd_in_gemm : {false, true}) {
    INFO((sgd_in_gemm ? "plain SGD inside the GEMMs" : "Adam"));
    Generator g(5);
    auto model = nn::mlp(30, {16}, 10, &g);
    std::unique_ptr<optim::Optimizer> optimizer;
    if (sgd_in_gemm)
      optimizer = std::make_unique<optim::SGD>(model->parameters(), optim::GroupOptions{.lr = 0.1});
    else
      optimizer = std::make_unique<optim::Adam>(model->parameters(), optim::GroupOptions{.lr = 1e-3});
    train::FusedMlpStep step(*model, *optimizer, 8, {.fused = {.sgd_in_gemm = sgd_in_gemm}});
    const auto batches = make_batches(30, 10, {8, 8, 3}, DType::i32);
    for (const Batch& b : batches) step.step(b.x, b.y);
    const MemoryStats before = memory_stats(Device::cpu());
    for (int r = 0; r < 5; ++r)
      for (const Batch& b : batches) step.step(b.x, b.y);
    const MemoryStats after = memory_stats(Device::cpu());
    CHECK(step.sgd_in_gemm_applied() == sgd_in_gemm);
    CHECK(after.system_allocations == before.system_allocations);
    CHECK(after.allocations == before.allocations);  // not even from the cache: every buffer is the step's own
    CHECK(step.describe().find("CPU") != std::string::npos);
  }
}

namespace {
// An optimizer ember's steps know nothing about: SGD's arithmetic, but it does not say that its
// update can be captured (an optimizer written outside ember, by default).
struct UncapturedSGD : optim::SGD {
  using optim::SGD::SGD;
  bool capturable() const override { return false; }
};
}  // namespace

TEST_CASE("make_step chooses by what the model and the optimizer say, and falls back to autograd") {
  Generator g(3);
  auto mlp = nn::mlp(20, {32}, 10, &g);
  auto cnn = nn::cnn(4, 8, 16, &g);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  optim::Adam adam(mlp->parameters(), {.lr = 0.01});
  UncapturedSGD uncaptured(mlp->parameters(), {.lr = 0.1});
  optim::SGD cnn_sgd(cnn->parameters(), {.lr = 0.1});
  train::StepOptions automatic;
  automatic.batch_size = 16;
  const train::ChosenStep chosen = train::make_step(*mlp, sgd, automatic);
  CHECK(chosen.step->kind() == "fused");
  CHECK(chosen.not_taken.empty());
  CHECK(train::make_step(*mlp, adam, automatic).step->kind() == "fused");
  // Every faster step not taken is named with its reason.
  const train::ChosenStep for_cnn = train::make_step(*cnn, cnn_sgd, automatic);
  CHECK(for_cnn.step->kind() == "autograd");
  REQUIRE(for_cnn.not_taken.size() == 1);
  CHECK(for_cnn.not_taken[0].first == "fused MLP step");
  CHECK_THAT(for_cnn.not_taken[0].second, Catch::Contains("neither Linear nor ReLU"));
  // A loss other than the plain cross-entropy, or clipping: the autograd step, saying why.
  train::StepOptions smoothed = automatic;
  smoothed.loss = nn::Loss::cross_entropy({.label_smoothing = 0.1});
  const train::ChosenStep for_smoothing = train::make_step(*mlp, sgd, smoothed);
  CHECK(for_smoothing.step->kind() == "autograd");
  CHECK(for_smoothing.step->loss().describe() == "CrossEntropyLoss(label_smoothing=0.1)");
  REQUIRE(for_smoothing.not_taken.size() == 1);
  CHECK_THAT(for_smoothing.not_taken[0].second, Catch::Contains("label_smoothing=0.1"));
  train::StepOptions clipped = automatic;
  clipped.autograd.clip_grad_norm = 1.0;
  CHECK(train::make_step(*mlp, sgd, clipped).step->kind() == "autograd");
  // The optimizer without the capability: the autograd step, which trains it as a PyTorch loop.
  const auto fallback = std::move(train::make_step(*mlp, uncaptured, automatic).step);
  CHECK(fallback->kind() == "autograd");
  const auto batches = make_batches(20, 10, {16}, DType::i64);
  fallback->step(batches[0].x, batches[0].y);
  CHECK(std::isfinite(fallback->batch_loss().item<double>()));
  CHECK_THAT(train::fused_step_refusal(*mlp, uncaptured, automatic), Catch::Contains("capturable"));
  // Asked for by name, the fused step says why it cannot run; autograd is always there.
  train::StepOptions fused = automatic;
  fused.choice = train::StepChoice::fused;
  CHECK_THROWS_WITH(train::make_step(*mlp, uncaptured, fused), Catch::Contains("capturable"));
  CHECK_THROWS_WITH(train::make_step(*cnn, cnn_sgd, fused), Catch::Contains("neither Linear nor ReLU"));
  train::StepOptions autograd = automatic;
  autograd.choice = train::StepChoice::autograd;
  CHECK(train::make_step(*mlp, sgd, autograd).step->kind() == "autograd");
  // The fused step itself refuses any loss but the plain cross-entropy.
  CHECK_THROWS_WITH(train::FusedMlpStep(*mlp, sgd, 16, smoothed), Catch::Contains("plain softmax cross-entropy"));
}
