// The software GPU's library models against naive formulas of their own, and the checks they make
// on wrong calls: cuBLAS (a leading dimension too small, the workspace rule, cublasGemmEx's bf16
// and f16 and the type combinations it refuses), cuBLASLt (each
// epilogue ember uses, a bad leading dimension, an epilogue pointer less aligned than its
// algorithm was chosen for, a ReLU mask read directly, a heuristic told to offer nothing) and cuDNN
// (the three convolutions against an im2col reference and bit for bit against their documented
// order of summation in both modes, descriptors that disagree, a
// workspace too small, ALGO_0's non-determinism, the bf16 and f16 configurations and the ones it
// refuses), and TF32 in all three. Independent of how ember uses them.
#include <catch2/catch.hpp>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "copies.cuh"
#include "launch_raw.cuh"

namespace {

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Column-major element (r, c) of a matrix with leading dimension ld.
float at(const std::vector<float>& m, int ld, int r, int c) { return m[static_cast<std::size_t>(c) * ld + r]; }

// One cuBLASLt multiplication D[m, n] = op(A)·op(B) with an epilogue, set up as ember does.
struct LtCall {
  int m, n, k;
  bool ta, tb;
  cublasLtEpilogue_t epilogue;
  std::int64_t aux_ld = 0;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  std::uint64_t workspace_bytes = 0;
  void* workspace = nullptr;
  LtCall(int m_, int n_, int k_, bool ta_, bool tb_, cublasLtEpilogue_t e, int lda_extra = 0,
         cudaDataType operands = CUDA_R_32F, cudaDataType result = CUDA_R_32F)
      : m(m_), n(n_), k(k_), ta(ta_), tb(tb_), epilogue(e) {
    REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
    aux_ld = (m + 127) / 128 * 128;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld));
    const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
    cublasLtMatrixLayoutCreate(&a, operands, a_rows, a_cols, a_rows + lda_extra);
    cublasLtMatrixLayoutCreate(&b, operands, b_rows, b_cols, b_rows);
    cublasLtMatrixLayoutCreate(&d, result, m, n, m);
    cublasLtMatmulPreferenceCreate(&pref);
    // As ember does: a workspace for split-K algorithms, whose partials are summed in f32.
    workspace_bytes = static_cast<std::uint64_t>(m) * static_cast<std::uint64_t>(n) * sizeof(float);
    if (workspace_bytes > 0) REQUIRE(cudaMalloc(&workspace, workspace_bytes) == cudaSuccess);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                         sizeof(workspace_bytes));
    const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes));
  }
  ~LtCall() {
    cudaFree(workspace);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  void pointers(const void* bias, const void* aux) {
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux));
  }
  cublasStatus_t heuristic(cublasLtMatmulAlgo_t& algo) {
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, pref, 1, &result, &found);
    algo = result.algo;
    return st == CUBLAS_STATUS_SUCCESS && found == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : st;
  }
  cublasStatus_t matmul(const cublasLtMatmulAlgo_t& algo, const void* A, const void* B, void* D) {
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul(handle, desc, &one, A, a, B, b, &zero, D, d, D, d, &algo, workspace, workspace_bytes, nullptr);
    cudaDeviceSynchronize();
    return st;
  }
};

}  // namespace

TEST_CASE("cublasSgemm refuses a leading dimension smaller than its matrix's rows") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  DeviceBuffer<float> a(64), b(64), c(64);
  const float one = 1.0f, zero = 0.0f;
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, a.data, 7, b.data, 8, &zero, c.data, 8) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, a.data, 8, b.data, 8, &zero, c.data, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSetWorkspace(h, reinterpret_cast<char*>(a.data) + 4, 64) ==
        CUBLAS_STATUS_INVALID_VALUE);  // not 256-aligned
  cublasDestroy(h);
}

TEST_CASE("cublasSgemm matches the column-major formula: every transpose pair, padded leading dimensions, any beta") {
  // C = α·op(A)·op(B) + β·C with op(A) m×k, op(B) k×n, every matrix stored with rows to spare.
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 7;
  for (const int k : {3, 0})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const float beta : {0.0f, 1.0f, -0.5f}) {
          INFO("k " << k << (ta ? " Aᵀ" : " A") << (tb ? " Bᵀ" : " B") << " beta " << beta);
          const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
          const int lda = a_rows + 2, ldb = b_rows + 3, ldc = m + 1;
          const auto a = random_values(static_cast<std::size_t>(lda) * std::max(a_cols, 1), 11);
          const auto b = random_values(static_cast<std::size_t>(ldb) * std::max(b_cols, 1), 12);
          auto c = random_values(static_cast<std::size_t>(ldc) * n, 13);
          if (beta == 0.0f)  // C is not read when beta is 0: NaN there must not show
            for (int col = 0; col < n; ++col)
              for (int r = 0; r < m; ++r) c[static_cast<std::size_t>(col * ldc + r)] = NAN;
          DeviceBuffer<float> da(a.size()), db(b.size()), dc(c.size());
          to_device(da.data, a);
          to_device(db.data, b);
          to_device(dc.data, c);
          const float alpha = 1.5f;
          REQUIRE(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
                              da.data, lda, db.data, ldb, &beta, dc.data, ldc) == CUBLAS_STATUS_SUCCESS);
          const auto got = to_host(dc.data, c.size());
          for (int col = 0; col < n; ++col) {
            for (int r = 0; r < m; ++r) {
              double sum = 0;
              for (int p = 0; p < k; ++p)
                sum += static_cast<double>(ta ? at(a, lda, p, r) : at(a, lda, r, p)) *
                       (tb ? at(b, ldb, col, p) : at(b, ldb, p, col));
              const double want = alpha * sum + (beta == 0.0f ? 0.0 : beta * at(c, ldc, r, col));
              REQUIRE(at(got, ldc, r, col) == Approx(want).margin(1e-5));
            }
            REQUIRE(std::memcmp(&got[static_cast<std::size_t>(col * ldc + m)],
                                &c[static_cast<std::size_t>(col * ldc + m)],
                                sizeof(float)) == 0);  // the row to spare is untouched
          }
        }
  cublasDestroy(h);
}

