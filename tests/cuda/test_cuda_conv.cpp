// Convolution, pooling and batch normalization on the GPU (cuDNN and ember's kernels) against the
// CPU's im2col + GEMM and direct loops.
//
// Tolerances: a convolution output is a dot product of C·KH·KW terms and a weight gradient one of
// N·OH·OW terms, summed by cuDNN in float in its own order; the CPU sums with OpenBLAS in float
// too. Their difference is bounded by (terms)·ε·Σ|products|; with inputs in [−1, 1] and at most
// a few thousand terms a relative 2e-4 with an absolute 1e-4 covers that bound. At 3×3 stride 1
// with 8+ channels the CPU runs Winograd F(4×4, 3×3), whose transforms scale a tile by up to ~100
// before Aᵀ's differences bring it back: about 2.5e-5 of the outputs' typical size (measured
// 2.0e-4 on input gradients of size ~8 at 64 channels), so those outputs get an absolute 5e-4.
// A weight gradient there sums N·OH·OW products (36,864 for the 64×32×26² case) whose absolute
// sum is ~9e3 and which cancel to values near 1: a float rounding of ε·9e3 ≈ 1e-3 on either side,
// in cuDNN's order (which the software GPU shuffles with its block order) and more so after the
// transforms; measured 1.3e-3 under one of the simulator's orders, so those get an absolute 4e-3.
// Batch statistics: the GPU sums N·H·W floats in a tree, the CPU in double; 1e-5 relative.
#include <catch2/catch.hpp>

#include <cstring>

#include "core/ops/fused.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "cuda/cuda_helpers.h"
#include "kernels/conv.h"
#include "layers/models.h"
#include "optim/optimizer.h"

using namespace ember;
using namespace ember::testing;

namespace {
Tensor rnd(const Shape& shape, std::uint64_t seed) {
  Generator g(seed);
  return uniform(shape, -1, 1, {}, &g);
}
}  // namespace

TEST_CASE("cuDNN convolution forward and backward match the CPU", "[cudnn]") {
  INFO("cuDNN version " << kernels::cuda::cudnn_version());
  REQUIRE(kernels::cuda::cudnn_available());
  CHECK(kernels::cuda::cudnn_version() >= 90000);
  const bool fused = GENERATE(false, true);  // conv2d, or conv2d_relu (ReLU in place after the bias)
  const auto op = fused ? &fused::conv2d_relu : &conv2d;
  for (auto [n, c, h, k, kernel, stride, pad] :
       {std::tuple{2, 1, 28, 8, 3, 1, 0}, std::tuple{3, 8, 13, 16, 3, 2, 1}, std::tuple{64, 32, 26, 64, 3, 1, 0},
        std::tuple{1, 3, 7, 5, 5, 1, 2}}) {
    INFO((fused ? "conv2d_relu " : "conv2d ")
         << n << "x" << c << "x" << h << "x" << h << " kernel " << kernel << " stride " << stride << " pad " << pad);
    const Tensor x = rnd({n, c, h, h}, 1).set_requires_grad(), w = rnd({k, c, kernel, kernel}, 2).set_requires_grad();
    const Tensor b = rnd({k}, 3).set_requires_grad();
    const Tensor gx = x.detach().to(kGpu).set_requires_grad(), gw = w.detach().to(kGpu).set_requires_grad();
    const Tensor gb = b.detach().to(kGpu).set_requires_grad();
    const Tensor y = op(x, w, b, stride, pad), gy = op(gx, gw, gb, stride, pad);
    const bool winograd = kernels::cpu::winograd_applies(
        {static_cast<std::size_t>(n), static_cast<std::size_t>(c), static_cast<std::size_t>(h),
         static_cast<std::size_t>(h), static_cast<std::size_t>(k), static_cast<std::size_t>(kernel),
         static_cast<std::size_t>(kernel), static_cast<std::size_t>(stride), static_cast<std::size_t>(pad)});
    const double atol = winograd ? 5e-4 : 1e-4;
    EMBER_REQUIRE_CLOSE(gy.to_vector<float>(), y.to_vector<float>(), atol, 2e-4);
    // Where an output lies within the devices' difference of ReLU's kink, the two may put it on
    // opposite sides, and its whole gradient on one of them: no gradient flows from there.
    const Tensor away_from_kink = gt(abs(conv2d(x.detach(), w.detach(), b.detach(), stride, pad)), 1e-2);
    const Tensor upstream = where(away_from_kink, rnd(y.shape(), 4), zeros(y.shape()));
    sum(y * upstream).backward();
    sum(gy * upstream.to(kGpu)).backward();
    EMBER_REQUIRE_CLOSE(gx.grad().to_vector<float>(), x.grad().to_vector<float>(), atol, 2e-4);
    EMBER_REQUIRE_CLOSE(gw.grad().to_vector<float>(), w.grad().to_vector<float>(), winograd ? 4e-3 : 1e-3, 2e-4);
    EMBER_REQUIRE_CLOSE(gb.grad().to_vector<float>(), b.grad().to_vector<float>(), 1e-3, 1e-5);
  }
}

