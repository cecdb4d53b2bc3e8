// Convolution and max pooling ops: im2col + GEMM or Winograd on the CPU, cuDNN and ember's kernels
// on CUDA (kernels/conv.h), each with its derivative rule beside it (batch normalization:
// core/ops/batch_norm.cpp).
#include "kernels/conv.h"
#include "core/ops/activation_grad.h"
#include "core/ops/autocast.h"
#include "core/ops/dispatch.h"
#include "core/ops/fused.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/elementwise.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;
using kernels::ConvGeometry;
using kernels::PoolGeometry;

std::size_t at(const Shape& s, std::size_t i) { return static_cast<std::size_t>(s[i]); }

// The CPU convolution kernels' workspace (im2col's columns, Winograd's tiles), from the host
// cache (a large std::vector would be fresh pages from the system on every call).
template <class T>
Tensor conv_workspace(std::size_t elements) {
  return empty({static_cast<std::int64_t>(elements)}, {.dtype = dtype_of<T>});
}

ConvGeometry checked_geometry(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias, int stride,
                              int padding) {
  ext::check_defined(op, {"input", input});
  ext::check_defined(op, {"weight", weight});
  ext::check_same_device(op, {{"input", input}, {"weight", weight}, {"bias", bias}});
  ext::check_same_dtype(op, {"input", input}, {"weight", weight});
  ext::check_floating(op, {"input", input});
  ext::check_dim(op, {"input", input}, 4);
  ext::check_dim(op, {"weight", weight}, 4);
  EMBER_CHECK(stride >= 1 && padding >= 0, ValueError, op, ": stride must be positive and padding non-negative");
  EMBER_CHECK(input.size(1) == weight.size(1), ShapeError, op, ": 'input' has ", input.size(1), " channels (shape ",
              shape_str(input.shape()), ") but 'weight' expects ", weight.size(1), " (shape ",
              shape_str(weight.shape()), ")");
  if (bias.defined()) {
    ext::check_same_dtype(op, {"input", input}, {"bias", bias});
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), ShapeError, op, ": 'bias' must have shape [",
                weight.size(0), "], but it has shape ", shape_str(bias.shape()));
  }
  ConvGeometry g{at(input.shape(), 0),
                 at(input.shape(), 1),
                 at(input.shape(), 2),
                 at(input.shape(), 3),
                 at(weight.shape(), 0),
                 at(weight.shape(), 2),
                 at(weight.shape(), 3),
                 static_cast<std::size_t>(stride),
                 static_cast<std::size_t>(padding)};
  EMBER_CHECK(g.h + 2 * g.pad >= g.kh && g.w + 2 * g.pad >= g.kw, ShapeError, op, ": a ", g.kh, "x", g.kw,
              " kernel does not fit the ", g.h, "x", g.w, " input with padding ", g.pad);
  return g;
}

// Note [bf16 convolution]: bf16 on the CPU has kernels of its own (ext::uses_cpu_bf16_kernels),
// with f32 results.
Tensor bf16_workspace(const ConvGeometry& g) {
  return empty({static_cast<std::int64_t>(kernels::cpu::conv2d_bf16_workspace_bytes(g))}, {.dtype = DType::u8});
}

// Whether a convolution computes on widened copies (Note [half precision]): 16-bit data on a CPU
// without bf16 kernels. CUDA's convolutions take bf16 and f16 themselves (Note [cuDNN math]).
bool widens(const Tensor& input) {
  return is_half(input.dtype()) && !input.is_cuda() && !ext::uses_cpu_bf16_kernels(input);
}