TEST_CASE("cublasGemmEx: bf16 and f16 operands with C in f32 or their type match the widened formula") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  // As ember sets it: a 16-bit C is summed in f32 and rounded once (sim_checks shows the refusal).
  REQUIRE(cublasSetMathMode(h, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) == CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 6, k = 37;
  for (const cudaDataType type : {CUDA_R_16BF, CUDA_R_16F})
    for (const bool c_half : {false, true})
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          INFO((type == CUDA_R_16BF ? "bf16" : "f16")
               << (c_half ? ", C in it" : ", C in f32") << (ta ? " Aᵀ" : " A") << (tb ? " Bᵀ" : " B"));
          const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
          const int lda = a_rows + 1, ldb = b_rows + 2, ldc = m + 1;
          // Values of the 16-bit type: stored as its bits, kept as the f32 they widen to.
          auto narrow = [&](const std::vector<float>& v, std::vector<float>& exact) {
            std::vector<std::uint16_t> bits(v.size());
            exact.resize(v.size());
            for (std::size_t i = 0; i < v.size(); ++i) {
              if (type == CUDA_R_16BF) {
                const __nv_bfloat16 x = __float2bfloat16_rn(v[i]);
                std::memcpy(&bits[i], &x, 2);
                exact[i] = __bfloat162float(x);
              } else {
                const __half x = __float2half_rn(v[i]);
                std::memcpy(&bits[i], &x, 2);
                exact[i] = __half2float(x);
              }
            }
            return bits;
          };
          std::vector<float> a, b;
          const auto a_bits = narrow(random_values(static_cast<std::size_t>(lda) * a_cols, 21), a);
          const auto b_bits = narrow(random_values(static_cast<std::size_t>(ldb) * b_cols, 22), b);
          DeviceBuffer<std::uint16_t> da(a_bits.size()), db(b_bits.size());
          DeviceBuffer<float> dc(static_cast<std::size_t>(ldc) * n);
          to_device(da.data, a_bits);
          to_device(db.data, b_bits);
          const float alpha = 1.0f, beta = 0.0f;
          REQUIRE(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
                               da.data, type, lda, db.data, type, ldb, &beta, dc.data, c_half ? type : CUDA_R_32F, ldc,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
          std::vector<float> got(static_cast<std::size_t>(ldc) * n);
          if (c_half) {
            const auto bits = to_host(reinterpret_cast<const std::uint16_t*>(dc.data), got.size());
            for (std::size_t i = 0; i < got.size(); ++i) {
              const std::uint32_t word = type == CUDA_R_16BF ? std::uint32_t{bits[i]} << 16 : 0;
              if (type == CUDA_R_16BF) {
                std::memcpy(&got[i], &word, 4);
              } else {
                __half x;
                std::memcpy(&x, &bits[i], 2);
                got[i] = __half2float(x);
              }
            }
          } else {
            got = to_host(dc.data, got.size());
          }
          for (int col = 0; col < n; ++col)
            for (int r = 0; r < m; ++r) {
              double sum = 0, magnitude = 0;
              for (int p = 0; p < k; ++p) {
                const double term = static_cast<double>(ta ? at(a, lda, p, r) : at(a, lda, r, p)) *
                                    (tb ? at(b, ldb, col, p) : at(b, ldb, p, col));
                sum += term;
                magnitude += std::fabs(term);
              }
              // Exact products summed in f32 (k roundings), then, in a 16-bit C, one rounding to it
              // (half an ulp: 2^-9 of the value in bf16, 2^-12 in f16).
              const double rounding = c_half ? std::ldexp(std::fabs(sum), type == CUDA_R_16BF ? -8 : -11) : 0.0;
              REQUIRE(std::fabs(at(got, ldc, r, col) - sum) <= k * std::ldexp(magnitude, -24) + rounding);
            }
        }
  cublasDestroy(h);
}

