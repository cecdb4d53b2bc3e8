// gradcheck: compares the gradients autograd computes with central finite differences, in f64
// on the CPU, like PyTorch's torch.autograd.gradcheck. Public API: use it to test any new op or
// layer (docs/writing-a-layer.md).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace ember {

struct GradcheckResult {
  bool passed = true;
  // Per input (in the order given; zero for inputs that do not require grad): the largest
  // |analytical − numerical| over the Jacobian, and the largest of that divided by |numerical|
  // (where |numerical| > 0).
  std::vector<double> max_abs_error;
  std::vector<double> max_rel_error;
  std::string report;  // the worst element of each failing input, for test output
};

// fn maps the inputs to one f64 output tensor of any shape. Every input that requires grad is
// checked element by element: Jacobian entry (i, j) passes when
// |analytical − numerical| ≤ atol + rtol·|numerical|. Inputs must be f64 CPU tensors.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3);

}  // namespace ember
