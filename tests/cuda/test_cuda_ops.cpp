// Autograd on the GPU against the same computation on the CPU: a forward and backward pass through
// a small classifier. Every op alone, results and gradients, is compared by ops_cuda
// (tests/core/test_op_devices.cpp, from the op table).
#include <catch2/catch.hpp>

#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "core/tensor/random.h"
#include "cuda/cuda_helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {
std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }
}  // namespace

TEST_CASE("a classifier's forward and backward pass on the GPU matches the CPU") {
  Generator g(11);
  const Tensor x = uniform({64, 784}, 0, 1, {}, &g);
  const Tensor y = randint(0, 10, {64}, {.dtype = DType::i64}, &g);
  std::vector<Tensor> cpu_params{uniform({32, 784}, -0.03, 0.03, {}, &g), uniform({32}, -0.03, 0.03, {}, &g),
                                 uniform({10, 32}, -0.17, 0.17, {}, &g), uniform({10}, -0.17, 0.17, {}, &g)};
  std::vector<Tensor> gpu_params;
  for (Tensor& p : cpu_params) {
    gpu_params.push_back(p.to(kGpu).set_requires_grad());
    p.set_requires_grad();
  }
  auto loss_of = [](const Tensor& x, const Tensor& y, const std::vector<Tensor>& p) {
    return cross_entropy(linear(relu(linear(x, p[0], p[1])), p[2], p[3]), y);
  };
  const Tensor cpu_loss = loss_of(x, y, cpu_params);
  const Tensor gpu_loss = loss_of(x.to(kGpu), y.to(kGpu), gpu_params);
  cpu_loss.backward();
  gpu_loss.backward();
  CHECK(gpu_loss.item<float>() == Approx(cpu_loss.item<float>()).epsilon(1e-5));
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(gpu_params[i].grad().device() == kGpu);
    EMBER_REQUIRE_CLOSE(values(gpu_params[i].grad()), values(cpu_params[i].grad()), 1e-5, 1e-4);
  }
}
