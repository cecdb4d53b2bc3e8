// What the CPU ember runs on can execute, asked of cpuid once at run time (Note [CPU dispatch]).
//
// Note [CPU dispatch]
// ember is compiled for the baseline x86-64 (never with -march=native: the build machine is not
// the user's). A kernel with a faster form for a newer instruction set compiles that form into a
// function of its own with GCC's target attribute and calls it only where these checks say the
// CPU has the instructions; elsewhere the plain loop runs. Both give the same bits where the
// kernel says so (integer work, copies, f32 arithmetic in the same order). Not GCC's
// target_clones: its load-time resolvers run before ThreadSanitizer's runtime is up, and every
// program crashed at start under it. EMBER_NO_AVX512=1 makes every check below say no, so that the
// plain loops run (and are tested: `kernels_no_avx512`, `ops_cpu_no_avx512`) on any CPU.
#pragma once

namespace ember::kernels::cpu {

bool cpu_has_avx512f();      // AVX512F: 16 f32 lanes, FMA, masks
bool cpu_has_avx512bw();     // AVX512F and AVX512BW: 16-bit lanes, masked loads and stores
bool cpu_has_avx512dq();     // AVX512F and AVX512DQ: 64-bit multiplies and conversions
bool cpu_has_avx512_bf16();  // AVX512F and AVX512-BF16: VDPBF16PS

}  // namespace ember::kernels::cpu
