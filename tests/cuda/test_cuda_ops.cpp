// Ops and autograd on the GPU against the same computation on the CPU: a forward and backward
// pass through a small classifier, and every op's forward with the CPU as reference.
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

TEST_CASE("every op gives the CPU's result on the GPU") {
  Generator g(7);
  const Tensor a = uniform({37, 45}, -2, 2, {}, &g), b = uniform({37, 45}, 0.5, 2, {}, &g);
  const Tensor row = uniform({45}, -1, 1, {}, &g), w = uniform({11, 45}, -1, 1, {}, &g);
  const Tensor bias = uniform({11}, -1, 1, {}, &g);
  const Tensor target = randint(0, 45, {37}, {.dtype = DType::i64}, &g);
  const Tensor ga = a.to(kGpu), gb = b.to(kGpu), grow = row.to(kGpu), gw = w.to(kGpu), gbias = bias.to(kGpu);
  const Tensor gtarget = target.to(kGpu);
  auto same = [](const Tensor& cpu, const Tensor& gpu, double tol) {
    REQUIRE(gpu.device() == kGpu);
    REQUIRE(cpu.shape() == gpu.shape());
    EMBER_REQUIRE_CLOSE(values(gpu), values(cpu), tol, tol);
  };
  // Arithmetic and activations: a few ulp (see test_cuda_kernels.cpp for the reasoning).
  same(a + row, ga + grow, 1e-6);
  same(a - b, ga - gb, 1e-6);
  same(a * b, ga * gb, 1e-6);
  same(a / b, ga / gb, 1e-6);
  same(exp(a), exp(ga), 2e-6);
  same(log(b), log(gb), 2e-6);
  same(sqrt(b), sqrt(gb), 2e-6);
  same(pow(b, 1.5), pow(gb, 1.5), 2e-6);
  same(sigmoid(a), sigmoid(ga), 2e-6);
  same(tanh(a), tanh(ga), 2e-6);
  same(relu(a), relu(ga), 0.0);
  same(transpose(a), transpose(ga), 0.0);
  same(cat({a, b}, 1), cat({ga, gb}, 1), 0.0);
  same(slice(a, 1, 3, 9), slice(ga, 1, 3, 9), 0.0);
  // Reductions and products of length 45: 45·ε·Σ|x| is below 1e-4 here.
  same(sum(a, {0}), sum(ga, {0}), 1e-4);
  same(mean(a), mean(ga), 1e-5);
  same(matmul(a, transpose(b)), matmul(ga, transpose(gb)), 1e-4);
  same(linear(a, w, bias), linear(ga, gw, gbias), 1e-4);
  same(softmax(a), softmax(ga), 1e-5);
  same(log_softmax(a), log_softmax(ga), 1e-5);
  same(cross_entropy(a, target), cross_entropy(ga, gtarget), 1e-5);
  CHECK(argmax(a).to_vector<std::int64_t>() == argmax(ga).to_vector<std::int64_t>());
  CHECK(accuracy(a, target).item<float>() == accuracy(ga, gtarget).item<float>());
}

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
