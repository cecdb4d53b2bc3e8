// The training library's loop (train/loop.h) and steps (train/step.h): an epoch, evaluation, fit's
// hooks and schedule, a non-finite loss, micro-batches, the fused step through the same loop, and
// a resume that continues where a run stopped — written once for "a device" and run on each
// (loop_cpu, loop_cuda).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "base/fusion.h"
#include "core/ops/ops.h"
#include "distributed/dist.h"
#include "layers/nn.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "support/device_under_test.h"
#include "support/helpers.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/fused_mlp_step.h"
#include "train/log.h"
#include "train/loop.h"

using namespace ember;
using ember::testing::device_under_test;

namespace {

// Batches held in memory on the device under test: a BatchSource without a loader, the same
// batches every epoch.
class Batches : public data::BatchSource {
 public:
  Batches(std::size_t count, std::size_t rows, std::uint64_t seed) {
    Generator g(seed);
    for (std::size_t i = 0; i < count; ++i) {
      const Tensor x = rand({static_cast<std::int64_t>(rows), 8}, {}, &g);
      // A learnable rule: the class is the index of the largest of the first three features.
      const Tensor y = argmax(slice(x, 1, 0, 3)).to(DType::i32);
      batches_.push_back({x.to(device_under_test()), y.to(device_under_test())});
    }
  }
  void start_epoch(std::int64_t) override { next_ = 0; }
  std::optional<data::DeviceBatch> next() override {
    if (next_ == batches_.size()) return std::nullopt;
    return batches_[next_++];
  }
  Device device() const override { return device_under_test(); }
  data::LoaderStats epoch_stats() const override { return {}; }
  std::size_t samples() const { return batches_.size() * static_cast<std::size_t>(batches_[0].x.size(0)); }
  std::vector<data::DeviceBatch> batches_;