TEST_CASE("cublasGemmEx refuses the type combinations cuBLAS does not list") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetMathMode(h, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) == CUBLAS_STATUS_SUCCESS);
  DeviceBuffer<float> a(64), b(64), c(64);
  const float one = 1.0f, zero = 0.0f;
  auto call = [&](cudaDataType at_, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute) {
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.data, at_, 4, b.data, bt, 4, &zero, c.data, ct, 4,
                        compute, CUBLAS_GEMM_DEFAULT);
  };
  CHECK(call(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS);
  CHECK(call(CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS);
  CHECK(call(CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_SUPPORTED);   // A ≠ B
  CHECK(call(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_SUPPORTED);  // C in f16
  CHECK(call(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_16F) == CUBLAS_STATUS_NOT_SUPPORTED);  // f16 math
  CHECK(call(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32) == CUBLAS_STATUS_NOT_SUPPORTED);
  cublasDestroy(h);
}

TEST_CASE("cuBLASLt's epilogues match naive formulas: BIAS, RELU_AUX_BIAS then DRELU_BGRAD, BGRADB") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int m = 70, n = 9, k = 13;
      INFO("ta=" << ta << " tb=" << tb);
      const auto A = random_values(static_cast<std::size_t>(m) * k, 1),
                 B = random_values(static_cast<std::size_t>(k) * n, 2);
      const auto bias = random_values(m, 3);
      DeviceBuffer<float> dA(A.size()), dB(B.size()), dD(static_cast<std::size_t>(m) * n), dbias(m), dgrad(n);
      to_device(dA.data, A);
      to_device(dB.data, B);
      to_device(dbias.data, bias);
      const int lda = ta ? k : m, ldb = tb ? n : k;
      const auto product = [&](int i, int j) {
        float s = 0.0f;
        for (int p = 0; p < k; ++p)
          s += (ta ? at(A, lda, p, i) : at(A, lda, i, p)) * (tb ? at(B, ldb, j, p) : at(B, ldb, p, j));
        return s;
      };
      {
        LtCall call(m, n, k, ta, tb, CUBLASLT_EPILOGUE_BIAS);
        call.pointers(dbias.data, nullptr);
        cublasLtMatmulAlgo_t algo;
        REQUIRE(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(call.matmul(algo, dA.data, dB.data, dD.data) == CUBLAS_STATUS_SUCCESS);
        const auto D = to_host(dD.data, static_cast<std::size_t>(m) * n);
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < m; ++i) REQUIRE(at(D, m, i, j) == Approx(product(i, j) + bias[i]).margin(1e-5));
      }
      // The forward writes the mask; the backward reads it, whatever its layout.
      DeviceBuffer<std::uint8_t> mask(static_cast<std::size_t>((m + 127) / 128 * 128) / 8 * n);
      std::vector<float> forward;
      {
        LtCall call(m, n, k, ta, tb, CUBLASLT_EPILOGUE_RELU_AUX_BIAS);
        call.pointers(dbias.data, mask.data);
        cublasLtMatmulAlgo_t algo;
        REQUIRE(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(call.matmul(algo, dA.data, dB.data, dD.data) == CUBLAS_STATUS_SUCCESS);
        forward = to_host(dD.data, static_cast<std::size_t>(m) * n);
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < m; ++i)
            REQUIRE(at(forward, m, i, j) == Approx(std::max(0.0f, product(i, j) + bias[i])).margin(1e-5));
      }
      {
        LtCall call(m, n, k, ta, tb, CUBLASLT_EPILOGUE_DRELU_BGRAD);
        call.pointers(dbias.data, mask.data);  // the bias pointer receives the gradient
        cublasLtMatmulAlgo_t algo;
        REQUIRE(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(call.matmul(algo, dA.data, dB.data, dD.data) == CUBLAS_STATUS_SUCCESS);
        const auto D = to_host(dD.data, static_cast<std::size_t>(m) * n), grad = to_host(dbias.data, m);
        for (int i = 0; i < m; ++i) {
          double row = 0;
          for (int j = 0; j < n; ++j) {
            const float want = at(forward, m, i, j) > 0.0f ? product(i, j) : 0.0f;
            REQUIRE(at(D, m, i, j) == Approx(want).margin(1e-5));
            row += want;
          }
          REQUIRE(grad[i] == Approx(row).margin(1e-4));  // Σ over the columns of D: one per row
        }
        to_device(dbias.data, bias);
      }
      {
        LtCall call(m, n, k, ta, tb, CUBLASLT_EPILOGUE_BGRADB);
        call.pointers(dgrad.data, nullptr);
        cublasLtMatmulAlgo_t algo;
        REQUIRE(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
        REQUIRE(call.matmul(algo, dA.data, dB.data, dD.data) == CUBLAS_STATUS_SUCCESS);
        const auto grad = to_host(dgrad.data, n);
        for (int j = 0; j < n; ++j) {
          double col = 0;
          for (int p = 0; p < k; ++p) col += tb ? at(B, ldb, j, p) : at(B, ldb, p, j);  // Σ_k op(B)[k, j]
          REQUIRE(grad[j] == Approx(col).margin(1e-4));
        }
      }
    }
}

TEST_CASE("cuBLASLt refuses a bad leading dimension and an epilogue pointer less aligned than its algorithm") {
  DeviceBuffer<float> A(64 * 64), B(64 * 64), D(64 * 64), bias(80);
  {
    LtCall bad(32, 8, 16, false, false, CUBLASLT_EPILOGUE_BIAS, -1);  // lda one less than A's rows
    bad.pointers(bias.data, nullptr);
    cublasLtMatmulAlgo_t algo;
    CHECK(bad.heuristic(algo) == CUBLAS_STATUS_INVALID_VALUE);
  }
  LtCall call(32, 8, 16, false, false, CUBLASLT_EPILOGUE_BIAS);
  call.pointers(bias.data, nullptr);  // 256-byte aligned when the heuristic looks
  cublasLtMatmulAlgo_t algo;
  REQUIRE(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
  CHECK(call.matmul(algo, A.data, B.data, D.data) == CUBLAS_STATUS_SUCCESS);
  call.pointers(bias.data + 1, nullptr);  // 4-byte aligned at the call
  CHECK(call.matmul(algo, A.data, B.data, D.data) == CUBLAS_STATUS_INVALID_VALUE);
  call.pointers(bias.data, nullptr);
  CHECK(call.matmul(algo, A.data + 1, B.data, D.data) == CUBLAS_STATUS_INVALID_VALUE);  // A told 256, given 4
  // The mask's leading dimension must be a multiple of 128 bits.
  LtCall relu(32, 8, 16, false, false, CUBLASLT_EPILOGUE_RELU_AUX_BIAS);
  const std::int64_t odd_ld = 96;
  cublasLtMatmulDescSetAttribute(relu.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &odd_ld, sizeof(odd_ld));
  relu.pointers(bias.data, D.data);
  CHECK(relu.heuristic(algo) == CUBLAS_STATUS_INVALID_VALUE);
}

TEST_CASE("the ReLU mask's layout is cuBLASLt's own: reading it as plain bits gives nonsense") {
  const int m = 128, n = 4, k = 8;
  const auto A = random_values(m * k, 4), B = random_values(k * n, 5);
  DeviceBuffer<float> dA(A.size()), dB(B.size()), dD(m * n), dbias(m);
  DeviceBuffer<std::uint8_t> mask(m / 8 * n);
  to_device(dA.data, A);
  to_device(dB.data, B);
  to_device(dbias.data, std::vector<float>(m, 0.0f));
  LtCall call(m, n, k, false, false, CUBLASLT_EPILOGUE_RELU_AUX_BIAS);
  call.pointers(dbias.data, mask.data);
  cublasLtMatmulAlgo_t algo;
  REQUIRE(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(call.matmul(algo, dA.data, dB.data, dD.data) == CUBLAS_STATUS_SUCCESS);
  const auto D = to_host(dD.data, m * n);
  const auto bits = to_host(mask.data, m / 8 * n);
  int agree = 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const int bit = j * m + i;  // the naive reading: bit i of column j
      agree += ((bits[bit / 8] >> (bit % 8)) & 1) == (at(D, m, i, j) > 0.0f);
    }
  CHECK(agree < m * n * 3 / 4);  // a chance agreement, not the mask: code that decodes it is wrong
}

TEST_CASE("cuBLASLt's heuristic can be told to offer no algorithm") {
  DeviceBuffer<float> bias(32);
  LtCall call(32, 8, 16, false, false, CUBLASLT_EPILOGUE_BIAS);
  call.pointers(bias.data, nullptr);
  cublasLtMatmulAlgo_t algo;
  ::setenv("EMBER_SIM_LT_ALGOS", "0", 1);
  CHECK(call.heuristic(algo) == CUBLAS_STATUS_NOT_SUPPORTED);
  ::unsetenv("EMBER_SIM_LT_ALGOS");
  CHECK(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("cuBLASLt's split-K algorithm needs its workspace: none offered, none for a bias gradient") {
  DeviceBuffer<float> bias(32), a(32 * 16), b(16 * 8), d(32 * 8);
  DeviceBuffer<std::uint8_t> aux(128 * 8 / 8);
  for (const cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BGRADB, CUBLASLT_EPILOGUE_DRELU_BGRAD}) {
    LtCall call(32, 8, 16, false, false, e);
    call.pointers(bias.data, aux.data);
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    REQUIRE(cublasLtMatmulAlgoGetHeuristic(call.handle, call.desc, call.a, call.b, call.d, call.d, call.pref, 1,
                                           &result, &found) == CUBLAS_STATUS_SUCCESS);
    CHECK(result.workspaceSize == call.workspace_bytes);  // one f32 partial per element of D
    algo = result.algo;
    // Given less than it needs at the matmul: refused.
    const float one = 1.0f, zero = 0.0f;
    CHECK(cublasLtMatmul(call.handle, call.desc, &one, a.data, call.a, b.data, call.b, &zero, d.data, call.d, d.data,
                         call.d, &algo, nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
    // Told no workspace may be used: a plain algorithm, except for the bias gradients.
    const std::uint64_t none = 0;
    cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &none, sizeof(none));
    const bool bias_gradient = e != CUBLASLT_EPILOGUE_BIAS;
    CHECK(call.heuristic(algo) == (bias_gradient ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS));
  }
}

namespace {

struct Conv {
  int n = 2, c = 3, h = 7, w = 6, k = 4, kh = 3, kw = 3, pad = 1, stride = 2;
  int oh() const { return (h + 2 * pad - kh) / stride + 1; }
  int ow() const { return (w + 2 * pad - kw) / stride + 1; }
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t f = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Conv() {
    REQUIRE(cudnnCreate(&handle) == CUDNN_STATUS_SUCCESS);
    cudnnCreateTensorDescriptor(&x);
    cudnnCreateTensorDescriptor(&y);
    cudnnCreateFilterDescriptor(&f);
    cudnnCreateConvolutionDescriptor(&conv);
    REQUIRE(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, oh(), ow()) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, kh, kw) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(conv, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS);
    // f32 exact, as ember asks: the default math type lets cuDNN round f32 inputs to TF32.
    REQUIRE(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH) == CUDNN_STATUS_SUCCESS);
  }
  ~Conv() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(f);
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroy(handle);
  }
  // The naive cross-correlation's taps: (y index, x index, w index).
  template <class F>
  void taps(F visit) const {
    for (int b = 0; b < n; ++b)
      for (int o = 0; o < k; ++o)
        for (int i = 0; i < oh(); ++i)
          for (int j = 0; j < ow(); ++j)
            for (int ch = 0; ch < c; ++ch)
              for (int u = 0; u < kh; ++u)
                for (int v = 0; v < kw; ++v) {
                  const int iy = i * stride - pad + u, ix = j * stride - pad + v;
                  if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                  visit(((b * k + o) * oh() + i) * ow() + j, ((b * c + ch) * h + iy) * w + ix,
                        ((o * c + ch) * kh + u) * kw + v);
                }
  }
};

}  // namespace

TEST_CASE("cuDNN's convolutions match a naive cross-correlation, forward and both gradients") {
  Conv g;
  const std::size_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.k * g.oh() * g.ow(), nw = g.k * g.c * g.kh * g.kw;
  const auto x = random_values(nx, 6), w = random_values(nw, 7), dy = random_values(ny, 8);
  DeviceBuffer<float> dx(nx), dw(nw), dyb(ny), out_y(ny), out_dx(nx), out_dw(nw), ws(1 << 16);
  to_device(dx.data, x);
  to_device(dw.data, w);
  to_device(dyb.data, dy);
  std::vector<double> y(ny, 0), gx(nx, 0), gw(nw, 0);
  g.taps([&](int yi, int xi, int wi) {
    y[yi] += x[xi] * w[wi];
    gx[xi] += dy[yi] * w[wi];
    gw[wi] += dy[yi] * x[xi];
  });
  const float one = 1.0f, zero = 0.0f;
  cudnnConvolutionFwdAlgoPerf_t fwd[4];
  int found = 0;
  REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, g.f, g.conv, g.y, 4, &found, fwd) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(found > 0);
  for (int a = 0; a < found; ++a) {
    std::size_t need = 0;
    REQUIRE(cudnnGetConvolutionForwardWorkspaceSize(g.handle, g.x, g.f, g.conv, g.y, fwd[a].algo, &need) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(need <= (1u << 16) * sizeof(float));
    REQUIRE(cudnnConvolutionForward(g.handle, &one, g.x, dx.data, g.f, dw.data, g.conv, fwd[a].algo, ws.data,
                                    (1u << 16) * sizeof(float), &zero, g.y, out_y.data) == CUDNN_STATUS_SUCCESS);
    const auto got = to_host(out_y.data, ny);
    for (std::size_t i = 0; i < ny; ++i) REQUIRE(got[i] == Approx(y[i]).margin(1e-5));
  }
  REQUIRE(cudnnConvolutionBackwardData(g.handle, &one, g.f, dw.data, g.y, dyb.data, g.conv,
                                       CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws.data, (1u << 16) * sizeof(float), &zero,
                                       g.x, out_dx.data) == CUDNN_STATUS_SUCCESS);
  const auto got_dx = to_host(out_dx.data, nx);
  for (std::size_t i = 0; i < nx; ++i) REQUIRE(got_dx[i] == Approx(gx[i]).margin(1e-5));
  REQUIRE(cudnnConvolutionBackwardFilter(g.handle, &one, g.x, dx.data, g.y, dyb.data, g.conv,
                                         CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws.data, (1u << 16) * sizeof(float),
                                         &zero, g.f, out_dw.data) == CUDNN_STATUS_SUCCESS);
  const auto got_dw = to_host(out_dw.data, nw);
  for (std::size_t i = 0; i < nw; ++i) REQUIRE(got_dw[i] == Approx(gw[i]).margin(1e-5));
}

namespace {

// A convolution's geometry and mode for the im2col reference below.
struct Geometry {
  int n, c, h, w, k, kh, kw, pad_h, pad_w, stride_h, stride_w;
  bool flip;  // CUDNN_CONVOLUTION: the filter turned 180°; else cross-correlation
  int oh() const { return (h + 2 * pad_h - kh) / stride_h + 1; }
  int ow() const { return (w + 2 * pad_w - kw) / stride_w + 1; }
  int rows() const { return c * kh * kw; }  // of the im2col matrix, one per (channel, tap)
};

// The convolution as matrices, written apart from the model's loops: per image the im2col matrix
// X (rows × oh·ow), the filter as a matrix W (k × rows, its taps flipped for CUDNN_CONVOLUTION);
// y = W·X, dX = Wᵀ·dy scattered back (col2im), dW = Σ dy·Xᵀ.
struct Im2colReference {
  std::vector<double> y, dx, dw;
  Im2colReference(const Geometry& g, const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>& dy) {
    const int pixels = g.oh() * g.ow();
    y.assign(static_cast<std::size_t>(g.n * g.k * pixels), 0.0);
    dx.assign(x.size(), 0.0);
    dw.assign(w.size(), 0.0);
    // W[o][row]: the filter value that multiplies row `row` of X.
    const auto filter_index = [&](int o, int row) {
      const int ch = row / (g.kh * g.kw), u = row / g.kw % g.kh, v = row % g.kw;
      const int fu = g.flip ? g.kh - 1 - u : u, fv = g.flip ? g.kw - 1 - v : v;
      return static_cast<std::size_t>(((o * g.c + ch) * g.kh + fu) * g.kw + fv);
    };
    // X[row][pixel]'s element of x, or -1 in the padding.
    const auto input_index = [&](int b, int row, int pixel) -> long {
      const int ch = row / (g.kh * g.kw), u = row / g.kw % g.kh, v = row % g.kw;
      const int iy = pixel / g.ow() * g.stride_h - g.pad_h + u, ix = pixel % g.ow() * g.stride_w - g.pad_w + v;
      if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return -1;
      return ((static_cast<long>(b) * g.c + ch) * g.h + iy) * g.w + ix;
    };
    for (int b = 0; b < g.n; ++b) {
      std::vector<double> cols(static_cast<std::size_t>(g.rows() * pixels), 0.0), dcols(cols.size(), 0.0);
      for (int row = 0; row < g.rows(); ++row)
        for (int p = 0; p < pixels; ++p) {
          const long i = input_index(b, row, p);
          if (i >= 0) cols[static_cast<std::size_t>(row * pixels + p)] = x[static_cast<std::size_t>(i)];
        }
      for (int o = 0; o < g.k; ++o)
        for (int row = 0; row < g.rows(); ++row) {
          const double wv = w[filter_index(o, row)];
          for (int p = 0; p < pixels; ++p) {
            const std::size_t yi = static_cast<std::size_t>((b * g.k + o) * pixels + p);
            y[yi] += wv * cols[static_cast<std::size_t>(row * pixels + p)];
            dcols[static_cast<std::size_t>(row * pixels + p)] += wv * dy[yi];
            dw[filter_index(o, row)] += dy[yi] * cols[static_cast<std::size_t>(row * pixels + p)];
          }
        }
      for (int row = 0; row < g.rows(); ++row)
        for (int p = 0; p < pixels; ++p) {
          const long i = input_index(b, row, p);
          if (i >= 0) dx[static_cast<std::size_t>(i)] += dcols[static_cast<std::size_t>(row * pixels + p)];
        }
    }
  }
};

// The model's documented summation order (sim/src/convolution.h), in f32 as the model sums: every
// (output, input, weight) triple in the nesting image, filter, output row, output column, channel,
// kernel row, kernel column, each product added to its output, input or weight sum in that order.
// The model's loops visit them in other nestings; its bits must be these.
struct OrderedSums {
  std::vector<float> y, dx, dw;
  OrderedSums(const Geometry& g, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dy)
      : y(dy.size(), 0.0f), dx(x.size(), 0.0f), dw(w.size(), 0.0f) {
    for (int b = 0; b < g.n; ++b)
      for (int f = 0; f < g.k; ++f)
        for (int oy = 0; oy < g.oh(); ++oy)
          for (int ox = 0; ox < g.ow(); ++ox)
            for (int ch = 0; ch < g.c; ++ch)
              for (int ky = 0; ky < g.kh; ++ky)
                for (int kx = 0; kx < g.kw; ++kx) {
                  const int iy = oy * g.stride_h - g.pad_h + ky, ix = ox * g.stride_w - g.pad_w + kx;
                  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                  const int wy = g.flip ? g.kh - 1 - ky : ky, wx = g.flip ? g.kw - 1 - kx : kx;
                  const std::size_t yi = static_cast<std::size_t>(((b * g.k + f) * g.oh() + oy) * g.ow() + ox);
                  const std::size_t xi = static_cast<std::size_t>(((b * g.c + ch) * g.h + iy) * g.w + ix);
                  const std::size_t wi = static_cast<std::size_t>(((f * g.c + ch) * g.kh + wy) * g.kw + wx);
                  y[yi] += x[xi] * w[wi];
                  dx[xi] += dy[yi] * w[wi];
                  dw[wi] += dy[yi] * x[xi];
                }
  }
};

}  // namespace

TEST_CASE("cuDNN's three convolutions match an im2col reference in both modes, with strides, padding and 1x1") {
  const Geometry cases[] = {{2, 3, 7, 6, 4, 3, 3, 1, 1, 2, 2, false},
                            {2, 3, 7, 6, 4, 3, 3, 1, 1, 2, 2, true},
                            {2, 5, 4, 3, 3, 1, 1, 0, 0, 1, 1, false},
                            {1, 2, 6, 7, 3, 3, 2, 2, 1, 1, 2, true},
                            {1, 2, 6, 7, 3, 3, 2, 2, 1, 1, 2, false}};
  cudnnHandle_t handle = nullptr;
  REQUIRE(cudnnCreate(&handle) == CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
  cudnnFilterDescriptor_t fd = nullptr;
  cudnnConvolutionDescriptor_t cd = nullptr;
  cudnnCreateTensorDescriptor(&xd);
  cudnnCreateTensorDescriptor(&yd);
  cudnnCreateFilterDescriptor(&fd);
  cudnnCreateConvolutionDescriptor(&cd);
  unsigned seed = 20;
  for (const Geometry& g : cases) {
    INFO((g.flip ? "CUDNN_CONVOLUTION " : "CUDNN_CROSS_CORRELATION ")
         << g.kh << "x" << g.kw << " pad " << g.pad_h << "," << g.pad_w << " stride " << g.stride_h << ","
         << g.stride_w);
    REQUIRE(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.c, g.h, g.w) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.k, g.oh(), g.ow()) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g.k, g.c, g.kh, g.kw) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(cd, g.pad_h, g.pad_w, g.stride_h, g.stride_w, 1, 1,
                                            g.flip ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS);
    // f32 exact: the default math type lets cuDNN round to TF32 (the TF32 test below).
    REQUIRE(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH) == CUDNN_STATUS_SUCCESS);
    const std::size_t nx = static_cast<std::size_t>(g.n * g.c * g.h * g.w),
                      nw = static_cast<std::size_t>(g.k * g.rows()),
                      ny = static_cast<std::size_t>(g.n * g.k * g.oh() * g.ow());
    const auto x = random_values(nx, seed++), w = random_values(nw, seed++), dy = random_values(ny, seed++);
    const Im2colReference want(g, x, w, dy);
    const OrderedSums ordered(g, x, w, dy);
    DeviceBuffer<float> dx_in(nx), dw_in(nw), ddy(ny), out(std::max({nx, nw, ny})), ws(1 << 16);
    to_device(dx_in.data, x);
    to_device(dw_in.data, w);
    to_device(ddy.data, dy);
    const std::size_t ws_bytes = (1u << 16) * sizeof(float);
    const float one = 1.0f, zero = 0.0f;
    // Within 1e-5 of the im2col reference, and the same bits as the documented order's sums.
    const auto compare = [&](const std::vector<double>& reference, const std::vector<float>& in_order) {
      const auto got = to_host(out.data, reference.size());
      for (std::size_t i = 0; i < reference.size(); ++i) {
        REQUIRE(got[i] == Approx(reference[i]).margin(1e-5));
        REQUIRE(got[i] == in_order[i]);
      }
    };
    REQUIRE(cudnnConvolutionForward(handle, &one, xd, dx_in.data, fd, dw_in.data, cd,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, ws.data, ws_bytes, &zero, yd,
                                    out.data) == CUDNN_STATUS_SUCCESS);
    compare(want.y, ordered.y);
    REQUIRE(cudnnConvolutionBackwardData(handle, &one, fd, dw_in.data, yd, ddy.data, cd,
                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws.data, ws_bytes, &zero, xd,
                                         out.data) == CUDNN_STATUS_SUCCESS);
    compare(want.dx, ordered.dx);
    REQUIRE(cudnnConvolutionBackwardFilter(handle, &one, xd, dx_in.data, yd, ddy.data, cd,
                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws.data, ws_bytes, &zero, fd,
                                           out.data) == CUDNN_STATUS_SUCCESS);
    compare(want.dw, ordered.dw);
  }
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(fd);
  cudnnDestroyConvolutionDescriptor(cd);
  cudnnDestroy(handle);
}

TEST_CASE("cuDNN refuses descriptors that disagree and a workspace smaller than its algorithm's") {
  Conv g;
  cudnnFilterDescriptor_t wrong = nullptr;
  cudnnCreateFilterDescriptor(&wrong);
  cudnnSetFilter4dDescriptor(wrong, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g.k, g.c + 1, g.kh, g.kw);  // channels differ
  cudnnConvolutionFwdAlgoPerf_t perf[4];
  int found = 0;
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, wrong, g.conv, g.y, 4, &found, perf) ==
        CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyFilterDescriptor(wrong);
  std::size_t need = 0;
  REQUIRE(cudnnGetConvolutionForwardWorkspaceSize(g.handle, g.x, g.f, g.conv, g.y, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                                  &need) == CUDNN_STATUS_SUCCESS);
  REQUIRE(need > 0);
  DeviceBuffer<float> x(g.n * g.c * g.h * g.w), w(g.k * g.c * g.kh * g.kw), y(g.n * g.k * g.oh() * g.ow()), ws(need);
  const float one = 1.0f, zero = 0.0f;
  CHECK(cudnnConvolutionForward(g.handle, &one, g.x, x.data, g.f, w.data, g.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                ws.data, need - 4, &zero, g.y, y.data) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnConvolutionForward(g.handle, &one, g.x, x.data, g.f, w.data, g.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                nullptr, 0, &zero, g.y, y.data) == CUDNN_STATUS_BAD_PARAM);
}