// y = conv(x, w) + b, and with `relu` max(0, y): on the CPU applied image by image while each
// image's output is in cache, on CUDA as cuDNN's convolution, the channel bias and ReLU in place.
// Unrounded: for bf16 on the CPU the f32 result, which the caller rounds once (the fused op after
// its pooling); else in the input's dtype.
Tensor conv_forward_unrounded(const Tensor& input, const Tensor& weight, const Tensor& bias, const ConvGeometry& g,
                              bool relu) {
  const Shape shape{static_cast<std::int64_t>(g.n), static_cast<std::int64_t>(g.k), static_cast<std::int64_t>(g.oh()),
                    static_cast<std::int64_t>(g.ow())};
  if (ext::uses_cpu_bf16_kernels(input)) {
    Tensor y = ext::new_empty(input, shape, DType::f32);
    const Tensor bias_wide = ext::widened(bias.defined() ? bias.detach() : bias);
    kernels::cpu::conv2d_forward_bf16(input.raw<bfloat16>(), weight.raw<bfloat16>(),
                                      bias.defined() ? bias_wide.raw<float>() : nullptr, y.raw<float>(), g,
                                      bf16_workspace(g).raw<std::uint8_t>());
    if (relu) kernels::cpu::unary<float>(kernels::UnaryOp::relu, y.raw<float>(), y.raw<float>(), y.numel(), {});
    return y;
  }
  Tensor y = ext::new_empty(input, shape);
  ext::dispatch_with_cuda_half(
      input,
      [&](auto zero) {
        using T = decltype(zero);
        Tensor workspace = conv_workspace<T>(kernels::cpu::conv2d_workspace_elements(g));
        kernels::cpu::conv2d_forward<T>(input.raw<T>(), weight.raw<T>(), bias.defined() ? bias.raw<T>() : nullptr,
                                        y.raw<T>(), g, workspace.raw<T>(), relu);
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        const std::size_t hw = g.oh() * g.ow(), n = static_cast<std::size_t>(y.numel());
        // 16 bits: the bias written first and the sum added to it (β = 1), one rounding for both as
        // on the CPU (Note [cuDNN math]); f32 adds it after, the same value.
        constexpr bool bias_first = kernels::is_half_v<T>;
        if (bias.defined() && bias_first) {
          kernels::cuda::fill(y.raw<T>(), T(0.0f), n, stream);
          kernels::cuda::channel_bias_add(y.raw<T>(), bias.raw<T>(), g.n, g.k, hw, stream);
        }
        kernels::cuda::conv2d_forward(input.raw<T>(), weight.raw<T>(), y.raw<T>(), g, stream,
                                      bias.defined() && bias_first);
        if (bias.defined() && !bias_first)
          kernels::cuda::channel_bias_add(y.raw<T>(), bias.raw<T>(), g.n, g.k, hw, stream);
        if (relu) kernels::cuda::unary(kernels::UnaryOp::relu, y.raw<T>(), y.raw<T>(), n, {}, stream);
      });
  return y;
}

Tensor conv_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const ConvGeometry& g, bool relu) {
  return conv_forward_unrounded(input, weight, bias, g, relu).to(input.dtype());
}

// conv_backward for bf16 on the CPU: the f32 gradients of its kernels, each rounded once.
Gradients conv_backward_bf16(const Tensor& x, const Tensor& w, const ConvGeometry& g, const Tensor& dz,
                             NeedsGrad needs) {
  Gradients grads(3);
  const Tensor workspace = bf16_workspace(g);
  if (needs[1]) {
    Tensor dw = ext::new_empty(w, w.shape(), DType::f32);
    kernels::cpu::conv2d_backward_filter_bf16(x.raw<bfloat16>(), dz.raw<bfloat16>(), dw.raw<float>(), g,
                                              workspace.raw<std::uint8_t>());
    grads[1] = dw.to(DType::bf16);
  }
  if (needs[0]) {
    Tensor dx = ext::new_empty(x, x.shape(), DType::f32);
    kernels::cpu::conv2d_backward_data_bf16(dz.raw<bfloat16>(), w.raw<bfloat16>(), dx.raw<float>(), g,
                                            workspace.raw<std::uint8_t>());
    grads[0] = dx.to(DType::bf16);
  }
  if (needs[2]) {
    Tensor db = ext::new_empty(w, {w.size(0)}, DType::f32);
    kernels::cpu::channel_bias_grad(dz.raw<bfloat16>(), db.raw<float>(), g.n, g.k, g.oh() * g.ow());
    grads[2] = db.to(DType::bf16);
  }
  return grads;
}

