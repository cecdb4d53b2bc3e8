// Fused ops: several of the plain ops of core/ops/ops.h run as one, with the same values and
// gradients as their composition (up to the rounding noted at each). They live in a namespace of
// their own so that the plain API reads as PyTorch's does; a Sequential reaches them through
// Sequential::fuse (layers/container.h) when its FusionOptions ask for it, and code of one's own
// may call them directly. docs/ops.md lists them beside the plain ops.
#pragma once

#include "core/tensor/tensor.h"

namespace ember::fused {

// relu(linear(input, weight, bias)): the bias and the ReLU in one pass after the GEMM, and one
// node in the graph whose backward applies the mask and sums the bias gradient in one pass.
Tensor linear_relu(const Tensor& input, const Tensor& weight, const Tensor& bias);

// relu(conv2d(...)): on the CPU the ReLU runs on each image's output while it is in cache.
Tensor conv2d_relu(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), int stride = 1,
                   int padding = 0);

// max_pool2d(conv2d_relu(...), pool_kernel, pool_stride). On the CPU, for 3×3 stride-1 kernels
// and a 2×2 pooling, each 2×2 block of outputs is pooled as it is computed and the convolution's
// output is never stored; its backward needs only the pooled values and their positions.
Tensor conv2d_relu_max_pool2d(const Tensor& input, const Tensor& weight, const Tensor& bias, int stride, int padding,
                              int pool_kernel, int pool_stride = 0);

}  // namespace ember::fused
