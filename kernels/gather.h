// A batch drawn from a dataset held in device memory: for r < rows, image row index[r] of the
// u8 images [N, cols] normalized to f32, x[r] = (images[index[r]]/255 − mean)/std — with the same
// two constants as normalize_u8, so a preloaded batch equals a streamed one bit for bit — and its
// label y[r] = labels[index[r]]. One pass (one launch on CUDA) for both. Indices are trusted: the
// caller draws them from a permutation of [0, N).
#pragma once

#include "kernels/common.h"

namespace ember::kernels::cpu {
void gather_batch(const std::uint8_t* images, const std::int32_t* labels, const std::int32_t* index, float* x,
                  std::int32_t* y, std::size_t rows, std::size_t cols, float mean, float std);
}

namespace ember::kernels::cuda {
void gather_batch(const std::uint8_t* images, const std::int32_t* labels, const std::int32_t* index, float* x,
                  std::int32_t* y, std::size_t rows, std::size_t cols, float mean, float std, cudaStream_t stream);
}
