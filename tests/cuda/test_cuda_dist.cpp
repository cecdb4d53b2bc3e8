// dist:: on a GPU through NCCL, with a one-rank communicator (a world of one: init_single_process):
// the collectives on CUDA tensors and their stream ordering, the bucketed reducer on CUDA
// gradients, and the fused step's reduction captured inside its CUDA graph. Two GPUs are tested
// with mpirun by the GPU check (docs/distributed.md). Built only where ember has NCCL.
#include <catch2/catch.hpp>

#include "core/ops/ops.h"
#include "cuda/cuda_helpers.h"
#include "distributed/dist.h"
#include "distributed/reducer.h"
#include "layers/models.h"
#include "optim/optimizer.h"
#include "train/fused_mlp_step.h"

using namespace ember;
using namespace ember::testing;

namespace {
void join_world_of_one() {
  if (!dist::is_initialized()) dist::init_single_process();
}
}  // namespace

TEST_CASE("NCCL on one rank: all_reduce, broadcast and the async sum keep the values, in stream order") {
  join_world_of_one();
  const std::vector<float> values = random_floats(100003, 3);
  Tensor t = from_vector(values, {100003}).to(kGpu);
  dist::all_reduce(t);
  dist::all_reduce(t, dist::ReduceOp::max);
  dist::broadcast(t, 0);
  CHECK(t.cpu().to_vector<float>() == values);
  // Written by the compute stream just before, read by it just after: the events must order both.
  Tensor u = t * 2.0;
  auto work = dist::all_reduce_async(u);
  work->wait();
  const Tensor v = u + 1.0;
  const std::vector<float> got = v.cpu().to_vector<float>();
  for (std::size_t i = 0; i < values.size(); i += 101) REQUIRE(got[i] == values[i] * 2.0f + 1.0f);
}

TEST_CASE("the reducer averages CUDA gradients in buckets during backward") {
  join_world_of_one();
  Generator g(4);
  auto model = nn::mlp(784, {64}, 10, &g);
  model->to(kGpu);
  dist::GradientReducer reducer(model->parameters(), {.bucket_bytes = 4096});
  REQUIRE(reducer.bucket_count() >= 2);
  const Tensor x = uniform({32, 784}, 0, 1, {}, &g).to(kGpu);
  const Tensor y = randint(0, 10, {32}, {.dtype = DType::i32}, &g).to(kGpu);
  cross_entropy((*model)(x), y).backward();
  std::vector<std::vector<float>> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.grad().cpu().to_vector<float>());
  reducer.finish();
  for (std::size_t i = 0; i < before.size(); ++i)
    CHECK(model->parameters()[i].grad().cpu().to_vector<float>() == before[i]);
}

TEST_CASE("the fused step's reduction is captured in its CUDA graph and changes nothing on one rank", "[graph]") {
  join_world_of_one();
  auto run = [](bool reduce) {
    Generator init(11);
    auto model = nn::mlp(784, {32}, 10, &init);
    model->to(kGpu);
    optim::Adam adam(model->parameters(), {.lr = 1e-3});
    train::FusedMlpStep step(*model, adam, 64, {.reduce_across_ranks = reduce});
    Generator data(5);
    for (int b = 0; b < 8; ++b)
      step.step(uniform({64, 784}, 0, 1, {}, &data).to(kGpu),
                randint(0, 10, {64}, {.dtype = DType::i32}, &data).to(kGpu));
    REQUIRE(step.graph_captured());
    INFO(step.describe());
    return std::make_pair(step.loss_sum().item<double>(), model->parameters()[0].cpu().to_vector<float>());
  };
  const auto [plain_loss, plain] = run(false);
  const auto [reduced_loss, reduced] = run(true);
  CHECK(reduced_loss == Approx(plain_loss).epsilon(1e-6));
  for (std::size_t i = 0; i < plain.size(); i += 97) REQUIRE(reduced[i] == Approx(plain[i]).margin(1e-6));
}
