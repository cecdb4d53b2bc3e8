// The BLAS library behind CPU GEMMs: its threads held at one, and which of its kernel tables runs.
//
// Note [OpenBLAS core]
// ~~~~~~~~~~~~~~~~~~~~
// A DYNAMIC_ARCH OpenBLAS picks its kernel table at load time from the CPU, unless
// OPENBLAS_CORETYPE names one. ember keeps that choice (an environment variable is the user's or
// the site's word) but says what it is: a table without AVX-512 on a CPU with it (e.g. Haswell
// forced on an AVX-512 machine) ran the MLP's f32 GEMMs 1.75× slower here
// (docs/results/cpu-threads.md), so blas_core() names the faster choice beside it. On such a CPU
// OpenBLAS now runs f64 products only: f32 ones run in ember's kernel (Note [f32 GEMM on AVX-512]).
#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include "base/config.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"

#if EMBER_WITH_OPENBLAS
#include <cblas.h>
#endif

namespace ember::kernels::cpu {

#if EMBER_WITH_OPENBLAS
namespace {
bool has_avx512_kernels(std::string_view core) {
  constexpr std::array<std::string_view, 3> with_avx512{"SkylakeX", "Cooperlake", "SapphireRapids"};
  for (std::string_view name : with_avx512)
    if (core == name) return true;
  return false;
}

// The AVX-512 subset OpenBLAS's SkylakeX kernels need.
bool cpu_runs_skylakex_kernels() {
  return cpu_has_avx512bw() && cpu_has_avx512dq() && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512vl");
}

std::string describe_core() {
  const std::string core = openblas_get_corename();
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) return core;
  if (has_avx512_kernels(core) || !cpu_runs_skylakex_kernels()) return core + " (set by OPENBLAS_CORETYPE)";
  return core + " (set by OPENBLAS_CORETYPE; this CPU has AVX-512: unset it, or set SkylakeX, for faster GEMMs)";
}
}  // namespace

void hold_library_threads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}
const char* blas_name() { return "openblas"; }
std::string blas_core() {
  static const std::string described = describe_core();
  return described;
}
#else
void hold_library_threads() {}
const char* blas_name() { return "builtin"; }
std::string blas_core() { return "builtin"; }
#endif

}  // namespace ember::kernels::cpu
