// The tolerances of the CUDA kernels against their CPU twins (tests/cuda/test_cuda_kernels.cpp,
// tests/cuda/test_cuda_elementwise_kernels.cpp).
//
// Plain arithmetic (add, mul, affine, relu, casts): nvcc contracts a*b+c into one
// fused multiply-add and GCC does not, so results may differ in the last bit: rtol 1e-6 (about
// 8 ulp of float) with atol 1e-7 for values near zero. Transcendentals (exp, log, tanh, sigmoid,
// pow, sqrt): CUDA's expf/logf/tanhf/powf are accurate to 1–4 ulp (CUDA C++ Programming Guide,
// "Mathematical Functions") and glibc's to about 1, so they may differ by up to ~5 ulp: rtol 2e-6
// (about 16 ulp). Sums and GEMMs: a length-K reduction in float may differ from the CPU's
// double-accumulated result by K·ε·Σ|terms|, so each element gets that bound.
#pragma once

#include <limits>

namespace ember::testing {

inline constexpr double kArithRtol = 1e-6, kArithAtol = 1e-7;
inline constexpr double kTranscRtol = 2e-6, kTranscAtol = 1e-7;
inline constexpr float kEps = std::numeric_limits<float>::epsilon();

}  // namespace ember::testing