// The gradients of x, w and b from dz, the gradient of the convolution's own output.
Gradients conv_backward(const Tensor& x, const Tensor& w, const ConvGeometry& g, const Tensor& dz, NeedsGrad needs) {
  if (ext::uses_cpu_bf16_kernels(x)) return conv_backward_bf16(x, w, g, dz, needs);
  Gradients grads(3);
  if (needs[0]) grads[0] = ext::new_empty(x, x.shape());
  if (needs[1]) grads[1] = ext::new_empty(w, w.shape());
  if (needs[2]) grads[2] = ext::new_empty(w, {w.size(0)});
  ext::dispatch_with_cuda_half(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        Tensor workspace = conv_workspace<T>(kernels::cpu::conv2d_workspace_elements(g));
        if (needs[1])
          kernels::cpu::conv2d_backward_filter<T>(x.raw<T>(), dz.raw<T>(), grads[1].raw<T>(), g, workspace.raw<T>());
        if (needs[0])
          kernels::cpu::conv2d_backward_data<T>(dz.raw<T>(), w.raw<T>(), grads[0].raw<T>(), g, workspace.raw<T>());
        if (needs[2]) kernels::cpu::channel_bias_grad<T>(dz.raw<T>(), grads[2].raw<T>(), g.n, g.k, g.oh() * g.ow());
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        if (needs[0]) kernels::cuda::conv2d_backward_data(dz.raw<T>(), w.raw<T>(), grads[0].raw<T>(), g, stream);
        if (needs[1]) kernels::cuda::conv2d_backward_filter(x.raw<T>(), dz.raw<T>(), grads[1].raw<T>(), g, stream);
        if (needs[2]) {  // summed in f32, rounded once
          Tensor db = is_half(w.dtype()) ? ext::new_empty(w, {w.size(0)}, DType::f32) : grads[2];
          kernels::cuda::channel_bias_grad(dz.raw<T>(), db.raw<float>(), g.n, g.k, g.oh() * g.ow(), stream);
          if (is_half(w.dtype())) grads[2] = db.to(w.dtype());
        }
      });
  return grads;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, int stride, int padding) {
  if (const ext::AutocastInputs cast{OpKey::conv2d, {&input, &weight, &bias}})
    return conv2d(cast[0], cast[1], cast[2], stride, padding);
  const ConvGeometry g = checked_geometry("conv2d", input, weight, bias, stride, padding);
  if (widens(input)) {
    const ext::AutocastOff off;  // the f32 computation, not lowered again
    return conv2d(ext::widened(input), ext::widened(weight), ext::widened(bias), stride, padding).to(input.dtype());
  }
  Tensor y = conv_forward(input, weight, bias, g, false);
  if (autograd::needs_recording({&input, &weight, &bias}))
    autograd::record(y, "conv2d", {&input, &weight, &bias},
                     [x = input.detach(), w = weight.detach(), g](const Tensor& dy, NeedsGrad needs) {
                       return conv_backward(x, w, g, dy, needs);
                     });
  return y;
}

Tensor fused::conv2d_relu(const Tensor& input, const Tensor& weight, const Tensor& bias, int stride, int padding) {
  if (const ext::AutocastInputs cast{OpKey::fused_conv2d_relu, {&input, &weight, &bias}})
    return conv2d_relu(cast[0], cast[1], cast[2], stride, padding);
  const ConvGeometry g = checked_geometry("conv2d_relu", input, weight, bias, stride, padding);
  if (widens(input)) {
    const ext::AutocastOff off;  // the f32 computation, not lowered again
    return conv2d_relu(ext::widened(input), ext::widened(weight), ext::widened(bias), stride, padding)
        .to(input.dtype());
  }
  Tensor y = conv_forward(input, weight, bias, g, true);
  if (autograd::needs_recording({&input, &weight, &bias}))
    autograd::record(
        y, "conv2d_relu", {&input, &weight, &bias},
        [x = input.detach(), w = weight.detach(), y_saved = y.detach(), g](const Tensor& dy, NeedsGrad needs) {
          // ReLU's rule first (from the saved output), then the convolution's.
          const Tensor dz = activation_backward(kernels::ActivationGrad::relu, dy, y_saved);
          return conv_backward(x, w, g, dz, needs);
        });
  return y;
}

namespace {

PoolGeometry checked_pool_geometry(const char* op, const Shape& input, int kernel, int stride) {
  if (stride <= 0) stride = kernel;
  EMBER_CHECK(kernel >= 1, ValueError, op, ": kernel must be positive");
  PoolGeometry g{at(input, 0),
                 at(input, 1),
                 at(input, 2),
                 at(input, 3),
                 static_cast<std::size_t>(kernel),
                 static_cast<std::size_t>(stride)};
  EMBER_CHECK(g.h >= g.kernel && g.w >= g.kernel, ShapeError, op, ": a ", kernel, "x", kernel,
              " window does not fit the ", g.h, "x", g.w, " input");
  return g;
}

Shape pooled_shape(const PoolGeometry& g) {
  return {static_cast<std::int64_t>(g.n), static_cast<std::int64_t>(g.c), static_cast<std::int64_t>(g.oh()),
          static_cast<std::int64_t>(g.ow())};
}

void pool_forward(const Tensor& input, const Tensor& y, const Tensor& argmax, const PoolGeometry& g) {
  ext::dispatch_with_cuda_half(
      input,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::max_pool2d_forward<T>(input.raw<T>(), y.raw<T>(), argmax.raw<std::int32_t>(), g);
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::max_pool2d_forward(input.raw<T>(), y.raw<T>(), argmax.raw<std::int32_t>(), g, stream);
      });
}

// Whether max pooling computes on widened copies (Note [half precision]): 16-bit data on the CPU.
// CUDA's pooling kernels take bf16 and f16 themselves, with the same bits.
bool pools_widened(const Tensor& t) { return is_half(t.dtype()) && !t.is_cuda(); }

