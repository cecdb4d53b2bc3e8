// A stand-in for ATen/autocast_mode.h as recent PyTorch 2.x installs it: the CUDA policy lists as
// AT_FORALL_* macros whose lines continue with backslashes, a list ending where the next #define
// starts, one entry spread over several lines, and the overload names after the op's. It holds
// the entries of PyTorch's lists that ember's ops map to, and a few others, so that the
// autocast_torch_header_2x test reads that layout and compares every op on machines whose own
// PyTorch header has no lists (the real lists are read wherever the installed header holds them).
#pragma once

// As PyTorch lays the lists out (clang-format would join the spread entry).
// clang-format off
#define AT_FORALL_LOWER_PRECISION_FP(_) \
  _(_convolution, deprecated)           \
  _(conv1d)                             \
  _(conv2d)                             \
  _(matmul)                             \
  _(mm)                                 \
  _(linear)                             \
  _(bmm)                                \
  _(scaled_dot_product_attention)
#define AT_FORALL_FP32(_)  \
  _(acos)                  \
  _(exp)                   \
  _(log)                   \
  _(pow, Tensor_Scalar)    \
  _(pow, Tensor_Tensor)    \
  _(rsqrt)                 \
  _(softplus)              \
  _(layer_norm)            \
  _(nll_loss)              \
  _(mse_loss)              \
  _(binary_cross_entropy_with_logits)

#define AT_FORALL_FP32_SET_OPT_DTYPE(_) \
  _(prod)                               \
  _(softmax, int)                       \
  _(log_softmax, int)                   \
  _(cumsum)                             \
  _(sum)                                \
  _(sum, dim_IntList)

#define AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(_) \
  _(ADD_NS(norm),                                   \
    "norm.Scalar",                                  \
    Tensor(const Tensor&, const Scalar&),           \
    fp32_append_dtype)

#define AT_FORALL_PROMOTE(_) \
  _(addcdiv)                 \
  _(atan2)                   \
  _(cross)                   \
  _(dot)
// clang-format on