 private:
  std::size_t next_ = 0;
};

std::vector<float> parameters_of(nn::Module& m) {
  std::vector<float> out;
  for (const Tensor& p : m.parameters())
    for (float v : p.cpu().to_vector<float>()) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("fit trains any model through its step, evaluates, calls on_epoch and steps the schedule") {
  Generator g(1);
  auto model = nn::mlp(8, {16}, 3, &g);
  model->to(device_under_test());
  optim::SGD sgd(model->parameters(), {.lr = 0.5});
  optim::StepLR schedule(sgd, 1, 0.5);
  train::AutogradStep step(*model, sgd);
  Batches train_batches(20, 16, 2), validation(4, 16, 3);
  std::vector<train::EpochReport> reports;
  std::vector<std::size_t> progress;
  train::fit(*model, step, train_batches, validation, validation.samples(),
             {.epochs = 4,
              .start_epoch = 1,
              .schedule = &schedule,
              .epoch = {.record_step_losses = true,
                        .steps = 20,
                        .on_step =
                            [&](std::size_t done, std::size_t total) {
                              CHECK(total == 20);
                              progress.push_back(done);
                            }},
              .on_epoch = [&](const train::EpochReport& r) { reports.push_back(r); }});
  REQUIRE(reports.size() == 3);  // epochs 1, 2, 3
  CHECK((reports[0].epoch == 1 && reports[2].epoch == 3));
  CHECK(progress.size() == 60);
  CHECK(sgd.param_groups()[0].options.lr == Approx(0.5 * 0.125));  // three halvings
  for (const auto& r : reports) {
    CHECK(r.train.samples == 320);
    CHECK(r.train.step_losses.size() == 20);
    CHECK(r.train.seconds > 0);
    CHECK(r.seconds >= r.train.seconds);
    // The epoch's loss is the mean of its steps' (equal batches).
    double mean = 0;
    for (double l : r.train.step_losses) mean += l / 20;
    CHECK(r.train.loss == Approx(mean).epsilon(1e-5));
  }
  CHECK(reports[2].train.loss < reports[0].train.loss);
  CHECK(reports[2].validation.accuracy > 0.7);
  const train::Evaluation again = train::evaluate(*model, validation, validation.samples());
  CHECK(again.accuracy == reports[2].validation.accuracy);
}

TEST_CASE("fit evaluates with the loss its step trains with") {
  Generator g(1);
  auto model = nn::mlp(8, {16}, 3, &g);
  model->to(device_under_test());
  optim::SGD sgd(model->parameters(), {.lr = 0.5});
  const nn::Loss smoothed = nn::Loss::cross_entropy({.label_smoothing = 0.3});
  train::AutogradStep step(*model, sgd, {.loss = smoothed});
  CHECK(step.loss().describe() == "CrossEntropyLoss(label_smoothing=0.3)");
  Batches train_batches(4, 16, 2), validation(4, 16, 3);
  double reported = 0;
  train::fit(*model, step, train_batches, validation, validation.samples(),
             {.on_epoch = [&](const train::EpochReport& r) { reported = r.validation.loss; }});
  const double with_smoothing = train::evaluate(*model, validation, validation.samples(), false, smoothed).loss;
  const double plain = train::evaluate(*model, validation, validation.samples()).loss;
  CHECK(reported == with_smoothing);
  CHECK(reported != plain);  // smoothing's term: the plain cross-entropy is not what was reported
}

TEST_CASE("the autograd step in bf16 and f16: autocast's dtypes, f32 parameters, training as f32 does") {
  std::map<std::string, double> accuracy;
  for (const DType precision : {DType::f32, DType::bf16, DType::f16}) {
    INFO("precision " << precision);
    Generator g(1);
    auto model = nn::mlp(8, {16}, 3, &g);
    model->to(device_under_test());
    optim::SGD sgd(model->parameters(), {.lr = 0.5});
    train::AutogradStep step(*model, sgd, {.precision = precision});
    CHECK((step.grad_scaler() != nullptr) == (precision == DType::f16));  // f16 scales its loss; bf16 needs not
    Batches train_batches(20, 16, 2), validation(4, 16, 3);
    train::fit(*model, step, train_batches, validation, validation.samples(),
               {.epochs = 4, .epoch = {}, .on_epoch = [&](const train::EpochReport& r) {
                  accuracy[std::string(dtype_name(precision))] = r.validation.accuracy;
                }});
    for (const Tensor& p : model->parameters()) CHECK(p.dtype() == DType::f32);  // the master weights
    CHECK(step.batch_loss().dtype() == DType::f32);
    if (precision != DType::f32)
      CHECK_THAT(step.describe(), Catch::Matchers::Contains(std::string(dtype_name(precision)) + " autocast"));
    if (precision == DType::f16) {
      // The first step's scale (2^16) does not overflow this model's gradients: no step skipped,
      // and the scale is in the step's counters for the log.
      CHECK(step.grad_scaler()->skipped_steps() == 0);
      CHECK(step.counters() == std::vector<std::pair<std::string, std::int64_t>>{{"skipped_steps", 0}});
    }
  }
  // Trained as in f32: the same rule learnt within a few validation samples (64 here).
  CHECK(accuracy["f32"] > 0.7);
  CHECK(std::abs(accuracy["bf16"] - accuracy["f32"]) <= 3.0 / 64);
  CHECK(std::abs(accuracy["f16"] - accuracy["f32"]) <= 3.0 / 64);
  Generator g(2);
  auto model = nn::mlp(8, {16}, 3, &g);
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  CHECK_THROWS_AS(train::AutogradStep(*model, sgd, {.precision = DType::i32}), ValueError);
}

TEST_CASE("a non-finite loss names its epoch and step") {
  Generator g(4);
  auto model = nn::mlp(8, {4}, 3, &g);
  model->to(device_under_test());
  optim::SGD sgd(model->parameters(), {.lr = 1e30});
  train::AutogradStep step(*model, sgd);
  Batches batches(10, 8, 5);
  try {
    for (int epoch = 0; epoch < 3; ++epoch) train::train_epoch(*model, step, batches, epoch);
    FAIL("no NonFiniteLoss");
  } catch (const train::NonFiniteLoss& e) {
    // The CPU knows the step at once; a GPU's loss is read once per epoch, so only the epoch.
    const std::string epoch = "non-finite training loss in epoch " + std::to_string(e.epoch);
    if (device_under_test().is_cpu()) {
      CHECK(e.step >= 0);
      CHECK_THAT(e.what(), Catch::Matchers::Contains(epoch + ", step " + std::to_string(e.step)));
    } else {
      CHECK(e.step == -1);
      CHECK_THAT(e.what(), Catch::Matchers::Contains(epoch));
    }
  }
}

TEST_CASE("micro-batches of an autograd step give the whole batch's update") {
  Batches batches(3, 12, 6);
  std::vector<std::vector<float>> after;
  for (std::size_t k : {1, 2, 3}) {
    Generator g(7);
    auto model = nn::mlp(8, {6}, 3, &g);
    model->to(device_under_test());
    optim::SGD sgd(model->parameters(), {.lr = 0.1});
    train::AutogradStep step(*model, sgd, {.micro_batches = k});
    train::train_epoch(*model, step, batches, 0);
    after.push_back(parameters_of(*model));
  }
  // The mean of K micro-batch means is the batch mean up to rounding.
  EMBER_REQUIRE_CLOSE(after[1], after[0], 1e-6, 1e-5);
  EMBER_REQUIRE_CLOSE(after[2], after[0], 1e-6, 1e-5);
  Generator g(7);
  auto model = nn::mlp(8, {6}, 3, &g);
  model->to(device_under_test());
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  train::AutogradStep step(*model, sgd, {.micro_batches = 5});
  CHECK_THROWS_AS(step.step(batches.batches_[0].x, batches.batches_[0].y), ValueError);  // 12 rows, 5 parts
}

TEST_CASE("the fused MLP step and the autograd step train the same model alike through the same loop") {
  Batches batches(6, 32, 8);
  std::vector<std::vector<float>> after;
  std::vector<double> losses;
  for (bool fused : {false, true}) {
    Generator g(9);
    auto model = nn::mlp(8, {16}, 3, &g);
    model->to(device_under_test());
    optim::SGD sgd(model->parameters(), {.lr = 0.2, .momentum = 0.9});
    std::unique_ptr<train::Step> step;
    if (fused)
      step = std::make_unique<train::FusedMlpStep>(*model, sgd, 32);
    else
      step = std::make_unique<train::AutogradStep>(*model, sgd);
    losses.push_back(train::train_epoch(*model, *step, batches, 0).loss);
    after.push_back(parameters_of(*model));
    // What a log says of the step: its kind, and for the fused one its counters.
    const train::LogFields fields = train::step_fields(*step);
    REQUIRE(fields.size() == (fused ? 4u : 1u));
    CHECK(std::get<std::string>(fields[0].second) == (fused ? "fused" : "autograd"));
    if (fused) CHECK((fields[1].first == "graph_kernels" && fields[3].first == "graph_replays"));
    // Outside a data-parallel run: one rank, and the parameters' hash.
    const train::LogFields replica = train::replica_fields(*model, 0, false);
    CHECK(std::get<std::int64_t>(replica.at(0).second) == 1);
    CHECK(std::get<std::string>(replica.at(1).second) ==
          detail::concat(std::hex, dist::hash_tensors(model->parameters())));
  }
  // The same arithmetic in another order: the fused step adds each bias after its GEMM.
  EMBER_REQUIRE_CLOSE(after[1], after[0], 1e-5, 1e-4);
  CHECK(losses[1] == Approx(losses[0]).epsilon(1e-5));
}

TEST_CASE("a training checkpoint resumes at the next epoch with the dropout streams where they were") {
  const auto dir = std::filesystem::temp_directory_path() / ("ember_loop_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "run.safetensors").string();
  Batches batches(4, 8, 10);
  auto build = [] {
    Generator g(11);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16, true, &g),
                                                  std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3, 5),
                                                  std::make_shared<nn::Linear>(16, 3, true, &g));
    model->to(device_under_test());
    return model;
  };
  // Uninterrupted: three epochs. Interrupted: two, a checkpoint, then the third in a new model.
  auto whole = build();
  optim::Adam adam_whole(whole->parameters(), {.lr = 0.01});
  train::AutogradStep step_whole(*whole, adam_whole);
  for (int e = 0; e < 3; ++e) train::train_epoch(*whole, step_whole, batches, e);