TEST_CASE("conv2d_relu_max_pool2d on the GPU is its composition there, and the CPU's values", "[cudnn]") {
  // The CNN's conv2 (the CPU pools in its Winograd tiles) and a shape the CPU runs by im2col.
  // Deterministic cuDNN, so that the two backward passes may be compared bit for bit.
  ember::cuda::set_deterministic(true);
  for (auto [n, c, h, k] : {std::tuple{8, 32, 26, 64}, std::tuple{2, 4, 9, 8}}) {
    INFO(n << "x" << c << "x" << h << "x" << h << " → " << k);
    const Tensor x = rnd({n, c, h, h}, 11), w = rnd({k, c, 3, 3}, 12), b = rnd({k}, 13);
    Tensor gx = x.to(kGpu).set_requires_grad(), gw = w.to(kGpu).set_requires_grad(),
           gb = b.to(kGpu).set_requires_grad();
    const Tensor fused = fused::conv2d_relu_max_pool2d(gx, gw, gb, 1, 0, 2);
    const Tensor composed = max_pool2d(fused::conv2d_relu(gx, gw, gb, 1, 0), 2);
    CHECK(fused.to_vector<float>() == composed.to_vector<float>());
    const Tensor upstream = rnd(fused.shape(), 14).to(kGpu);
    std::vector<std::vector<float>> grads;
    for (const Tensor& y : {fused, composed}) {
      for (Tensor* t : {&gx, &gw, &gb}) t->set_grad(Tensor());
      sum(y * upstream).backward();
      for (Tensor* t : {&gx, &gw, &gb}) grads.push_back(t->grad().to_vector<float>());
    }
    for (std::size_t i = 0; i < 3; ++i) CHECK(grads[i] == grads[i + 3]);
    // The pooled values as the CPU computes them (Winograd's rounding: see the tolerances above).
    EMBER_REQUIRE_CLOSE(fused.to_vector<float>(), fused::conv2d_relu_max_pool2d(x, w, b, 1, 0, 2).to_vector<float>(),
                        5e-4, 2e-4);
  }
  ember::cuda::set_deterministic(false);
}

TEST_CASE("deterministic mode gives bit-identical convolution gradients run after run", "[cudnn]") {
  ember::cuda::set_deterministic(true);
  const Tensor x = rnd({32, 16, 20, 20}, 5).to(kGpu), w = rnd({32, 16, 3, 3}, 6).to(kGpu);
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 3; ++r) {
    Tensor wr = w.detach().clone().set_requires_grad();
    sum(conv2d(x, wr) * 0.5).backward();
    runs.push_back(wr.grad().to_vector<float>());
  }
  ember::cuda::set_deterministic(false);
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 4) == 0);
  CHECK(std::memcmp(runs[0].data(), runs[2].data(), runs[0].size() * 4) == 0);
}