TEST_CASE("cuDNN's ALGO_0 weight gradient is non-deterministic, as documented; ALGO_1 is not") {
  Conv g;
  g.n = 16;
  REQUIRE(cudnnSetTensor4dDescriptor(g.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.c, g.h, g.w) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(g.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.k, g.oh(), g.ow()) ==
          CUDNN_STATUS_SUCCESS);
  cudnnConvolutionBwdFilterAlgoPerf_t perf[4];
  int found = 0;
  REQUIRE(cudnnGetConvolutionBackwardFilterAlgorithm_v7(g.handle, g.x, g.y, g.conv, g.f, 4, &found, perf) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(found >= 2);
  CHECK(perf[0].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  CHECK(perf[0].determinism == CUDNN_NON_DETERMINISTIC);
  const std::size_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.k * g.oh() * g.ow(), nw = g.k * g.c * g.kh * g.kw;
  DeviceBuffer<float> x(nx), dy(ny), dw(nw), ws(1 << 16);
  to_device(x.data, random_values(nx, 9));
  to_device(dy.data, random_values(ny, 10));
  const auto gradient = [&](cudnnConvolutionBwdFilterAlgo_t algo) {
    const float one = 1.0f, zero = 0.0f;
    REQUIRE(cudnnConvolutionBackwardFilter(g.handle, &one, g.x, x.data, g.y, dy.data, g.conv, algo, ws.data,
                                           (1u << 16) * sizeof(float), &zero, g.f, dw.data) == CUDNN_STATUS_SUCCESS);
    return to_host(dw.data, nw);
  };
  bool differed = false;
  const auto first = gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  for (int run = 0; run < 8 && !differed; ++run) differed = gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0) != first;
  CHECK(differed);
  const auto deterministic = gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  for (int run = 0; run < 3; ++run) CHECK(gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1) == deterministic);
}

