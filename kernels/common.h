// Shared vocabulary of the kernels: sizes, how a backward kernel writes its output, the record a
// kernel fills in when it meets bad input, and the CUDA stream type (forward-declared, so that
// plain C++ can include every kernels/ header without the CUDA toolkit).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/host_device.h"  // EMBER_HOST_DEVICE

typedef struct CUstream_st* cudaStream_t;  // identical to the CUDA runtime's own typedef

namespace ember::kernels {

constexpr std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// Whether a kernel replaces the contents of its output or adds to them. Backward kernels take
// one, so that accumulating gradients needs no extra pass.
enum class WriteMode : std::uint8_t { overwrite, accumulate };

// What a kernel found wrong with its input. Kernels cannot throw (CUDA ones cannot even stop the
// host), so they fill in a DeviceErrorRecord and the caller turns it into an exception.
enum class DeviceErrorCode : int { none = 0, target_out_of_range = 1, non_finite = 2, index_out_of_range = 3 };

// Ops that can raise a device-side error, so that the message can name them.
enum class OpTag : int { none = 0, cross_entropy = 1, loss_check = 2, embedding = 3 };

// Note [which bad input is reported]
// A launch may meet many bad targets at once; which one its error names must not depend on which
// thread got there first. So the first kind of error wins (a compare-and-swap on `code`), and
// within it the lowest position: the position and the value are packed into one 64-bit key that
// orders as the position does, and the smallest key stays — one atomicMin on the GPU, a comparison
// on the CPU, where the rows are visited in order anyway. Position and value always come from the
// same element. The value keeps 24 bits: exact within ±8,388,606, clamped beyond (the message
// then says "at least" or "at most"). A record collects until the host reads and clears it, which
// it does at every synchronization it makes.
constexpr unsigned long long kNoErrorKey = ~0ULL;
constexpr int kErrorValueBits = 24;
constexpr long long kErrorValueBias = 1LL << (kErrorValueBits - 1);
constexpr long long kMaxErrorPosition = (1LL << (64 - kErrorValueBits)) - 2;

EMBER_HOST_DEVICE unsigned long long error_key(long long position, long long value) {
  const long long p = position < 0 ? 0 : (position > kMaxErrorPosition ? kMaxErrorPosition : position);
  const long long top = (1LL << kErrorValueBits) - 1;
  long long v = value + kErrorValueBias;  // value < -bias clamps to 0, value ≥ bias - 1 to top
  if (value < -kErrorValueBias) v = 0;
  if (value >= kErrorValueBias - 1) v = top;
  return (static_cast<unsigned long long>(p) << kErrorValueBits) | static_cast<unsigned long long>(v);
}

struct DeviceErrorRecord {
  int code = 0;                          // a DeviceErrorCode; the first one raised wins
  int op = 0;                            // which op raised it (an OpTag)
  unsigned long long key = kNoErrorKey;  // error_key(position, value) of the lowest position
  long long bound = 0;                   // the limit it broke, e.g. the number of classes

  long long position() const { return static_cast<long long>(key >> kErrorValueBits); }  // row, element
  long long value() const {  // the offending value, e.g. the target (clamped: see value_clamped)
    return static_cast<long long>(key & ((1ULL << kErrorValueBits) - 1)) - kErrorValueBias;
  }
  int value_clamped() const {  // -1: the value was at most value(); 1: at least value(); 0: exact
    const unsigned long long v = key & ((1ULL << kErrorValueBits) - 1);
    return v == 0 ? -1 : (v == (1ULL << kErrorValueBits) - 1 ? 1 : 0);
  }
};

// The CPU side of raising an error (CUDA kernels have their own, with atomics:
// kernels/cuda/device_error.cuh). Note [which bad input is reported].
inline void raise_error_on_host(DeviceErrorRecord* record, DeviceErrorCode code, OpTag op, long long position,
                                long long value, long long bound) {
  if (!record || (record->code != 0 && record->code != static_cast<int>(code))) return;
  record->code = static_cast<int>(code);
  record->op = static_cast<int>(op);
  record->bound = bound;
  const unsigned long long key = error_key(position, value);
  if (key < record->key) record->key = key;
}

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
// How many kernels and library calls (cuBLAS, cuBLASLt, cuDNN: one each) this thread has issued:
// what a piece of work should add to a CUDA graph that captures it, one kernel node per launch
// and per library call as far as ember can see (a library may launch more than one kernel).
std::uint64_t launches_issued();
void count_library_call();
}  // namespace ember::kernels::cuda
