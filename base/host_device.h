// EMBER_HOST_DEVICE: a function compiled for the host and, under a CUDA compiler, for the device
// too — the per-element formulas both backends share (Note [one formula per op] in
// kernels/elementwise_math.h) and the half-precision conversions (base/half.h).
#pragma once

#if defined(__CUDACC__)
#define EMBER_HOST_DEVICE __host__ __device__ inline
#else
#define EMBER_HOST_DEVICE inline
#endif
