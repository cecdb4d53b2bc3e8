// Devices at run time: whether one is usable now, and the CPU's compute threads (the value types
// Device and MemoryKind are in base/device.h).
#pragma once

#include <string>

#include "base/device.h"

namespace ember {

// Throws DeviceError unless `device` can hold tensors now: the CPU always can; cuda:N needs a
// usable CUDA runtime and driver and N < device_count(). The message says what was found and
// suggests Device::best() or --device cpu.
void require_usable(const Device& device);

// The number of threads CPU compute uses, the caller's included, like torch.set_num_threads:
// ember's pool runs its kernels and the blocks of large GEMMs (Note [CPU threads] in
// kernels/parallel.h). 1 unless EMBER_NUM_THREADS says otherwise; values below 1 are ignored.
void set_num_threads(int threads);
int num_threads();
// The library behind CPU matrix products in this build: "openblas" or "builtin".
const char* cpu_gemm_library();
// The kernels behind CPU products: on a CPU with AVX512F "ember avx512 for f32, openblas Cooperlake
// for f64" (Note [f32 GEMM on AVX-512]); elsewhere OpenBLAS's kernel table, e.g. "Haswell (set by
// OPENBLAS_CORETYPE; ...)" with the faster choice where the environment forced a slower one, or
// "builtin" without OpenBLAS (Note [OpenBLAS core]).
std::string cpu_gemm_kernels();
// Seconds the calling thread has spent in CPU matrix products (every Linear's and convolution's
// GEMMs) since it started. The difference across a span of training steps, over the span's
// wall time, is the steps' GEMM share: the rest is the framework and the elementwise work.
double cpu_gemm_seconds();

}  // namespace ember
