// cpuid's answers, read once (Note [CPU dispatch] in kernels/cpu_features.h).
#include "kernels/cpu_features.h"

namespace ember::kernels::cpu {

// __builtin_cpu_init first: libgcc's constructor fills the CPU model too, but a check made during
// another library's static initialization could run before it.
bool cpu_has_avx512bw() {
  static const bool has =
      (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"));
  return has;
}

bool cpu_has_avx512dq() {
  static const bool has =
      (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"));
  return has;
}

bool cpu_has_avx512_bf16() {
  static const bool has =
      (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"));
  return has;
}

}  // namespace ember::kernels::cpu
