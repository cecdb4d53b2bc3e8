// GEMMs with a fused epilogue, through cuBLASLt (CUDA only, f32 compute). Row-major, like
// gemm.h: C[m, n] = op(A)·op(B) with β = 0 (C is overwritten, never read), and then
//   bias:          C += bias                      (bias [n], one value per column)
//   relu_aux_bias: C = max(0, C + bias), and the ReLU mask written as bits into `aux`
//   drelu_bgrad:   C = C ⊙ mask(aux), and vec[n] = Σ over the rows of that masked C
//   bgrad_a:       vec[m] = Σ_k op(A)[i, k]       (the bias gradient when op(A) = dYᵀ)
// `vec` is the bias (read) or the bias gradient (written). The mask of a [m, n] result has a
// leading dimension of relu_mask_ld(n) bits (cuBLASLt wants a multiple of 128), m of them;
// drelu_bgrad reads the mask that relu_aux_bias wrote for a result of the same shape.
//
// Types: A and B in f32, bf16 or f16 (`ab`), C in f32 or — for 16-bit operands — their type
// (`out`); the bias and the bias gradient are in C's type, as cuBLASLt has them. 16-bit operands
// run on tensor cores with f32 sums, and each result (bias, ReLU and all) is rounded once to `out`.
//
// gemm_epilogue_supported() asks cuBLASLt's heuristic whether an algorithm exists for the
// epilogue, the types, the shape and the pointers' alignments on the current device (cached per
// shape, types and alignment); callers fall back to plain GEMM and their own kernels when it says no. No
// workspace is requested, so nothing is allocated per call (Note [graph-safe kernels] in
// core/cuda/graph.h).
#pragma once

#include "kernels/gemm.h"

namespace ember::kernels {
enum class GemmEpilogue : std::uint8_t { bias, relu_aux_bias, drelu_bgrad, bgrad_a };
constexpr std::size_t relu_mask_ld(std::size_t n) { return ceil_div(n, 128) * 128; }
constexpr std::size_t relu_mask_bytes(std::size_t m, std::size_t n) { return relu_mask_ld(n) / 8 * m; }

// One GEMM with its epilogue: shapes, operands and the epilogue's vector and mask.
struct EpilogueGemm {
  GemmEpilogue epilogue = GemmEpilogue::bias;
  Transpose ta = Transpose::no, tb = Transpose::no;
  std::size_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::size_t lda = 0;
  const void* b = nullptr;
  std::size_t ldb = 0;
  void* c = nullptr;
  std::size_t ldc = 0;
  void* vec = nullptr;                      // the bias (read) or the bias gradient (written), in `out`'s type
  void* aux = nullptr;                      // the ReLU mask, for relu_aux_bias and drelu_bgrad
  DType ab = DType::f32, out = DType::f32;  // the operands' type and C's
};
}  // namespace ember::kernels

namespace ember::kernels::cuda {
bool gemm_epilogue_supported(const EpilogueGemm& gemm);
void gemm_epilogue(const EpilogueGemm& gemm, cudaStream_t stream);
}  // namespace ember::kernels::cuda
