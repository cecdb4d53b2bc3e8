// The CPU's bf16 convolution (Note [bf16 convolution] in kernels/conv.h): im2col in bf16, the bf16
// GEMM (kernels/gemm_bf16.h) with its f32 sums, and the results in f32 for the caller to round
// once. Image by image, as the f32 path, with the same workspace kept by the caller.
#include <algorithm>

#include "kernels/conv.h"
#include "kernels/gemm_bf16.h"
#include "kernels/layout.h"

namespace ember::kernels::cpu {

namespace {
// Where the f32 part of the workspace starts, after `bf16_elements` bf16 values: rounded up to a
// cache line, so that its floats are aligned.
std::size_t f32_offset(std::size_t bf16_elements) { return (bf16_elements * sizeof(bfloat16) + 63) / 64 * 64; }
}  // namespace

std::size_t conv2d_bf16_workspace_bytes(const ConvGeometry& g) {
  const std::size_t patch = g.c * g.kh * g.kw, out = g.oh() * g.ow();
  // Forward: one image's columns in bf16. Backward data: the filter transposed (bf16) and one
  // image's column gradients (f32). Backward filter: one image's columns and dwᵀ (f32).
  return std::max(f32_offset(patch * g.k) + patch * out * sizeof(float),
                  f32_offset(patch * out) + patch * g.k * sizeof(float));
}

void conv2d_forward_bf16(const bfloat16* x, const bfloat16* w, const float* bias, float* y, const ConvGeometry& g,
                         void* workspace) {
  const std::size_t patch = g.c * g.kh * g.kw, out = g.oh() * g.ow();
  auto* columns = static_cast<bfloat16*>(workspace);
  for (std::size_t i = 0; i < g.n; ++i) {
    float* yi = y + i * g.k * out;
    // The output starts as the bias and the GEMM adds to it, as the f32 path.
    if (bias)
      for (std::size_t k = 0; k < g.k; ++k) std::fill(yi + k * out, yi + (k + 1) * out, bias[k]);
    im2col(x + i * g.c * g.h * g.w, columns, g);
    gemm_bf16(Transpose::no, g.k, out, patch, w, patch, columns, out, yi, out, bias != nullptr);
  }
}

void conv2d_backward_data_bf16(const bfloat16* dy, const bfloat16* w, float* dx, const ConvGeometry& g,
                               void* workspace) {
  const std::size_t patch = g.c * g.kh * g.kw, out = g.oh() * g.ow(), image = g.c * g.h * g.w;
  // The bf16 GEMM reads A as stored: wᵀ [patch, K] once, then per image dcolumns = wᵀ·dy, in f32,
  // added back into the image (col2im sums the overlapping taps in f32).
  auto* w_t = static_cast<bfloat16*>(workspace);
  auto* dcolumns = reinterpret_cast<float*>(static_cast<char*>(workspace) + f32_offset(patch * g.k));
  transpose_last2(w, w_t, 1, g.k, patch);
  std::fill(dx, dx + g.n * image, 0.0f);
  for (std::size_t i = 0; i < g.n; ++i) {
    gemm_bf16(Transpose::no, patch, out, g.k, w_t, g.k, dy + i * g.k * out, out, dcolumns, out, false);
    col2im(dcolumns, dx + i * image, g);
  }
}

void conv2d_backward_filter_bf16(const bfloat16* x, const bfloat16* dy, float* dw, const ConvGeometry& g,
                                 void* workspace) {
  const std::size_t patch = g.c * g.kh * g.kw, out = g.oh() * g.ow();
  auto* columns = static_cast<bfloat16*>(workspace);
  auto* dw_t = reinterpret_cast<float*>(static_cast<char*>(workspace) + f32_offset(patch * out));
  // dwᵀ [patch, K] = Σ columns·dyᵀ: the columns are A as stored and dy is the small operand the
  // GEMM packs (K rows), where dw = dy·columnsᵀ would pack every image's columns transposed.
  // Images in order, each GEMM adding to dwᵀ (f32): deterministic, as the f32 path.
  for (std::size_t i = 0; i < g.n; ++i) {
    im2col(x + i * g.c * g.h * g.w, columns, g);
    gemm_bf16(Transpose::yes, patch, g.k, out, columns, out, dy + i * g.k * out, out, dw_t, g.k, i > 0);
  }
  if (g.n == 0) std::fill(dw_t, dw_t + patch * g.k, 0.0f);
  transpose_last2(dw_t, dw, 1, patch, g.k);
}

}  // namespace ember::kernels::cpu
