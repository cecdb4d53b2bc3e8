// The example's two layers and its attention model, tested, and the layers trained:
//   custom_layer test                      gradchecks both layers and the attention model; the GELU
//                                          kernel against ember's own nn::GELU; on CUDA (a GPU, or
//                                          ember's software GPU) both against the CPU; exits
//                                          non-zero on any failure
//   custom_layer train MNIST_DIR OUT       trains 784-64-LayerNorm-GELU-10 on MNIST, prints the test
//                                          accuracy as JSON, saves the model to OUT (safetensors,
//                                          PyTorch's names: check_torch.py loads it with strict=True)
#include <ember/ember.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "gelu.h"
#include "layer_norm.h"
#include "row_attention.h"

using namespace ember;

namespace {

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

double largest_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.cpu().to_vector<double>(), y = b.cpu().to_vector<double>();
  double worst = x.size() == y.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

int run_tests() {
  Generator g(1);
  // Both layers against finite differences, in f64 on the CPU.
  const Tensor x = uniform({5, 6}, -3, 3, {.dtype = DType::f64}, &g).set_requires_grad();
  const GradcheckResult gelu_check =
      gradcheck([](const std::vector<Tensor>& in) { return example::gelu_tanh(in[0]); }, {x});
  check(gelu_check.passed, "gradcheck of the GELU op" + (gelu_check.passed ? "" : ": " + gelu_check.report));
  const Tensor w = uniform({6}, 0.5, 1.5, {.dtype = DType::f64}, &g).set_requires_grad();
  const Tensor b = uniform({6}, -1, 1, {.dtype = DType::f64}, &g).set_requires_grad();
  const GradcheckResult norm_check =
      gradcheck([](const std::vector<Tensor>& in) { return example::layer_norm(in[0], in[1], in[2]); }, {x, w, b});
  check(norm_check.passed, "gradcheck of layer_norm" + (norm_check.passed ? "" : ": " + norm_check.report));
  // The attention model (row_attention.h), tiny and in f64: 4 tokens of 3 pixels, 2 heads of 2.
  example::RowAttention tiny(4, 3, 4, 2, 3);
  tiny.to(DType::f64);
  const Tensor images = uniform({2, 1, 4, 3}, -1, 1, {.dtype = DType::f64}, &g).set_requires_grad();
  const GradcheckResult attention_check =
      gradcheck([&](const std::vector<Tensor>& in) { return tiny(in[0]); }, {images});
  check(attention_check.passed,
        "gradcheck of the attention model" + (attention_check.passed ? "" : ": " + attention_check.report));
  // The kernel against ember's own GELU, built from ops.
  const Tensor xf = uniform({1000}, -6, 6, {}, &g);
  check(largest_difference(example::gelu_tanh(xf), nn::GELU("tanh")(xf)) < 1e-6,
        "the GELU kernel equals ember's nn::GELU(\"tanh\") on the CPU");
  if (!cuda::is_available()) {
    std::printf("skipped: the GELU on CUDA (%s)\n", cuda::unavailable_reason().c_str());
  } else {
    // The CUDA kernel against the CPU one, forward and backward, at an odd size.
    const Device gpu = Device::cuda(0);
    const Tensor host = uniform({10001}, -6, 6, {}, &g).set_requires_grad();
    const Tensor device = host.detach().to(gpu).set_requires_grad();
    const Tensor upstream = uniform({10001}, -1, 1, {}, &g);
    sum(example::gelu_tanh(host) * upstream).backward();
    sum(example::gelu_tanh(device) * upstream.to(gpu)).backward();
    check(largest_difference(example::gelu_tanh(host), example::gelu_tanh(device)) < 1e-5,
          "the GELU on " + cuda::device_description(0) + " equals the CPU's");
    check(largest_difference(host.grad(), device.grad()) < 1e-5, "its gradient on CUDA equals the CPU's");
    example::LayerNorm norm(64);
    const Tensor rows = uniform({33, 64}, -2, 2, {}, &g);
    const Tensor on_cpu = norm(rows);
    norm.to(gpu);
    check(largest_difference(on_cpu, norm(rows.to(gpu))) < 1e-5, "the LayerNorm on CUDA equals the CPU's");
    example::RowAttention model(28, 28, 32, 4, 10);
    const Tensor digits = uniform({5, 1, 28, 28}, 0, 1, {}, &g);
    const Tensor logits = model(digits);
    model.to(gpu);
    check(largest_difference(logits, model(digits.to(gpu))) < 1e-4, "the attention model on CUDA equals the CPU's");
  }
  std::printf("custom_layer test: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}

int train_mnist(const std::string& mnist, const std::string& out) {
  manual_seed(0);
  const Device device = Device::best();
  auto model =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 64), std::make_shared<example::LayerNorm>(64),
                                       std::make_shared<example::GeluTanh>(), std::make_shared<nn::Linear>(64, 10));
  model->to(device);
  std::printf("device: %s\n%s\n", Device::best_reason().c_str(), model->repr().c_str());
  auto train_set = std::make_shared<data::IdxDataset>(mnist, data::Split::train);
  auto test_set = std::make_shared<data::IdxDataset>(mnist, data::Split::test);
  data::DataLoader train_loader(train_set, {.batch_size = 64, .pin_memory = device.is_cuda()});
  data::DataLoader test_loader(test_set, {.batch_size = 500, .shuffle = false, .pin_memory = device.is_cuda()});
  data::DeviceLoader train_batches(train_loader, device), test_batches(test_loader, device);
  optim::Adam adam(model->parameters(), {.lr = 2e-3});
  for (int epoch = 0; epoch < 3; ++epoch) {
    train_batches.start_epoch(epoch);
    while (auto batch = train_batches.next()) {
      Tensor loss = cross_entropy((*model)(batch->x), batch->y);
      adam.zero_grad();
      loss.backward();
      adam.step();
    }
  }
  NoGradGuard no_grad;
  model->eval();
  double correct = 0;
  test_batches.start_epoch(0);
  while (auto batch = test_batches.next())
    correct += accuracy((*model)(batch->x), batch->y).item<double>() * static_cast<double>(batch->y.numel());
  const double test_acc = correct / static_cast<double>(test_set->size());
  nn::save(*model, out);
  std::printf("{\"test_acc\": %.6f, \"checkpoint\": \"%s\"}\n", test_acc, out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "test" && argc == 2) return run_tests();
    if (command == "train" && argc == 4) return train_mnist(argv[2], argv[3]);
    std::fprintf(stderr, "usage: custom_layer test | custom_layer train MNIST_DIR OUT.safetensors\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