namespace {
// A value's 16-bit bits and the f32 it widens to, for CUDNN_DATA_BFLOAT16 or CUDNN_DATA_HALF.
std::uint16_t narrow(float v, cudnnDataType_t type, float& exact) {
  std::uint16_t bits = 0;
  if (type == CUDNN_DATA_BFLOAT16) {
    const __nv_bfloat16 x = __float2bfloat16_rn(v);
    std::memcpy(&bits, &x, 2);
    exact = __bfloat162float(x);
  } else {
    const __half x = __float2half_rn(v);
    std::memcpy(&bits, &x, 2);
    exact = __half2float(x);
  }
  return bits;
}
float widen(std::uint16_t bits, cudnnDataType_t type) {
  if (type == CUDNN_DATA_BFLOAT16) {
    const std::uint32_t word = std::uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &word, 4);
    return f;
  }
  __half x;
  std::memcpy(&x, &bits, 2);
  return __half2float(x);
}
}  // namespace

TEST_CASE("cuDNN's PSEUDO_BFLOAT16 and PSEUDO_HALF convolutions: f32 sums of the widened values, rounded once") {
  for (const cudnnDataType_t type : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_HALF}) {
    INFO((type == CUDNN_DATA_BFLOAT16 ? "bf16" : "f16"));
    Conv g;
    REQUIRE(cudnnSetTensor4dDescriptor(g.x, CUDNN_TENSOR_NCHW, type, g.n, g.c, g.h, g.w) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(g.y, CUDNN_TENSOR_NCHW, type, g.n, g.k, g.oh(), g.ow()) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(g.f, type, CUDNN_TENSOR_NCHW, g.k, g.c, g.kh, g.kw) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolutionMathType(g.conv, CUDNN_TENSOR_OP_MATH) == CUDNN_STATUS_SUCCESS);
    const std::size_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.k * g.oh() * g.ow(), nw = g.k * g.c * g.kh * g.kw;
    std::vector<float> x(nx), w(nw), dy(ny), prior(ny);
    std::vector<std::uint16_t> x_bits(nx), w_bits(nw), dy_bits(ny), prior_bits(ny);
    const auto rx = random_values(nx, 31), rw = random_values(nw, 32), rdy = random_values(ny, 33),
               rprior = random_values(ny, 34);
    for (std::size_t i = 0; i < nx; ++i) x_bits[i] = narrow(rx[i], type, x[i]);
    for (std::size_t i = 0; i < nw; ++i) w_bits[i] = narrow(rw[i], type, w[i]);
    for (std::size_t i = 0; i < ny; ++i) dy_bits[i] = narrow(rdy[i], type, dy[i]);
    for (std::size_t i = 0; i < ny; ++i) prior_bits[i] = narrow(rprior[i], type, prior[i]);
    DeviceBuffer<std::uint16_t> dx(nx), dw(nw), ddy(ny), out_y(ny), out_dx(nx), out_dw(nw);
    DeviceBuffer<float> ws(1 << 16);
    to_device(dx.data, x_bits);
    to_device(dw.data, w_bits);
    to_device(ddy.data, dy_bits);
    to_device(out_y.data, prior_bits);
    // The reference: exact products summed in double; the model's f32 sums differ by at most
    // K·2⁻²⁴·Σ|products|, and then one rounding to the 16-bit type (half an ulp).
    std::vector<double> y(ny, 0), y_mag(ny, 0), gx(nx, 0), gx_mag(nx, 0), gw(nw, 0), gw_mag(nw, 0);
    g.taps([&](int yi, int xi, int wi) {
      y[yi] += double(x[xi]) * w[wi];
      y_mag[yi] += std::fabs(double(x[xi]) * w[wi]);
      gx[xi] += double(dy[yi]) * w[wi];
      gx_mag[xi] += std::fabs(double(dy[yi]) * w[wi]);
      gw[wi] += double(dy[yi]) * x[xi];
      gw_mag[wi] += std::fabs(double(dy[yi]) * x[xi]);
    });
    const int ulp_bits = type == CUDNN_DATA_BFLOAT16 ? -8 : -11;
    const auto check = [&](const DeviceBuffer<std::uint16_t>& out, const std::vector<double>& want,
                           const std::vector<double>& magnitude, int terms) {
      const auto bits = to_host(out.data, want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        const double bound = terms * std::ldexp(magnitude[i], -24) + std::ldexp(std::fabs(want[i]), ulp_bits);
        REQUIRE(std::fabs(widen(bits[i], type) - want[i]) <= bound + 1e-30);
      }
    };
    const float one = 1.0f, beta_one = 1.0f, zero = 0.0f;
    cudnnConvolutionFwdAlgoPerf_t fwd[4];
    int found = 0;
    REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, g.f, g.conv, g.y, 4, &found, fwd) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(found > 0);
    CHECK(fwd[0].mathType == CUDNN_TENSOR_OP_MATH);
    // β = 1: the sum added to what y held, in f32, and rounded once.
    REQUIRE(cudnnConvolutionForward(g.handle, &one, g.x, dx.data, g.f, dw.data, g.conv,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &beta_one, g.y,
                                    out_y.data) == CUDNN_STATUS_SUCCESS);
    std::vector<double> y_plus(ny);
    for (std::size_t i = 0; i < ny; ++i) y_plus[i] = y[i] + prior[i];
    check(out_y, y_plus, y_mag, g.c * g.kh * g.kw + 1);
    REQUIRE(cudnnConvolutionBackwardData(g.handle, &one, g.f, dw.data, g.y, ddy.data, g.conv,
                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws.data, (1u << 16) * sizeof(float), &zero,
                                         g.x, out_dx.data) == CUDNN_STATUS_SUCCESS);
    check(out_dx, gx, gx_mag, g.k * g.kh * g.kw);
    REQUIRE(cudnnConvolutionBackwardFilter(g.handle, &one, g.x, dx.data, g.y, ddy.data, g.conv,
                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws.data, (1u << 16) * sizeof(float),
                                           &zero, g.f, out_dw.data) == CUDNN_STATUS_SUCCESS);
    check(out_dw, gw, gw_mag, g.n * g.oh() * g.ow());
  }
}

