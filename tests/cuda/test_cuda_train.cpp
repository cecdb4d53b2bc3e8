// The fused MLP step on the GPU: a graph-replayed epoch gives the same losses as eager steps, the
// cuBLASLt epilogues agree with the plain GEMMs and with the CPU, the captured step of a
// two-layer MLP has at most 8 kernels, and a bad target raises its error at the epoch's end.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/cuda/graph.h"
#include "core/ops/ops.h"
#include "core/tensor/storage.h"
#include "cuda/cuda_helpers.h"
#include "kernels/gemm.h"
#include "layers/models.h"
#include "optim/optimizer.h"
#include "train/fused_mlp_step.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

namespace {

struct Run {
  std::vector<double> epoch_losses;
  std::vector<float> weights;
  std::string description;
  std::size_t kernels = 0;
  std::size_t launches = 0;  // kernels and library calls one eager step issued
};

// Trains 784-hidden-10 for `epochs` epochs of 12 batches (the last one partial) on `device`.
Run train_mlp(Device device, const std::vector<std::int64_t>& hidden, train::FusedMlpStepOptions options,
              int epochs = 3, const std::string& kind = "sgd") {
  Generator init(11);
  auto model = nn::mlp(784, hidden, 10, &init);
  model->to(device);
  std::unique_ptr<optim::Optimizer> opt;
  if (kind == "sgd")
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::GroupOptions{.lr = 0.1, .momentum = 0.9});
  else
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::GroupOptions{.lr = 1e-3});
  train::FusedMlpStep step(*model, *opt, 128, {.fused = options});
  Generator data(5);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int b = 0; b < 12; ++b) {
    const std::int64_t rows = b == 11 ? 37 : 128;
    batches.emplace_back(uniform({rows, 784}, 0, 1, {}, &data).to(device),
                         randint(0, 10, {rows}, {.dtype = DType::i32}, &data).to(device));
  }
  Run run;
  for (int e = 0; e < epochs; ++e) {
    step.reset_loss_sum();
    for (const auto& [x, y] : batches) step.step(x, y);
    run.epoch_losses.push_back(step.loss_sum().item<double>());
    opt->param_groups()[0].options.lr *= 0.5;  // a changed rate must reach a replayed graph
  }
  run.weights = model->parameters()[0].cpu().to_vector<float>();
  run.description = step.describe();
  run.kernels = step.graph_kernel_nodes();
  run.launches = step.step_launches();
  return run;
}

void require_same(const Run& a, const Run& b, double rtol, double weight_margin = 1e-5) {
  REQUIRE(a.epoch_losses.size() == b.epoch_losses.size());
  for (std::size_t e = 0; e < a.epoch_losses.size(); ++e)
    REQUIRE(a.epoch_losses[e] == Approx(b.epoch_losses[e]).epsilon(rtol));
  for (std::size_t i = 0; i < a.weights.size(); i += 97)
    REQUIRE(a.weights[i] == Approx(b.weights[i]).margin(weight_margin).epsilon(1e-3));
}

}  // namespace

TEST_CASE("a graph-replayed MLP step gives the eager step's per-epoch losses", "[graph]") {
  for (const std::string kind : {"sgd", "adam"}) {
    INFO(kind);
    const Run eager = train_mlp(kGpu, {32}, {.cuda_graph = false}, 3, kind);
    const Run graph = train_mlp(kGpu, {32}, {.cuda_graph = true}, 3, kind);
    INFO(graph.description);
    REQUIRE(graph.kernels > 0);
    // The same kernels on the same data in the same order: equal up to run-to-run GEMM choices.
    require_same(graph, eager, 1e-5);
  }
}

