// The backward pass of an activation as one kernel, for ops that end in one: dx from the upstream
// gradient and the saved tensor (the activation's output, or its input: see ActivationGrad in
// kernels/elementwise_math.h), on the tensors' device. Internal to core's ops (not part of the
// extension API); defined in core/ops/unary.cpp beside the activations themselves.
#pragma once

#include "core/tensor/tensor.h"
#include "kernels/elementwise_math.h"

namespace ember {
Tensor activation_backward(kernels::ActivationGrad op, const Tensor& dy, const Tensor& saved, double a = 0,
                           double b = 0);
}  // namespace ember
