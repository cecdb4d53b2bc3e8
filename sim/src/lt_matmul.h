// The multiplication of the cuBLASLt model (cublaslt.cpp), once its call is checked: D =
// α·op(A)·op(B) + β·C and the epilogue, by reference loops, and the ReLU bit-mask's layout.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "numerics.h"

namespace ember_sim::cublaslt_model {

// One checked call, its operands column-major: A and B in the format `in`, C, D and the bias in
// `out_format`.
struct Matmul {
  std::uint64_t m, n, k;  // op(A) is [m, k], op(B) [k, n], C and D [m, n]
  bool ta, tb;            // whether A and B are transposed
  const void* A;
  const void* B;
  const void* C;
  void* D;
  std::int64_t lda, ldb, ldc, ldd;
  Format in, out_format;
  float a_scale, b_scale;  // α and β
  cublasLtEpilogue_t e;    // the epilogue
  bool bias_written;       // DRELU_BGRAD and BGRADB write the bias gradient where the others read the bias
  void* bias;
  std::uint8_t* aux;    // the ReLU bit-mask
  std::int64_t aux_ld;  // in bits
  bool tf32;            // the products' inputs rounded to TF32 (numerics.h)

  // Computes D (and the mask or the bias gradient the epilogue writes): each product exact in f32,
  // each sum in f32, each result rounded once to D's type.
  void run() const;
};

}  // namespace ember_sim::cublaslt_model