TEST_CASE("the cuBLASLt epilogues agree with plain GEMMs and with the CPU") {
  // Under compute-sanitizer (EMBER_TEST_SIZES=small) the three-layer model is smaller.
  const std::vector<std::int64_t> deep =
      small_test_sizes() ? std::vector<std::int64_t>{64, 32} : std::vector<std::int64_t>{512, 256};
  for (const std::vector<std::int64_t>& hidden : {std::vector<std::int64_t>{32}, deep}) {
    const Run fused = train_mlp(kGpu, hidden, {.gemm_epilogues = true});
    const Run plain = train_mlp(kGpu, hidden, {.gemm_epilogues = false});
    const Run cpu = train_mlp(Device::cpu(), hidden, {});
    INFO(fused.description);
    // Different GEMM algorithms and summation orders over three epochs of training.
    require_same(fused, plain, 1e-4);
    // Against the CPU, whose GEMMs sum in another order, 784-512-256-10 needs 1e-3 on the losses
    // and 5e-3 absolute on the weights: three epochs of SGD with momentum 0.9 at lr 0.1 on random
    // labels amplify rounding. Measured on the software GPU (docs/simulator.md, "The full-size
    // epilogue test"): the per-epoch loss sums part by 3.2e-5, 4.2e-5 and 1.8e-4, growing from
    // 1e-7 at the first step, the sampled weights by up to 9.5e-4, while fused and plain GEMMs
    // agree to the bit; moving the first layer's weights by one ulp on the CPU alone moves single
    // steps' losses by 1.1e-4 by the third epoch. Both bounds leave a factor of 5.
    const bool full_deep = hidden.size() > 1 && !small_test_sizes();
    require_same(fused, cpu, full_deep ? 1e-3 : 1e-4, full_deep ? 5e-3 : 1e-5);
  }
}

// ember's own launches are counted, not the graph's kernel nodes: a real cuBLAS may add nodes of
// its own to a GEMM (a split-K reduction, a memset), which is its business.
TEST_CASE("the captured step of the two-layer MLP issues at most 8 kernels and library calls", "[graph]") {
  const Run run = train_mlp(kGpu, {32}, {}, 1);
  INFO(run.description);
  std::printf("two-layer MLP step: %zu kernels and library calls issued, %zu kernel nodes per replay (%s)\n",
              run.launches, run.kernels, run.description.c_str());
  REQUIRE(run.launches > 0);
  CHECK(run.launches <= 8);
  CHECK(run.kernels >= run.launches);  // each issued kernel or GEMM is at least one node
}

TEST_CASE("a bad target under a graph raises its error at the epoch's end", "[graph]") {
  Generator init(1);
  auto model = nn::mlp(784, {32}, 10, &init);
  model->to(kGpu);
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  train::FusedMlpStep step(*model, sgd, 64);
  Generator data(2);
  const Tensor x = uniform({64, 784}, 0, 1, {}, &data).to(kGpu);
  const Tensor good = randint(0, 10, {64}, {.dtype = DType::i32}, &data).to(kGpu);
  for (int i = 0; i < 5; ++i) step.step(x, good);  // captured by now
  REQUIRE(step.graph_captured());
  std::vector<std::int32_t> labels = good.cpu().to_vector<std::int32_t>();
  labels[17] = 12;
  step.step(x, from_vector(labels, {64}).to(kGpu));  // returns: nothing synchronizes
  REQUIRE_THROWS_WITH(step.loss_sum().item<double>(), Contains("target 12 at row 17"));
}

TEST_CASE("a setting changed after capture reaches the replayed step: the graph is captured again") {
  auto run = [](bool graph) {
    Generator init(3);
    auto model = nn::mlp(784, {32}, 10, &init);
    model->to(kGpu);
    optim::SGD sgd(model->parameters(), {.lr = 0.05});
    train::FusedMlpStep step(*model, sgd, 64, {.fused = {.cuda_graph = graph}});
    Generator data(8);
    const Tensor x = uniform({64, 784}, 0, 1, {}, &data).to(kGpu);
    const Tensor y = randint(0, 10, {64}, {.dtype = DType::i32}, &data).to(kGpu);
    for (int i = 0; i < 6; ++i) step.step(x, y);
    sgd.param_groups()[0].options.momentum = 0.9;  // baked into the update kernel's arguments
    for (int i = 0; i < 6; ++i) step.step(x, y);
    return model->parameters()[0].cpu().to_vector<float>();
  };
  const auto eager = run(false), graph = run(true);
  for (std::size_t i = 0; i < eager.size(); i += 101) REQUIRE(graph[i] == Approx(eager[i]).margin(1e-6).epsilon(1e-5));
}

