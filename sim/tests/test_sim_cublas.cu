// The software GPU's cuBLAS model against naive formulas of its own, and the checks it makes on
// wrong calls: a leading dimension too small, the workspace rule, cublasSgemmStridedBatched as
// cublasSgemm per batch element, cublasGemmEx's bf16 and f16 and
// the type combinations it refuses (TF32 in all three libraries: test_sim_tf32.cu). Independent of
// how ember uses it.
#include <catch2/catch.hpp>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "copies.cuh"
#include "launch_raw.cuh"
#include "library_calls.cuh"

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

TEST_CASE("cublasSgemmStridedBatched is cublasSgemm per batch element, leaving the gaps between them untouched") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 3, n = 4, k = 5, batch = 3;
  const long long stride_a = m * k + 2, stride_b = k * n + 1, stride_c = m * n + 3;  // a gap after each matrix
  const auto a = random_values(static_cast<std::size_t>(stride_a * batch), 21);
  const auto b = random_values(static_cast<std::size_t>(stride_b * batch), 22);
  const auto c = random_values(static_cast<std::size_t>(stride_c * batch), 23);
  DeviceBuffer<float> da(a.size()), db(b.size()), batched(c.size()), one_by_one(c.size());
  to_device(da.data, a);
  to_device(db.data, b);
  to_device(batched.data, c);
  to_device(one_by_one.data, c);
  const float alpha = 0.75f, beta = 0.5f;
  REQUIRE(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da.data, k, stride_a, db.data, k,
                                    stride_b, &beta, batched.data, m, stride_c, batch) == CUBLAS_STATUS_SUCCESS);
  for (int i = 0; i < batch; ++i)
    REQUIRE(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da.data + i * stride_a, k, db.data + i * stride_b,
                        k, &beta, one_by_one.data + i * stride_c, m) == CUBLAS_STATUS_SUCCESS);
  const auto got = to_host(batched.data, c.size()), want = to_host(one_by_one.data, c.size());
  CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  for (int i = 0; i < batch; ++i)  // the gaps keep what they held
    for (long long x = m * n; x < stride_c; ++x)
      CHECK(std::memcmp(&got[static_cast<std::size_t>(i * stride_c + x)],
                        &c[static_cast<std::size_t>(i * stride_c + x)], sizeof(float)) == 0);
  CHECK(std::memcmp(got.data(), c.data(), sizeof(float)) != 0);  // and C itself was written
  CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da.data, m, stride_a, db.data, k,
                                  stride_b, &beta, batched.data, m, stride_c, -1) == CUBLAS_STATUS_INVALID_VALUE);
  cublasDestroy(h);
}
