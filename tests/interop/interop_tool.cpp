// The ember side of the PyTorch interop test (torch_interop.py):
//   interop_tool save-mlp PATH HIDDEN SEED            writes a seeded 784-HIDDEN-10 MLP
//   interop_tool forward PATH HIDDEN INPUTS OUT       loads PATH, writes logits of INPUTS' "x"
//   interop_tool save-cnn PATH SEED | forward-cnn PATH INPUTS OUT | forward-bn PATH INPUTS OUT
//   interop_tool save-mlp-as PATH HIDDEN SEED DTYPE   the same MLP converted to DTYPE (bf16, f16), and
//                                                     its f32 parameters beside it as PATH.f32
//   interop_tool forward-as PATH HIDDEN DTYPE INPUTS OUT  loads PATH into a DTYPE MLP, writes the
//                                                     logits of "x" in DTYPE, widened to f32
//   interop_tool cast INPUTS OUT                      writes INPUTS' "x" as "bf16" and "f16", and
//                                                     its "bf16" and "f16" tensors as f32 "bf16_wide", "f16_wide"
#include <cstdlib>
#include <iostream>
#include <string>

#include "ember.h"

using namespace ember;

namespace {
// The tutorial's 784-hidden-10 MLP, initialized from `seed`.
std::shared_ptr<nn::Sequential> mlp(std::int64_t hidden, std::uint64_t seed) {
  Generator g(seed);
  return nn::mlp(784, {hidden}, 10, &g);
}
}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "save-mlp" && argc == 5) {
      nn::save(*mlp(std::atoll(argv[3]), std::strtoull(argv[4], nullptr, 10)), argv[2]);
      return 0;
    }
    if (command == "save-cnn" && argc == 4) {
      Generator g(std::strtoull(argv[3], nullptr, 10));
      nn::save(*nn::cnn(8, 16, 32, &g), argv[2]);
      return 0;
    }
    if ((command == "forward-cnn" || command == "forward-bn") && argc == 5) {
      // The CNN, or a small net with batch norm: Conv2d(1,4,3), BatchNorm2d(4), ReLU, Flatten, Linear.
      std::shared_ptr<nn::Module> model = nn::cnn(8, 16, 32);
      if (command == "forward-bn")
        model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
            std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 26 * 26, 10)});
      nn::load(*model, argv[2]);
      model->eval();
      const Checkpoint inputs = load_safetensors(argv[3]);
      const Tensor* x = find_tensor(inputs.tensors, "x");
      if (!x) throw ValueError(std::string(argv[3]) + ": no tensor 'x'");
      NoGradGuard no_grad;
      save_safetensors(argv[4], {{"logits", (*model)(x->reshape({-1, 1, 28, 28}))}});
      return 0;
    }
    if (command == "save-mlp-as" && argc == 6) {
      auto model = mlp(std::atoll(argv[3]), std::strtoull(argv[4], nullptr, 10));
      nn::save(*model, std::string(argv[2]) + ".f32");
      nn::save(model->to(parse_dtype(argv[5])), argv[2]);
      return 0;
    }
    if (command == "forward-as" && argc == 7) {
      const DType dtype = parse_dtype(argv[4]);
      auto model = mlp(std::atoll(argv[3]), 0);
      model->to(dtype);
      nn::load(*model, argv[2]);
      const Checkpoint inputs = load_safetensors(argv[5]);
      const Tensor* x = find_tensor(inputs.tensors, "x");
      if (!x) throw ValueError(std::string(argv[5]) + ": no tensor 'x'");
      NoGradGuard no_grad;
      save_safetensors(argv[6], {{"logits", (*model)(x->to(dtype)).to(DType::f32)}});
      return 0;
    }
    if (command == "cast" && argc == 4) {
      const Checkpoint inputs = load_safetensors(argv[2]);
      const Tensor* x = find_tensor(inputs.tensors, "x");
      const Tensor* b = find_tensor(inputs.tensors, "bf16");
      const Tensor* h = find_tensor(inputs.tensors, "f16");
      if (!x || !b || !h) throw ValueError(std::string(argv[2]) + ": expected tensors 'x', 'bf16' and 'f16'");
      save_safetensors(argv[3], {{"bf16", x->to(DType::bf16)},
                                 {"f16", x->to(DType::f16)},
                                 {"bf16_wide", b->to(DType::f32)},
                                 {"f16_wide", h->to(DType::f32)}});
      return 0;
    }
    if (command == "forward" && argc == 6) {
      auto model = mlp(std::atoll(argv[3]), 0);
      nn::load(*model, argv[2]);
      const Checkpoint inputs = load_safetensors(argv[4]);
      const Tensor* x = find_tensor(inputs.tensors, "x");
      if (!x) throw ValueError(std::string(argv[4]) + ": no tensor 'x'");
      NoGradGuard no_grad;
      save_safetensors(argv[5], {{"logits", (*model)(*x)}});
      return 0;
    }
    std::cerr << "usage: interop_tool save-mlp PATH HIDDEN SEED | forward PATH HIDDEN INPUTS OUT | save-cnn PATH SEED |"
                 " forward-cnn PATH INPUTS OUT | forward-bn PATH INPUTS OUT | save-mlp-as PATH HIDDEN SEED DTYPE |"
                 " forward-as PATH HIDDEN DTYPE INPUTS OUT | cast INPUTS OUT\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