TEST_CASE("a captured cuBLAS GEMM allocates nothing, and a graph counts the allocations captured in it", "[graph]") {
  // cublasSetStream resets cuBLAS's workspace to its default pool, which would allocate inside a
  // capture; ember sets its own workspace after every cublasSetStream.
  const cudaStream_t stream = gpu_stream();
  Tensor a = ember::ones({8, 8}, {.device = kGpu}), b = ember::ones({8, 8}, {.device = kGpu});
  Tensor c = ember::empty({8, 8}, {.device = kGpu});
  const auto gemm = [&] {
    kernels::cuda::gemm(kernels::Transpose::no, kernels::Transpose::no, 8, 8, 8, 1.0f, a.raw<float>(), 8,
                        b.raw<float>(), 8, 0.0f, c.raw<float>(), 8, stream);
  };
  gemm();  // once eagerly: cuBLAS's handle and this stream's workspace exist before capture
  cuda::Graph gemm_graph;
  gemm_graph.begin_capture(stream);
  gemm();
  gemm_graph.end_capture();
  CHECK(gemm_graph.kernel_nodes() >= 1);  // cuBLAS may add a reduction kernel or a memset of its own
  CHECK(gemm_graph.allocation_nodes() == 0);
  gemm_graph.replay(stream);
  for (float v : c.to_vector<float>()) CHECK(v == 8.0f);
  cuda::Graph allocating;
  allocating.begin_capture(stream);
  { const Tensor made_inside = ember::empty({256}, {.device = kGpu}); }  // allocated and freed inside
  allocating.end_capture();
  CHECK(allocating.allocation_nodes() == 1);
  // A stream's first GEMM cannot be captured (its workspace is made then): a clear error.
  cuda::Stream fresh(kGpu);
  cuda::Graph first;
  first.begin_capture(fresh.handle());
  CHECK_THROWS_WITH(kernels::cuda::gemm(kernels::Transpose::no, kernels::Transpose::no, 8, 8, 8, 1.0f, a.raw<float>(),
                                        8, b.raw<float>(), 8, 0.0f, c.raw<float>(), 8, fresh.handle()),
                    Contains("Run the work once eagerly before capturing it"));
  first.abandon_capture();
}

TEST_CASE("an optimizer changed just before the first capture gets one more eager step, not buffers in the graph",
          "[graph]") {
  // Momentum switched on after the eager steps and before the capturing one: its buffers must be
  // made by an eager step. Made inside the capture they would exist only in the graph.
  auto run = [](bool graph) {
    Generator init(4);
    auto model = nn::mlp(784, {32}, 10, &init);
    model->to(kGpu);
    optim::SGD sgd(model->parameters(), {.lr = 0.05});
    train::FusedMlpStep step(*model, sgd, 64, {.fused = {.cuda_graph = graph, .eager_steps = 1}});
    Generator data(9);
    const Tensor x = uniform({64, 784}, 0, 1, {}, &data).to(kGpu);
    const Tensor y = randint(0, 10, {64}, {.dtype = DType::i32}, &data).to(kGpu);
    step.step(x, y);
    sgd.param_groups()[0].options.momentum = 0.9;
    for (int i = 0; i < 5; ++i) step.step(x, y);
    if (graph) REQUIRE(step.graph_captured());
    return model->parameters()[0].cpu().to_vector<float>();
  };
  const auto eager = run(false), graph = run(true);
  for (std::size_t i = 0; i < eager.size(); i += 101) REQUIRE(graph[i] == Approx(eager[i]).margin(1e-6).epsilon(1e-5));
}

TEST_CASE("replayed steps allocate nothing, on the device or the host", "[graph]") {
  Generator init(2);
  auto model = nn::mlp(784, {32}, 10, &init);
  model->to(kGpu);
  optim::Adam adam(model->parameters(), {.lr = 1e-3});
  train::FusedMlpStep step(*model, adam, 128);
  Generator data(6);
  const Tensor x = uniform({128, 784}, 0, 1, {}, &data).to(kGpu);
  const Tensor y = randint(0, 10, {128}, {.dtype = DType::i32}, &data).to(kGpu);
  for (int i = 0; i < 5; ++i) step.step(x, y);
  REQUIRE(step.graph_captured());
  synchronize(kGpu);
  const MemoryStats device_before = memory_stats(kGpu), host_before = memory_stats(Device::cpu());
  for (int i = 0; i < 50; ++i) step.step(x, y);
  synchronize(kGpu);
  const MemoryStats device_after = memory_stats(kGpu), host_after = memory_stats(Device::cpu());
  CHECK(device_after.allocations == device_before.allocations);
  CHECK(device_after.reserved_bytes == device_before.reserved_bytes);
  CHECK(host_after.allocations == host_before.allocations);
}
