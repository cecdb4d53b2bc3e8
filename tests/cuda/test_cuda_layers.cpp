// Layers, optimizers and checkpoints on the GPU: the fused multi-tensor updates against the CPU,
// checkpoints moving between devices, a module called on the wrong device, LeakyReLU's kernels.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "core/io/serialize.h"
#include "core/ops/ops.h"
#include "cuda/cuda_helpers.h"
#include "layers/nn.h"
#include "optim/optimizer.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

namespace {
std::shared_ptr<nn::Sequential> mlp(std::uint64_t seed) {
  Generator g(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(20, 16, true, &g), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(16, 5, true, &g)});
}

template <class Opt>
void compare_optimizer(const optim::GroupOptions& options) {
  auto cpu_model = mlp(1), gpu_model = mlp(1);
  gpu_model->to(kGpu);
  Opt cpu_opt(cpu_model->parameters(), options), gpu_opt(gpu_model->parameters(), options);
  Generator g(2);
  for (int step = 0; step < 5; ++step) {
    const Tensor x = uniform({8, 20}, -1, 1, {}, &g);
    const Tensor y = randint(0, 5, {8}, {.dtype = DType::i64}, &g);
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    cross_entropy((*cpu_model)(x), y).backward();
    cross_entropy((*gpu_model)(x.to(kGpu)), y.to(kGpu)).backward();
    cpu_opt.step();
    gpu_opt.step();
  }
  const auto cpu_params = cpu_model->parameters(), gpu_params = gpu_model->parameters();
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    INFO("parameter " << i);
    EMBER_REQUIRE_CLOSE(gpu_params[i].to_vector<float>(), cpu_params[i].to_vector<float>(), 1e-5, 1e-4);
  }
}
}  // namespace

TEST_CASE("the fused CUDA optimizer updates match the CPU, with the step counts advanced in the same launch or not") {
  const bool fused = GENERATE(true, false);
  INFO("fusion " << fused);
  const FusionScope scope(fused);
  SECTION("SGD") { compare_optimizer<optim::SGD>({.lr = 0.1}); }
  SECTION("SGD with momentum, weight decay, Nesterov") {
    compare_optimizer<optim::SGD>({.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
  }
  SECTION("Adam") { compare_optimizer<optim::Adam>({.lr = 0.01, .weight_decay = 1e-2}); }
  SECTION("AdamW") { compare_optimizer<optim::AdamW>({.lr = 0.01, .weight_decay = 1e-2}); }
}

TEST_CASE("model.to(device) moves parameters in place; the optimizer follows") {
  auto model = mlp(3);
  const Tensor w = model->parameters()[0];
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  sum((*model)(ones({2, 20}))).backward();
  sgd.step();  // momentum buffers on the CPU
  model->to(kGpu);
  CHECK(w.device() == kGpu);  // the handle the optimizer holds moved too
  CHECK(w.grad().device() == kGpu);
  sgd.zero_grad();
  sum((*model)(ones({2, 20}, {.device = kGpu}))).backward();
  CHECK_NOTHROW(sgd.step());
  CHECK(model->device() == kGpu);
}

TEST_CASE("a module called on an input on another device names the module") {
  auto model = mlp(4);
  model->to(kGpu);
  const std::string message = testing::message_of<DeviceError>([&] { (*model)(ones({2, 20})); });
  CHECK_THAT(message, Contains("Expected all tensors to be on the same device, but found cuda:0 and cpu "
                               "(argument 'input' of Linear '0')"));
  nn::CrossEntropyLoss loss;
  CHECK_THAT(testing::message_of<DeviceError>([&] {
               loss((*model)(ones({2, 20}, {.device = kGpu})), zeros({2}, {.dtype = DType::i64}));
             }),
             Contains("(argument 'target' of CrossEntropyLoss)"));
}

TEST_CASE("checkpoints load on any device, whatever device saved them") {
  const std::string path = (std::filesystem::temp_directory_path() / "ember_cuda_ckpt.safetensors").string();
  auto gpu_model = mlp(5);
  gpu_model->to(kGpu);
  nn::save(*gpu_model, path);
  const Checkpoint on_cpu = load_safetensors(path, Device::cpu());
  for (const auto& [name, t] : on_cpu.tensors) CHECK(t.device() == Device::cpu());
  auto cpu_model = mlp(6);
  nn::load(*cpu_model, path);
  const Tensor x = uniform({3, 20}, -1, 1);
  EMBER_REQUIRE_CLOSE((*cpu_model)(x).to_vector<float>(), (*gpu_model)(x.to(kGpu)).to_vector<float>(), 1e-5, 1e-5);

  auto cpu_saved = mlp(7);
  nn::save(*cpu_saved, path);
  const Checkpoint on_gpu = load_safetensors(path, kGpu);
  for (const auto& [name, t] : on_gpu.tensors) CHECK(t.device() == kGpu);
  auto target = mlp(8);
  target->to(kGpu);
  nn::load(*target, path);
  EMBER_REQUIRE_CLOSE((*target)(x.to(kGpu)).to_vector<float>(), (*cpu_saved)(x).to_vector<float>(), 1e-5, 1e-5);
  std::filesystem::remove(path);
}

TEST_CASE("leaky_relu on the GPU: forward and gradient as on the CPU") {
  // Its kernels are the generic elementwise ones (test_cuda_elementwise_kernels.cpp); here the op end to end.
  const Tensor x = from_vector<float>({-1, 2, -0.0f, 0.5f}, {4});
  CHECK(nn::leaky_relu(x.to(kGpu), 0.5).to_vector<float>() == nn::leaky_relu(x, 0.5).to_vector<float>());
  Tensor on_gpu = x.to(kGpu).set_requires_grad(true), on_cpu = x.clone().set_requires_grad(true);
  sum(nn::leaky_relu(on_gpu, 0.5)).backward();
  sum(nn::leaky_relu(on_cpu, 0.5)).backward();
  CHECK(on_gpu.grad().to_vector<float>() == on_cpu.grad().to_vector<float>());
}

TEST_CASE("dropout drops the same elements on the GPU as on the CPU") {
  const Tensor x = uniform({1000, 37}, -1, 1);
  const Tensor cpu = dropout(x, 0.4, 123, 456);
  const Tensor gpu = dropout(x.to(kGpu), 0.4, 123, 456);
  CHECK(gpu.to_vector<float>() == cpu.to_vector<float>());
  const auto values = cpu.to_vector<float>();
  const double dropped = static_cast<double>(std::count(values.begin(), values.end(), 0.0f)) / values.size();
  CHECK(dropped == Approx(0.4).margin(0.02));
}
