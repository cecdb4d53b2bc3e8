// Route 2: an op with kernels of its own — the tanh approximation of GELU, with a CPU kernel
// (gelu.cpp), a CUDA kernel (gelu.cu) and its derivative rule — and the module around it. The
// kernels and their formula are in gelu_kernels.h, which the .cu file includes alone.
#pragma once

#include <ember/extension.h>

#include "gelu_kernels.h"

namespace example {

// The differentiable op, on the CPU (f32, f64) or CUDA (f32).
ember::Tensor gelu_tanh(const ember::Tensor& x);

// Prints and saves as torch.nn.GELU(approximate='tanh') does (it has no parameters).
class GeluTanh : public ember::nn::Module {
 public:
  ember::Tensor forward(const ember::Tensor& x) override { return gelu_tanh(x); }
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='tanh'"; }
};

}  // namespace example
