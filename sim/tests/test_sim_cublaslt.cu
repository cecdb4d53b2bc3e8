// The software GPU's cuBLASLt model against naive formulas of its own, and the checks it makes on
// wrong calls: each epilogue ember uses, in f32 and in bf16 and f16, a bad leading dimension, an
// epilogue pointer less aligned than its algorithm was chosen for, a ReLU mask read directly, a
// heuristic told to offer nothing, the split-K algorithm's workspace and the type combinations it
// refuses. Independent of how ember uses it.
#include <catch2/catch.hpp>

#include <cublasLt.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "copies.cuh"
#include "launch_raw.cuh"
#include "library_calls.cuh"

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
