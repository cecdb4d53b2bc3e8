// The cuBLASLt model's multiplication by reference loops (lt_matmul.h).
#include "lt_matmul.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "state.h"

namespace ember_sim::cublaslt_model {

namespace {

// The mask bit of element (i, j): the bits of each 128-row group permuted (see cublaslt.cpp's
// file comment).
const std::vector<std::uint8_t>& mask_permutation() {
  static const std::vector<std::uint8_t> perm = [] {
    std::vector<std::uint8_t> p(128);
    std::iota(p.begin(), p.end(), std::uint8_t{0});
    std::mt19937_64 rng(ember_sim::rt::config().seed ^ 0x6d61736bULL);
    std::shuffle(p.begin(), p.end(), rng);
    return p;
  }();
  return perm;
}
std::uint64_t mask_bit(std::uint64_t i, std::uint64_t j, std::int64_t ld) {
  return j * static_cast<std::uint64_t>(ld) + (i / 128) * 128 + mask_permutation()[i % 128];
}

}  // namespace

void Matmul::run() const {
  // Element (r, col) of a column-major operand (A, B: the operands' format) or of C (D's format).
  const auto at = [&](const void* base, std::int64_t lead, std::uint64_t r, std::uint64_t col) {
    return ember_sim::load(base, col * static_cast<std::uint64_t>(lead) + r, in);
  };
  const auto c_at = [&](std::uint64_t r, std::uint64_t col) {
    return ember_sim::load(C, col * static_cast<std::uint64_t>(ldc) + r, out_format);
  };
  const auto bias_at = [&](std::uint64_t i) { return ember_sim::load(bias, i, out_format); };
  const auto factor = [&](float v) { return tf32 ? ember_sim::tf32_round(v) : v; };
  std::vector<double> bgrad(e == CUBLASLT_EPILOGUE_BGRADB ? n : m, 0.0);
  for (std::uint64_t j = 0; j < n; ++j)
    for (std::uint64_t i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (std::uint64_t p = 0; p < k; ++p)
        acc += factor(ta ? at(A, lda, p, i) : at(A, lda, i, p)) * factor(tb ? at(B, ldb, j, p) : at(B, ldb, p, j));
      float v = a_scale * acc + (b_scale != 0.0f ? b_scale * c_at(i, j) : 0.0f);
      switch (e) {
        case CUBLASLT_EPILOGUE_RELU:
          v = v > 0.0f ? v : 0.0f;
          break;
        case CUBLASLT_EPILOGUE_BIAS:
          v += bias_at(i);
          break;
        case CUBLASLT_EPILOGUE_RELU_BIAS:
          v = v + bias_at(i) > 0.0f ? v + bias_at(i) : 0.0f;
          break;
        case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: {
          v += bias_at(i);
          const std::uint64_t bit = mask_bit(i, j, aux_ld);
          if (v > 0.0f)
            aux[bit / 8] = static_cast<std::uint8_t>(aux[bit / 8] | (1u << (bit % 8)));
          else
            aux[bit / 8] = static_cast<std::uint8_t>(aux[bit / 8] & ~(1u << (bit % 8)));
          v = v > 0.0f ? v : 0.0f;
          break;
        }
        case CUBLASLT_EPILOGUE_DRELU_BGRAD: {
          const std::uint64_t bit = mask_bit(i, j, aux_ld);
          if (!((aux[bit / 8] >> (bit % 8)) & 1u)) v = 0.0f;
          bgrad[i] += v;  // over the columns of D
          break;
        }
        default:
          break;
      }
      ember_sim::store(D, j * static_cast<std::uint64_t>(ldd) + i, out_format, v);
    }
  if (e == CUBLASLT_EPILOGUE_BGRADB) {
    // Σ over GEMM's k of op(B)[k, j]: one value per column of D.
    for (std::uint64_t j = 0; j < n; ++j)
      for (std::uint64_t p = 0; p < k; ++p) bgrad[j] += tb ? at(B, ldb, j, p) : at(B, ldb, p, j);
  }
  if (bias_written)
    for (std::size_t i = 0; i < bgrad.size(); ++i) ember_sim::store(bias, i, out_format, static_cast<float>(bgrad[i]));
}

}  // namespace ember_sim::cublaslt_model
