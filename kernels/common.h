// Shared vocabulary of the kernels: sizes, how a backward kernel writes its output, the record a
// kernel fills in when it meets bad input, and the CUDA stream type (forward-declared, so that
// plain C++ can include every kernels/ header without the CUDA toolkit).
#pragma once

#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;  // identical to the CUDA runtime's own typedef

// A function compiled for the host and, under nvcc, for the device too: the per-element formulas
// both backends share (Note [one formula per op] in kernels/elementwise_math.h).
#if defined(__CUDACC__)
#define EMBER_HOST_DEVICE __host__ __device__ inline
#else
#define EMBER_HOST_DEVICE inline
#endif

namespace ember::kernels {

constexpr std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// Whether a kernel replaces the contents of its output or adds to them. Backward kernels take
// one, so that accumulating gradients needs no extra pass.
enum class WriteMode : std::uint8_t { overwrite, accumulate };

// What a kernel found wrong with its input. Kernels cannot throw (CUDA ones cannot even stop the
// host), so they fill in a DeviceErrorRecord and the caller turns it into an exception.
enum class DeviceErrorCode : int { none = 0, target_out_of_range = 1, non_finite = 2 };

// The first error wins; later ones leave the record as it is. Written with an atomic
// compare-and-swap on `code` on the GPU, plainly on the CPU.
struct DeviceErrorRecord {
  int code = 0;            // a DeviceErrorCode
  int op = 0;              // which op raised it (an OpTag)
  long long value = 0;     // the offending value, e.g. the target
  long long position = 0;  // where: row of the target, element index
  long long bound = 0;     // the limit it broke, e.g. the number of classes
};

// Ops that can raise a device-side error, so that the message can name them.
enum class OpTag : int { none = 0, cross_entropy = 1, loss_check = 2 };

}  // namespace ember::kernels

namespace ember::kernels::cuda {
// Checks the launch that just happened (cudaGetLastError), naming `kernel` in the error. In sync
// debug mode it also synchronizes `stream`, so a failure inside the kernel is reported here, at
// its cause, rather than at some later call.
void check_launch(const char* kernel, cudaStream_t stream);
// Sync debug mode: off until core sets it (from EMBER_SYNC_DEBUG, Note [environment flags]).
void set_sync_debug(bool on);
bool sync_debug();
// Launches a kernel that does nothing: what a launch costs, for benchmarks.
void launch_empty(cudaStream_t stream);
}  // namespace ember::kernels::cuda
