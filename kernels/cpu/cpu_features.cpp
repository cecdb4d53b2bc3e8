// cpuid's answers, read once (Note [CPU dispatch] in kernels/cpu_features.h).
#include "kernels/cpu_features.h"

#include "base/env.h"

namespace ember::kernels::cpu {
namespace {
// AVX512F, unless EMBER_NO_AVX512 asks for the plain loops. __builtin_cpu_init first: libgcc's
// constructor fills the CPU model too, but a check made during another library's static
// initialization could run before it.
bool avx512_allowed() {
  static const bool allowed =
      (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") && !env_flag("EMBER_NO_AVX512", false));
  return allowed;
}
}  // namespace

bool cpu_has_avx512f() { return avx512_allowed(); }

bool cpu_has_avx512bw() {
  static const bool has = avx512_allowed() && __builtin_cpu_supports("avx512bw");
  return has;
}

bool cpu_has_avx512dq() {
  static const bool has = avx512_allowed() && __builtin_cpu_supports("avx512dq");
  return has;
}

bool cpu_has_avx512_bf16() {
  static const bool has = avx512_allowed() && __builtin_cpu_supports("avx512bf16");
  return has;
}

}  // namespace ember::kernels::cpu
