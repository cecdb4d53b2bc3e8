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

// Backward data at stride 1 as a forward convolution (see conv2d_backward_data_bf16): dy's
// channels in, x's out, the filter flipped, padded by kernel − 1 − pad so the output is x's size.
bool data_gradient_as_convolution(const ConvGeometry& g) { return g.stride == 1 && g.kh == g.kw && g.pad < g.kh; }
ConvGeometry data_gradient_geometry(const ConvGeometry& g) {
  return {.n = 1,
          .c = g.k,
          .h = g.oh(),
          .w = g.ow(),
          .k = g.c,
          .kh = g.kh,
          .kw = g.kw,
          .stride = 1,
          .pad = g.kh - 1 - g.pad};
}

}  // namespace

std::size_t conv2d_bf16_workspace_bytes(const ConvGeometry& g) {
  const std::size_t patch = g.c * g.kh * g.kw, out = g.oh() * g.ow();
  // Forward: one image's columns in bf16. Backward data: the flipped filter and one image's
  // columns of dy (bf16), or else the filter transposed (bf16) and one image's column gradients
  // (f32). Backward filter: one image's columns and dwᵀ (f32).
  const std::size_t data = data_gradient_as_convolution(g)
                               ? (patch * g.k + g.k * g.kh * g.kw * g.h * g.w) * sizeof(bfloat16)
                               : f32_offset(patch * g.k) + patch * out * sizeof(float);
  return std::max(data, f32_offset(patch * out) + patch * g.k * sizeof(float));
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
  if (data_gradient_as_convolution(g)) {
    // At stride 1, dx[c][i][j] = Σ dy[k][i − ky + pad][j − kx + pad]·w[k][c][ky][kx]: a forward
    // convolution of dy (K channels, padded by kernel − 1 − pad) with the filter flipped and its
    // channels swapped, w'[c][k][ky'][kx'] = w[k][c][kh−1−ky'][kw−1−kx']. One deep GEMM per image
    // (K·kh·kw terms a sum) writing dx directly, instead of a shallow one (K terms) into f32
    // column gradients and col2im's pass over them: 4× faster on the CNN's conv2.
    const ConvGeometry back = data_gradient_geometry(g);
    const std::size_t back_patch = g.k * g.kh * g.kw, taps = g.kh * g.kw;
    auto* flipped = static_cast<bfloat16*>(workspace);
    auto* columns = flipped + g.c * back_patch;
    for (std::size_t c = 0; c < g.c; ++c)
      for (std::size_t k = 0; k < g.k; ++k)
        for (std::size_t t = 0; t < taps; ++t)
          flipped[(c * g.k + k) * taps + t] = w[(k * g.c + c) * taps + taps - 1 - t];
    for (std::size_t i = 0; i < g.n; ++i) {
      im2col(dy + i * g.k * out, columns, back);
      gemm_bf16(Transpose::no, g.c, g.h * g.w, back_patch, flipped, back_patch, columns, g.h * g.w, dx + i * image,
                g.h * g.w, false);
    }
    return;
  }
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
