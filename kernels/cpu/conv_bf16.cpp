// The CPU's bf16 convolution (Note [bf16 convolution] in kernels/conv.h): im2col in bf16, the bf16
// GEMM (kernels/gemm_bf16.h) with its f32 sums, and the results in f32 for the caller to round
// once. Image by image, as the f32 path, with the same workspace kept by the caller.
#include <algorithm>

#include "kernels/conv.h"
#include "kernels/gemm_bf16.h"
#include "kernels/layout.h"
#include "kernels/parallel.h"

namespace ember::kernels::cpu {

namespace {
std::size_t patch_size(const ConvGeometry& g) { return g.c * g.kh * g.kw; }
// Backward filter's groups of images, each summed into a partial dwᵀ of its own, then added in
// group order: a function of the batch, never of the threads (Note [CPU threads]).
constexpr std::size_t kFilterGroups = 8;
std::size_t filter_groups(const ConvGeometry& g) { return std::min(kFilterGroups, std::max<std::size_t>(1, g.n)); }
// Where the f32 part of the workspace starts, after `bf16_elements` bf16 values: rounded up to a
// cache line, so that its floats are aligned.
std::size_t f32_offset(std::size_t bf16_elements) { return (bf16_elements * sizeof(bfloat16) + 63) / 64 * 64; }
}  // namespace

// Images are the parallel parts, each thread's columns in its own scratch (Note [CPU threads]);
// the workspace holds what the threads share: wᵀ (backward data), the partial dwᵀ (backward filter).
std::size_t conv2d_bf16_workspace_bytes(const ConvGeometry& g) {
  return std::max(f32_offset(patch_size(g) * g.k), filter_groups(g) * patch_size(g) * g.k * sizeof(float));
}

void conv2d_forward_bf16(const bfloat16* x, const bfloat16* w, const float* bias, float* y, const ConvGeometry& g,
                         void*) {
  const std::size_t patch = patch_size(g), out = g.oh() * g.ow();
  parallel_parts(g.n, [&](std::size_t first, std::size_t last) {
    auto* columns = thread_scratch<bfloat16>(0, patch * out);
    for (std::size_t i = first; i < last; ++i) {
      float* yi = y + i * g.k * out;
      // The output starts as the bias and the GEMM adds to it, as the f32 path.
      if (bias)
        for (std::size_t k = 0; k < g.k; ++k) std::fill(yi + k * out, yi + (k + 1) * out, bias[k]);
      im2col(x + i * g.c * g.h * g.w, columns, g);
      gemm_bf16(Transpose::no, g.k, out, patch, w, patch, columns, out, yi, out, bias != nullptr);
    }
  });
}

void conv2d_backward_data_bf16(const bfloat16* dy, const bfloat16* w, float* dx, const ConvGeometry& g,
                               void* workspace) {
  const std::size_t patch = patch_size(g), out = g.oh() * g.ow(), image = g.c * g.h * g.w;
  // The bf16 GEMM reads A as stored: wᵀ [patch, K] once, then per image dcolumns = wᵀ·dy, in f32,
  // added back into the image (col2im sums the overlapping taps in f32).
  auto* w_t = static_cast<bfloat16*>(workspace);
  transpose_last2(w, w_t, 1, g.k, patch);
  parallel_parts(g.n, [&](std::size_t first, std::size_t last) {
    float* dcolumns = thread_scratch<float>(0, patch * out);
    std::fill(dx + first * image, dx + last * image, 0.0f);
    for (std::size_t i = first; i < last; ++i) {
      gemm_bf16(Transpose::no, patch, out, g.k, w_t, g.k, dy + i * g.k * out, out, dcolumns, out, false);
      col2im(dcolumns, dx + i * image, g);
    }
  });
}

void conv2d_backward_filter_bf16(const bfloat16* x, const bfloat16* dy, float* dw, const ConvGeometry& g,
                                 void* workspace) {
  const std::size_t patch = patch_size(g), out = g.oh() * g.ow(), groups = filter_groups(g), filters = patch * g.k;
  auto* partials = static_cast<float*>(workspace);
  // dwᵀ [patch, K] = Σ columns·dyᵀ: the columns are A as stored and dy is the small operand the
  // GEMM packs (K rows), where dw = dy·columnsᵀ would pack every image's columns transposed.
  // Each group adds its images in order into its partial (f32); the partials are added in order.
  parallel_parts(groups, [&](std::size_t first_group, std::size_t last_group) {
    auto* columns = thread_scratch<bfloat16>(0, patch * out);
    for (std::size_t group = first_group; group < last_group; ++group) {
      float* partial = partials + group * filters;
      const std::size_t first = group * g.n / groups, last = (group + 1) * g.n / groups;
      if (first == last) std::fill(partial, partial + filters, 0.0f);
      for (std::size_t i = first; i < last; ++i) {
        im2col(x + i * g.c * g.h * g.w, columns, g);
        gemm_bf16(Transpose::yes, patch, g.k, out, columns, out, dy + i * g.k * out, out, partial, g.k, i > first);
      }
    }
  });
  for (std::size_t group = 1; group < groups; ++group)
    for (std::size_t i = 0; i < filters; ++i) partials[i] += partials[group * filters + i];
  transpose_last2(partials, dw, 1, patch, g.k);
}

}  // namespace ember::kernels::cpu
