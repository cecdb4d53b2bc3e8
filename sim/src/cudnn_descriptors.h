// What the cuDNN model's two files share (cudnn.cpp: handles, descriptors, algorithm lists and
// workspace sizes; cudnn_convolutions.cpp: the three convolutions): the descriptors' structures,
// the algorithms the model offers, the geometry a call's descriptors give, and the live handles.
#pragma once
#include <cudnn.h>

#include <cstddef>

#include "convolution.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
  int device = 0;
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  bool set = false;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace ember_sim::cudnn_model {

struct AlgoInfo {
  int algo;
  bool deterministic;
  bool gemm_based;  // works in an im2col buffer: needs a workspace
};
// In the order the model's heuristics list them (ALGO_0 first where cuDNN documents it as
// non-deterministic, so that a caller must look at the flag).
inline constexpr AlgoInfo kForward[] = {{CUDNN_CONVOLUTION_FWD_ALGO_GEMM, true, true},
                                        {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, true, false}};
inline constexpr AlgoInfo kBackwardData[] = {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false, false},
                                             {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true, true}};
inline constexpr AlgoInfo kBackwardFilter[] = {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false, false},
                                               {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true, true}};

template <std::size_t N>
const AlgoInfo* find_algo(const AlgoInfo (&list)[N], int algo) {
  for (const AlgoInfo& a : list)
    if (a.algo == algo) return &a;
  return nullptr;
}

// The geometry of one convolution from its descriptors, checked as cuDNN checks them (the
// comment of cudnn.cpp): CUDNN_STATUS_BAD_PARAM or CUDNN_STATUS_NOT_SUPPORTED, g unset.
cudnnStatus_t geometry(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                       const cudnnTensorStruct* y, Geometry& g);

// Whether h is a live handle (created and not destroyed): a call with any other is refused.
bool live(cudnnHandle_t h);

}  // namespace ember_sim::cudnn_model