  auto first = build();
  optim::Adam adam_first(first->parameters(), {.lr = 0.01});
  train::AutogradStep step_first(*first, adam_first);
  for (int e = 0; e < 2; ++e) train::train_epoch(*first, step_first, batches, e);
  train::save_training_checkpoint(path, *first, adam_first, 2, {}, {{"note", "kept"}});

  auto second = build();
  optim::Adam adam_second(second->parameters(), {.lr = 0.01});
  const train::ResumedTraining resumed = train::resume_training_checkpoint(path, *second, adam_second);
  CHECK(resumed.start_epoch == 2);
  CHECK(resumed.checkpoint.metadata.at("note") == "kept");
  CHECK(*train::random_offsets(*second).at(0) == *train::random_offsets(*first).at(0));
  train::AutogradStep step_second(*second, adam_second);
  train::train_epoch(*second, step_second, batches, 2);
  CHECK(parameters_of(*second) == parameters_of(*whole));  // bit for bit
  std::filesystem::remove_all(dir);
}

TEST_CASE("a stop mid-epoch resumes at its step and ends as the uninterrupted run, loss sum included") {
  Batches train_batches(5, 8, 12), val_batches(1, 8, 13);
  auto build = [] {
    Generator g(14);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16, true, &g),
                                                  std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3, 6),
                                                  std::make_shared<nn::Linear>(16, 3, true, &g));
    model->to(device_under_test());
    return model;
  };
  std::vector<double> losses;
  auto on_epoch = [&](const train::EpochReport& r) { losses.push_back(r.train.loss); };
  auto whole = build();
  optim::Adam adam_whole(whole->parameters(), {.lr = 0.01});
  train::AutogradStep step_whole(*whole, adam_whole);
  train::fit(*whole, step_whole, train_batches, val_batches, 8, {.epochs = 3, .on_epoch = on_epoch});

  // Stopped after the 2nd step of epoch 1: the state saved there, a new model resumed from it.
  auto first = build();
  optim::Adam adam_first(first->parameters(), {.lr = 0.01});
  train::AutogradStep step_first(*first, adam_first);
  int steps = 0;
  train::FitOptions stopping{.epochs = 3, .on_epoch = on_epoch};
  // Asked after each step and at each epoch's end: 5 steps and the end of epoch 0, then 2 steps.
  stopping.epoch.stop_requested = [&] { return ++steps == 8; };
  const train::FitResult where = train::fit(*first, step_first, train_batches, val_batches, 8, stopping);
  CHECK((where.stopped && where.epoch == 1 && where.step == 2));
  const Tensor loss_sum = step_first.loss_sum().clone();
  const Checkpoint optimizer_state = adam_first.state_dict();
  const std::uint64_t dropout_offset = *train::random_offsets(*first).at(0);

  auto second = build();
  optim::Adam adam_second(second->parameters(), {.lr = 0.01});
  second->load_state_dict(first->state_dict());
  adam_second.load_state_dict(optimizer_state);
  *train::random_offsets(*second).at(0) = dropout_offset;
  train::AutogradStep step_second(*second, adam_second);
  train::FitOptions resuming{.epochs = 3, .start_epoch = 1, .start_step = 2, .loss_sum_so_far = loss_sum};
  resuming.on_epoch = on_epoch;
  CHECK_FALSE(train::fit(*second, step_second, train_batches, val_batches, 8, resuming).stopped);
  CHECK(parameters_of(*second) == parameters_of(*whole));  // bit for bit
  // Epochs 1 and 2 of the resumed run report the uninterrupted run's losses exactly (epoch 1's
  // only with the stopped run's loss sum: the skipped steps' losses are in it).
  REQUIRE(losses.size() == 6);  // 3 whole, 1 before the stop, 2 resumed
  CHECK((losses[4] == losses[1] && losses[5] == losses[2]));
}
