// TF32 in the software GPU's library models: cuBLAS's math mode, cuBLASLt's compute type and
// cuDNN's math types round f32 inputs to TF32, and the f32-exact settings do not.
#include <catch2/catch.hpp>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <vector>

#include "copies.cuh"
#include "launch_raw.cuh"
#include "library_calls.cuh"

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
