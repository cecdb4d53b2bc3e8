// Where a tensor's memory lives: the host (cpu) or one CUDA device (cuda:N).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace ember {

enum class DeviceType : std::uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::cpu ? 0 : i) {}

  static constexpr Device cpu() { return Device(DeviceType::cpu); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::cuda, index); }

  // Parses "cpu", "cuda" (device 0) and "cuda:N"; throws ValueError naming the text otherwise.
  static Device parse(std::string_view text);

  // The device to compute on: EMBER_DEVICE when set (parsed as above, and it must be usable),
  // else cuda:0 when a usable CUDA device exists, else the CPU.
  static Device best();

  // Why best() chose what it chose, e.g. "cpu (no CUDA device: CUDA driver not found)".
  static std::string best_reason();

  constexpr bool is_cpu() const { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;  // "cpu", "cuda:0"

  friend constexpr bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
};

std::ostream& operator<<(std::ostream& out, const Device& device);

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