// The pooling's input gradient [N, C, H, W]: each dy at its window's argmax.
Tensor pool_backward(const Tensor& dy, const Tensor& argmax, const PoolGeometry& g) {
  if (pools_widened(dy)) return pool_backward(ext::widened(dy), argmax, g).to(dy.dtype());
  Tensor dx = ext::new_empty(dy, {static_cast<std::int64_t>(g.n), static_cast<std::int64_t>(g.c),
                                  static_cast<std::int64_t>(g.h), static_cast<std::int64_t>(g.w)});
  ext::dispatch_with_cuda_half(
      dy,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::max_pool2d_backward<T>(dy.raw<T>(), argmax.raw<std::int32_t>(), dx.raw<T>(), g);
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::max_pool2d_backward(dy.raw<T>(), argmax.raw<std::int32_t>(), dx.raw<T>(), g, stream);
      });
  return dx;
}

}  // namespace

Tensor max_pool2d(const Tensor& input, int kernel, int stride) {
  const char* op = "max_pool2d";
  ext::check_defined(op, {"input", input});
  ext::check_floating(op, {"input", input});
  ext::check_dim(op, {"input", input}, 4);
  if (pools_widened(input)) return max_pool2d(ext::widened(input), kernel, stride).to(input.dtype());
  const PoolGeometry g = checked_pool_geometry(op, input.shape(), kernel, stride);
  Tensor y = ext::new_empty(input, pooled_shape(g));
  Tensor argmax = ext::new_empty(input, pooled_shape(g), DType::i32);
  pool_forward(input, y, argmax, g);
  if (autograd::needs_recording({&input}))
    autograd::record(y, op, {&input},
                     [argmax, g](const Tensor& dy, NeedsGrad) { return Gradients{pool_backward(dy, argmax, g)}; });
  return y;
}

Tensor fused::conv2d_relu_max_pool2d(const Tensor& input, const Tensor& weight, const Tensor& bias, int stride,
                                     int padding, int pool_kernel, int pool_stride) {
  if (const ext::AutocastInputs cast{OpKey::fused_conv2d_relu_max_pool2d, {&input, &weight, &bias}})
    return conv2d_relu_max_pool2d(cast[0], cast[1], cast[2], stride, padding, pool_kernel, pool_stride);
  const char* op = "conv2d_relu_max_pool2d";
  const ConvGeometry g = checked_geometry(op, input, weight, bias, stride, padding);
  if (widens(input)) {
    const ext::AutocastOff off;  // the f32 computation, not lowered again
    return conv2d_relu_max_pool2d(ext::widened(input), ext::widened(weight), ext::widened(bias), stride, padding,
                                  pool_kernel, pool_stride)
        .to(input.dtype());
  }
  const Shape conv_shape{static_cast<std::int64_t>(g.n), static_cast<std::int64_t>(g.k),
                         static_cast<std::int64_t>(g.oh()), static_cast<std::int64_t>(g.ow())};
  const PoolGeometry p = checked_pool_geometry(op, conv_shape, pool_kernel, pool_stride);
  Tensor pooled = ext::new_empty(input, pooled_shape(p));
  Tensor argmax = ext::new_empty(input, pooled_shape(p), DType::i32);
  if (pools_widened(input)) {  // the CPU's bf16 convolution's f32 output pooled (exact), then rounded once
    const Tensor pooled_wide = ext::new_empty(input, pooled_shape(p), DType::f32);
    pool_forward(ext::widened(conv_forward_unrounded(input, weight, bias, g, true)), pooled_wide, argmax, p);
    pooled = pooled_wide.to(input.dtype());
  } else {
    ext::dispatch(
        input,
        [&](auto zero) {
          using T = decltype(zero);
          Tensor workspace = conv_workspace<T>(kernels::cpu::conv2d_relu_max_pool2d_workspace_elements(g, p));
          kernels::cpu::conv2d_relu_max_pool2d_forward<T>(input.raw<T>(), weight.raw<T>(),
                                                          bias.defined() ? bias.raw<T>() : nullptr, pooled.raw<T>(),
                                                          argmax.raw<std::int32_t>(), g, p, workspace.raw<T>());
        },
        [&](auto) { pool_forward(conv_forward(input, weight, bias, g, true), pooled, argmax, p); });
  }
  if (autograd::needs_recording({&input, &weight, &bias}))
    autograd::record(pooled, op, {&input, &weight, &bias},
                     [x = input.detach(), w = weight.detach(), pooled_saved = pooled.detach(), argmax, g, p](
                         const Tensor& dy, NeedsGrad needs) {
                       // ReLU's rule at the window maxima (where its output is the pooled value; every
                       // other position gets no gradient from the pooling), then the pooling's, then
                       // the convolution's.
                       const Tensor masked = activation_backward(kernels::ActivationGrad::relu, dy, pooled_saved);
                       return conv_backward(x, w, g, pool_backward(masked, argmax, p), needs);
                     });
  return pooled;
}

}  // namespace ember
