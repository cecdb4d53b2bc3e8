// What the tests of the software GPU's library models share: random values, a column-major
// element, one cuBLASLt multiplication (LtCall) and one cuDNN convolution (Conv) set up as ember
// sets them up, and 16-bit values with the f32 each widens to.
#pragma once

#include <catch2/catch.hpp>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

inline std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Column-major element (r, c) of a matrix with leading dimension ld.
inline float at(const std::vector<float>& m, int ld, int r, int c) { return m[static_cast<std::size_t>(c) * ld + r]; }

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

// A value's 16-bit bits and the f32 it widens to, for CUDNN_DATA_BFLOAT16 or CUDNN_DATA_HALF.
inline std::uint16_t narrow(float v, cudnnDataType_t type, float& exact) {
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
inline float widen(std::uint16_t bits, cudnnDataType_t type) {
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
