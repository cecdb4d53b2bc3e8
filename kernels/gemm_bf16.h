// The CPU's bf16 matrix multiply: C = A·op(B) (or C += A·op(B)) with A [m, k] and op(B) [k, n] in
// bfloat16, row-major (row strides lda, ldb as stored: B stored [n, k] with Transpose::yes, as a
// Linear layer's weight), and C [m, n] in f32 (row stride ldc), accumulated in f32.
//
// Note [bf16 GEMM paths]
// Two paths, chosen at run time, never by compiling for the build machine:
//   - avx512_bf16: VDPBF16PS, where cpuid says the CPU has AVX512-BF16 (Intel from Cooper Lake,
//     AMD from Zen 4). B's pairs of rows are interleaved into the instruction's layout — packed
//     into memory first, or (B as stored, at most 64 rows of C) in registers as it is read — each
//     8×32 block of C is held in registers, and each step adds a[i][2p+1]·b[2p+1][j] and then
//     a[i][2p]·b[2p][j] to the f32 sum, as the instruction defines it.
//   - scalar: the same sums in the same order in plain C++, for any CPU. A product of two bf16
//     values is exact in f32, so each step rounds once in both paths and they agree bit for bit —
//     except that VDPBF16PS treats subnormal inputs as zero and flushes subnormal results (its
//     DAZ/FTZ semantics, whatever MXCSR says), where the scalar path keeps them
//     (tests/kernels/test_gemm_bf16.cpp shows both).
#pragma once

#include <string_view>
#include <vector>

#include "base/half.h"
#include "kernels/common.h"
#include "kernels/gemm.h"

namespace ember::kernels::cpu {

enum class Bf16GemmPath : std::uint8_t { scalar, avx512_bf16 };
std::string_view bf16_gemm_path_name(Bf16GemmPath path);
// The paths this CPU can run (scalar always), and the best of them.
std::vector<Bf16GemmPath> bf16_gemm_paths();
Bf16GemmPath best_bf16_gemm_path();

void gemm_bf16(Transpose tb, std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, std::size_t lda,
               const bfloat16* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate,
               Bf16GemmPath path = best_bf16_gemm_path());

// gemm_bf16 for a product small enough to sit in cache (the fused attention's tiles, Note [bf16
// attention]), whole on the calling thread, no parallel split; and op(A) may be transposed too (A
// stored [k, m], its pairs of rows interleaved into the instruction's layout first). Each element
// is the same sum in the same order as gemm_bf16's: the same bits.
void gemm_bf16_small(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, const bfloat16* a,
                     std::size_t lda, const bfloat16* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate,
                     Bf16GemmPath path = best_bf16_gemm_path());

// C (bf16, row stride ldc) = A·op(B), each element the f32 sum above rounded once: the bits of
// gemm_bf16 into f32 followed by a cast to bf16, without writing and reading back the f32 matrix
// (the path's rounding is the cast's formula, Note [half conversions]).
void gemm_bf16_rounded(Transpose tb, std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, std::size_t lda,
                       const bfloat16* b, std::size_t ldb, bfloat16* c, std::size_t ldc,
                       Bf16GemmPath path = best_bf16_gemm_path());

}  // namespace ember::kernels::cpu
