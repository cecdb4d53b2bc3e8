// The convolutions of the cuDNN model (cudnn.cpp, cudnn_convolutions.cpp): their geometry and
// their sums, by reference loops.
#pragma once
#include <cudnn.h>

#include <cstddef>
#include <vector>

namespace ember_sim::cudnn_model {

// The geometry of one convolution, from its descriptors, with its data type and how its algorithms
// compute.
struct Geometry {
  int n, c, h, w, k, kh, kw, oh, ow, pad_h, pad_w, stride_h, stride_w;
  bool flip;  // CUDNN_CONVOLUTION (the kernel flipped) rather than cross-correlation
  cudnnDataType_t type;
  cudnnMathType_t math;  // what the algorithms report: CUDNN_TENSOR_OP_MATH or CUDNN_FMA_MATH
  bool tf32;             // f32 inputs read rounded to TF32
  std::size_t element() const { return type == CUDNN_DATA_FLOAT ? sizeof(float) : 2; }
  std::size_t x_bytes() const { return std::size_t(n) * c * h * w * element(); }
  std::size_t w_bytes() const { return std::size_t(k) * c * kh * kw * element(); }
  std::size_t y_bytes() const { return std::size_t(n) * k * oh * ow * element(); }
  std::size_t x_count() const { return std::size_t(n) * c * h * w; }
  std::size_t w_count() const { return std::size_t(k) * c * kh * kw; }
  std::size_t y_count() const { return std::size_t(n) * k * oh * ow; }
  // The im2col buffer a GEMM-based algorithm works in: one image's columns, in f32.
  std::size_t columns_bytes() const { return std::size_t(c) * kh * kw * oh * ow * sizeof(float); }
};

// The three convolutions' sums, in f32, from their inputs widened to f32: each sum adds its
// products in one fixed order, the order of the loops "for each image (in `images`' order), filter,
// output row, output column, channel, kernel row, kernel column" — a forward output over (channel,
// kernel row, kernel column), an input gradient over (image, filter, output row, output column), a
// weight gradient over (image, output row, output column).
std::vector<float> forward_sums(const Geometry& g, const std::vector<float>& x, const std::vector<float>& w);
std::vector<float> input_gradient_sums(const Geometry& g, const std::vector<int>& images, const std::vector<float>& w,
                                       const std::vector<float>& dy);
std::vector<float> weight_gradient_sums(const Geometry& g, const std::vector<int>& images, const std::vector<float>& x,
                                        const std::vector<float>& dy);

}  // namespace ember_sim::cudnn_model