TEST_CASE("max pooling and batch normalization on the GPU match the CPU") {
  Tensor x = rnd({8, 6, 12, 12}, 7).set_requires_grad();
  Tensor gx = x.detach().to(kGpu).set_requires_grad();
  for (auto [kernel, stride] : {std::pair{2, 2}, std::pair{3, 2}}) {
    INFO("pool " << kernel << " stride " << stride);
    const Tensor y = max_pool2d(x, kernel, stride), gy = max_pool2d(gx, kernel, stride);
    CHECK(gy.to_vector<float>() == y.to_vector<float>());
    x.set_grad(Tensor());
    gx.set_grad(Tensor());
    sum(y * y).backward();
    sum(gy * gy).backward();
    EMBER_REQUIRE_CLOSE(gx.grad().to_vector<float>(), x.grad().to_vector<float>(), 0.0, 1e-6);
  }
  const Tensor gamma = rnd({6}, 8).set_requires_grad(), beta = rnd({6}, 9).set_requires_grad();
  const Tensor ggamma = gamma.detach().to(kGpu).set_requires_grad(), gbeta = beta.detach().to(kGpu).set_requires_grad();
  Tensor rm = zeros({6}), rv = ones({6}), grm = zeros({6}, {.device = kGpu}), grv = ones({6}, {.device = kGpu});
  x.set_grad(Tensor());
  gx.set_grad(Tensor());
  const Tensor y = batch_norm(x, gamma, beta, rm, rv, true), gy = batch_norm(gx, ggamma, gbeta, grm, grv, true);
  EMBER_REQUIRE_CLOSE(gy.to_vector<float>(), y.to_vector<float>(), 1e-5, 1e-5);
  EMBER_REQUIRE_CLOSE(grm.to_vector<float>(), rm.to_vector<float>(), 1e-6, 1e-5);
  EMBER_REQUIRE_CLOSE(grv.to_vector<float>(), rv.to_vector<float>(), 1e-6, 1e-5);
  const Tensor upstream = rnd(y.shape(), 10);
  sum(y * upstream).backward();
  sum(gy * upstream.to(kGpu)).backward();
  EMBER_REQUIRE_CLOSE(gx.grad().to_vector<float>(), x.grad().to_vector<float>(), 1e-5, 1e-4);
  EMBER_REQUIRE_CLOSE(ggamma.grad().to_vector<float>(), gamma.grad().to_vector<float>(), 1e-4, 1e-4);
  EMBER_REQUIRE_CLOSE(gbeta.grad().to_vector<float>(), beta.grad().to_vector<float>(), 1e-4, 1e-5);
  const Tensor e = batch_norm(x.detach(), gamma.detach(), beta.detach(), rm, rv, false);
  const Tensor ge = batch_norm(gx.detach(), ggamma.detach(), gbeta.detach(), grm, grv, false);
  EMBER_REQUIRE_CLOSE(ge.to_vector<float>(), e.to_vector<float>(), 1e-5, 1e-5);
}

TEST_CASE("the CNN trains on the GPU as on the CPU for its first steps", "[cudnn]") {
  Generator data(1);
  const Tensor x = uniform({16, 1, 28, 28}, 0, 1, {}, &data);
  const Tensor y = randint(0, 10, {16}, {.dtype = DType::i64}, &data);
  Generator a(2), b(2);
  auto cpu_model = nn::cnn(8, 16, 32, &a), gpu_model = nn::cnn(8, 16, 32, &b);
  gpu_model->to(kGpu);
  optim::SGD cpu_opt(cpu_model->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD gpu_opt(gpu_model->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    const Tensor cpu_loss = cross_entropy((*cpu_model)(x), y),
                 gpu_loss = cross_entropy((*gpu_model)(x.to(kGpu)), y.to(kGpu));
    CHECK(gpu_loss.item<float>() == Approx(cpu_loss.item<float>()).epsilon(1e-4));
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    cpu_loss.backward();
    gpu_loss.backward();
    cpu_opt.step();
    gpu_opt.step();
  }
  const auto cp = cpu_model->parameters(), gp = gpu_model->parameters();
  for (std::size_t i = 0; i < cp.size(); ++i) {
    INFO("parameter " << i);
    EMBER_REQUIRE_CLOSE(gp[i].to_vector<float>(), cp[i].to_vector<float>(), 1e-4, 1e-3);
  }
}