TEST_CASE("cuDNN refuses mixed data types and 16-bit compute; its FMA math keeps f32 exact") {
  Conv g;
  cudnnConvolutionFwdAlgoPerf_t perf[4];
  int found = 0;
  // x in bf16, w and y in f32: not a configuration cuDNN lists.
  REQUIRE(cudnnSetTensor4dDescriptor(g.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, g.n, g.c, g.h, g.w) ==
          CUDNN_STATUS_SUCCESS);
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, g.f, g.conv, g.y, 4, &found, perf) ==
        CUDNN_STATUS_NOT_SUPPORTED);
  // All f16 with f16 compute (TRUE_HALF_CONFIG): not modelled.
  REQUIRE(cudnnSetTensor4dDescriptor(g.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, g.n, g.c, g.h, g.w) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(g.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, g.n, g.k, g.oh(), g.ow()) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetFilter4dDescriptor(g.f, CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW, g.k, g.c, g.kh, g.kw) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetConvolution2dDescriptor(g.conv, g.pad, g.pad, g.stride, g.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_HALF) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, g.f, g.conv, g.y, 4, &found, perf) ==
        CUDNN_STATUS_NOT_SUPPORTED);
}

TEST_CASE("TF32: cuBLAS's math mode, cuBLASLt's compute type and cuDNN's default math round f32 inputs") {
  // 1 + 2⁻²⁰ has no TF32 value of its own: times 1 it is itself in f32, 1 in TF32.
  const float fine = 1.0f + 0x1p-20f;
  DeviceBuffer<float> a(16), b(16), c(16);
  to_device(a.data, std::vector<float>(16, fine));
  to_device(b.data, std::vector<float>(16, 1.0f));
  const float one = 1.0f, zero = 0.0f;
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const auto sgemm = [&] {
    REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 1, &one, a.data, 4, b.data, 1, &zero, c.data, 4) ==
            CUBLAS_STATUS_SUCCESS);
    return to_host(c.data, 16)[5];
  };
  CHECK(sgemm() == fine);
  REQUIRE(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
  CHECK(sgemm() == 1.0f);
  REQUIRE(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS);
  CHECK(sgemm() == fine);
  const auto gemm_ex = [&](cublasComputeType_t compute) {
    REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 1, &one, a.data, CUDA_R_32F, 4, b.data, CUDA_R_32F, 1,
                         &zero, c.data, CUDA_R_32F, 4, compute, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    return to_host(c.data, 16)[5];
  };
  CHECK(gemm_ex(CUBLAS_COMPUTE_32F_FAST_TF32) == 1.0f);
  CHECK(gemm_ex(CUBLAS_COMPUTE_32F_PEDANTIC) == fine);
  cublasDestroy(h);

  for (const bool tf32 : {false, true}) {
    LtCall lt(4, 4, 1, false, false, CUBLASLT_EPILOGUE_BIAS);
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDescDestroy(lt.desc);
    REQUIRE(cublasLtMatmulDescCreate(&lt.desc, compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
    DeviceBuffer<float> bias(4), d(16);
    to_device(bias.data, std::vector<float>(4, 0.0f));
    lt.pointers(bias.data, nullptr);
    cublasLtMatmulAlgo_t algo{};
    REQUIRE(lt.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(lt.matmul(algo, a.data, b.data, d.data) == CUBLAS_STATUS_SUCCESS);
    CHECK(to_host(d.data, 16)[5] == (tf32 ? 1.0f : fine));
  }

  for (const cudnnMathType_t math :
       {CUDNN_FMA_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION}) {
    INFO("cuDNN math type " << int(math));
    Conv g;
    g.n = 1, g.c = 1, g.h = 4, g.w = 4, g.k = 1, g.kh = 1, g.kw = 1, g.pad = 0, g.stride = 1;
    REQUIRE(cudnnSetTensor4dDescriptor(g.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 4, 4) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(g.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 4, 4) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(g.f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 1, 1, 1, 1) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(g.conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolutionMathType(g.conv, math) == CUDNN_STATUS_SUCCESS);
    // Every math type but FMA lets f32 run on tensor cores in TF32; TENSOR_OP is also what such an
    // algorithm reports, and what ember then sets on the descriptor it calls with.
    const bool tf32 = math != CUDNN_FMA_MATH;
    cudnnConvolutionFwdAlgoPerf_t perf[4];
    int found = 0;
    REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, g.f, g.conv, g.y, 4, &found, perf) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(perf[0].mathType == (tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    // The call runs under the reported type (the model refuses any other: sim_checks).
    REQUIRE(cudnnSetConvolutionMathType(g.conv, perf[0].mathType) == CUDNN_STATUS_SUCCESS);
    DeviceBuffer<float> y(16);
    REQUIRE(cudnnConvolutionForward(g.handle, &one, g.x, a.data, g.f, b.data, g.conv,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, g.y,
                                    y.data) == CUDNN_STATUS_SUCCESS);
    CHECK(to_host(y.data, 16)[5] == (tf32 ? 1.0f : fine));
  }
}

namespace {
// 16-bit values for cuBLASLt: their bits, and the f32 each widens to.
std::vector<std::uint16_t> narrow_all(const std::vector<float>& v, cudaDataType type, std::vector<float>& exact) {
  std::vector<std::uint16_t> bits(v.size());
  exact.resize(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    bits[i] = narrow(v[i], type == CUDA_R_16BF ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF, exact[i]);
  return bits;
}
std::vector<float> widen_all(const std::vector<std::uint16_t>& bits, cudaDataType type) {
  std::vector<float> out;
  for (std::uint16_t b : bits) out.push_back(widen(b, type == CUDA_R_16BF ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF));
  return out;
}
}  // namespace

TEST_CASE("cuBLASLt in bf16 and f16: RELU_AUX_BIAS, DRELU_BGRAD and BGRADB round f32 sums once to D's type") {
  const int m = 37, n = 20, k = 45;
  for (const cudaDataType type : {CUDA_R_16BF, CUDA_R_16F}) {
    INFO((type == CUDA_R_16BF ? "bf16" : "f16"));
    const int ulp_bits = type == CUDA_R_16BF ? -8 : -11;
    std::vector<float> A, B, bias;
    const auto a_bits = narrow_all(random_values(m * k, 41), type, A);
    const auto b_bits = narrow_all(random_values(k * n, 42), type, B);
    const auto bias_bits = narrow_all(random_values(m, 43), type, bias);
    DeviceBuffer<std::uint16_t> dA(A.size()), dB(B.size()), dD(m * n), dbias(m), dgrad(n);
    DeviceBuffer<std::uint8_t> mask(128 / 8 * n);
    to_device(dA.data, a_bits);
    to_device(dB.data, b_bits);
    to_device(dbias.data, bias_bits);
    // Exact sums in double; the model's f32 sums are within k·2⁻²⁴·Σ|terms|, then one rounding.
    const auto product = [&](int i, int j, double& magnitude) {
      double sum = 0;
      magnitude = 0;
      for (int p = 0; p < k; ++p) {
        sum += double(at(A, m, i, p)) * at(B, k, p, j);
        magnitude += std::fabs(double(at(A, m, i, p)) * at(B, k, p, j));
      }
      return sum;
    };
    const auto near = [&](float got, double want, double magnitude) {
      return std::fabs(got - want) <= k * std::ldexp(magnitude, -24) + std::ldexp(std::fabs(want), ulp_bits);
    };
    std::vector<float> forward;
    {
      LtCall call(m, n, k, false, false, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, 0, type, type);
      call.pointers(dbias.data, mask.data);
      cublasLtMatmulAlgo_t algo;
      REQUIRE(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(call.matmul(algo, dA.data, dB.data, dD.data) == CUBLAS_STATUS_SUCCESS);
      forward = widen_all(to_host(dD.data, m * n), type);
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          double magnitude = 0;
          const double z = product(i, j, magnitude) + bias[i];
          REQUIRE(near(at(forward, m, i, j), std::max(0.0, z), magnitude + std::fabs(bias[i])));
        }
    }
    {
      LtCall call(m, n, k, false, false, CUBLASLT_EPILOGUE_DRELU_BGRAD, 0, type, type);
      call.pointers(dbias.data, mask.data);  // the bias pointer receives the gradient, in D's type
      cublasLtMatmulAlgo_t algo;
      REQUIRE(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(call.matmul(algo, dA.data, dB.data, dD.data) == CUBLAS_STATUS_SUCCESS);
      const auto D = widen_all(to_host(dD.data, m * n), type), grad = widen_all(to_host(dbias.data, m), type);
      for (int i = 0; i < m; ++i) {
        double row = 0, row_magnitude = 0;
        for (int j = 0; j < n; ++j) {
          double magnitude = 0;
          const double want = at(forward, m, i, j) > 0.0f ? product(i, j, magnitude) : 0.0;
          REQUIRE(near(at(D, m, i, j), want, magnitude));
          row += want;
          row_magnitude += magnitude;
        }
        REQUIRE(near(grad[i], row, row_magnitude * n));
      }
    }
    {
      // BGRADB with D in f32: the weight gradient's GEMM (16-bit operands, f32 result).
      LtCall call(m, n, k, false, false, CUBLASLT_EPILOGUE_BGRADB, 0, type, CUDA_R_32F);
      DeviceBuffer<float> dD32(m * n), dgrad32(n);
      call.pointers(dgrad32.data, nullptr);
      cublasLtMatmulAlgo_t algo;
      REQUIRE(call.heuristic(algo) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(call.matmul(algo, dA.data, dB.data, dD32.data) == CUBLAS_STATUS_SUCCESS);
      const auto D = to_host(dD32.data, m * n), grad = to_host(dgrad32.data, n);
      for (int j = 0; j < n; ++j) {
        double col = 0;
        for (int p = 0; p < k; ++p) col += at(B, k, p, j);
        REQUIRE(grad[j] == Approx(col).margin(1e-4));
        for (int i = 0; i < m; ++i) {
          double magnitude = 0;
          const double want = product(i, j, magnitude);
          REQUIRE(std::fabs(at(D, m, i, j) - want) <= k * std::ldexp(magnitude, -24) + 1e-30);
        }
      }
    }
  }
}

TEST_CASE("cuBLASLt refuses unlisted type combinations, and 16-bit operands need only 2-byte alignment") {
  DeviceBuffer<std::uint16_t> bias(64);
  const auto heuristic = [&](cudaDataType a, cudaDataType b, cudaDataType d, cublasComputeType_t compute) {
    LtCall call(8, 8, 8, false, false, CUBLASLT_EPILOGUE_BIAS, 0, a, d);
    cublasLtMatrixLayoutDestroy(call.b);
    cublasLtMatrixLayoutCreate(&call.b, b, 8, 8, 8);
    cublasLtMatmulDescDestroy(call.desc);
    REQUIRE(cublasLtMatmulDescCreate(&call.desc, compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
    call.pointers(bias.data, nullptr);
    cublasLtMatmulAlgo_t algo;
    return call.heuristic(algo);
  };
  CHECK(heuristic(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS);
  CHECK(heuristic(CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS);
  CHECK(heuristic(CUDA_R_16BF, CUDA_R_16F, CUDA_R_16BF, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_SUPPORTED);  // A ≠ B
  CHECK(heuristic(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_NOT_SUPPORTED);  // D f16
  CHECK(heuristic(CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F) ==
        CUBLAS_STATUS_NOT_SUPPORTED);  // f32 → bf16
  CHECK(heuristic(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F_FAST_TF32) == CUBLAS_STATUS_NOT_SUPPORTED);
  // Told 2-byte alignment: enough for 16-bit operands, not for f32 ones.
  for (const cudaDataType type : {CUDA_R_16BF, CUDA_R_32F}) {
    LtCall call(8, 8, 8, false, false, CUBLASLT_EPILOGUE_BIAS, 0, type, type);
    const std::uint32_t two = 2;
    cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &two, sizeof(two));
    call.pointers(bias.data, nullptr);
    cublasLtMatmulAlgo_t algo;
    CHECK(call.heuristic(algo) == (type == CUDA_R_32F ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS));
  }
}
