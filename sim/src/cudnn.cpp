// cuDNN on the software GPU: the legacy convolution API ember calls (cuDNN 9's cudnn_cnn and
// cudnn_ops), written from the declarations and comments in the toolkit's cudnn headers.
// Descriptors are checked as cuDNN checks them (a filter whose channels differ from the input's, an
// output descriptor of the wrong size: CUDNN_STATUS_BAD_PARAM; what the model does not cover —
// another layout, data type, dilation, groups: CUDNN_STATUS_NOT_SUPPORTED), and the convolutions
// are computed by reference loops in stream order, their memory checked against the other streams.
// This file: the handles, descriptors, algorithm lists and workspace sizes; the three convolutions
// are in cudnn_convolutions.cpp, their reference loops in convolution.cpp.
//
// Data types: f32, and bf16 and f16 with f32 compute (PSEUDO_BFLOAT16/PSEUDO_HALF_CONFIG: x, w, y of
// one type; the values widened exactly, f32 sums, α·sum + β·y rounded once); anything else is
// CUDNN_STATUS_NOT_SUPPORTED. Math types: 16-bit algorithms run on tensor cores unless the
// descriptor says CUDNN_FMA_MATH; f32 ones under any other math type (DEFAULT, TENSOR_OP — what a
// TF32 algorithm reports as its perf.mathType — and …_ALLOW_CONVERSION) round their inputs to TF32
// (numerics.h), as cuDNN documents for Ampere and later (docs/simulator.md).
#include <cudnn.h>

#include <cstddef>
#include <mutex>
#include <set>

#include "convolution.h"
#include "cudnn_descriptors.h"
#include "runtime.h"

using namespace ember_sim::cudnn_model;

namespace {

bool is_16_bit(cudnnDataType_t type) { return type == CUDNN_DATA_BFLOAT16 || type == CUDNN_DATA_HALF; }

// Whether an f32 convolution's tensor-core algorithms may round its inputs to TF32 (the file comment).
bool allows_tf32(cudnnMathType_t math) { return math != CUDNN_FMA_MATH; }

template <class Perf, class Algo, std::size_t N>
void list_algorithms(const AlgoInfo (&list)[N], const Geometry& g, int requested, int* returned, Perf* results) {
  *returned = 0;
  for (std::size_t i = 0; i < N && *returned < requested; ++i) {
    Perf p{};
    p.algo = static_cast<Algo>(list[i].algo);
    p.status = CUDNN_STATUS_SUCCESS;
    p.time = -1.0f;  // a heuristic's answer, not a measurement
    p.memory = list[i].gemm_based ? g.columns_bytes() : 0;
    p.determinism = list[i].deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    p.mathType = g.math;
    results[(*returned)++] = p;
  }
}

// Every live handle: a call with any other is refused (and the handles a program keeps until it
// exits, as ember does, stay reachable: not a leak).
std::mutex handles_mutex;
std::set<cudnnHandle_t>& live_handles() {
  static auto* handles = new std::set<cudnnHandle_t>;
  return *handles;
}

template <class Descriptor>
cudnnStatus_t create(Descriptor** d) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  *d = new Descriptor{};
  return CUDNN_STATUS_SUCCESS;
}
template <class Descriptor>
cudnnStatus_t destroy(Descriptor* d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

namespace ember_sim::cudnn_model {

cudnnStatus_t geometry(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                       const cudnnTensorStruct* y, Geometry& g) {
  if (!x || !w || !conv || !y || !x->set || !w->set || !conv->set || !y->set) return CUDNN_STATUS_BAD_PARAM;
  const cudnnDataType_t type = x->type;
  if ((type != CUDNN_DATA_FLOAT && !is_16_bit(type)) || w->type != type || y->type != type ||
      conv->compute != CUDNN_DATA_FLOAT)
    return CUDNN_STATUS_NOT_SUPPORTED;
  if (w->c != x->c || y->n != x->n || y->c != w->k) return CUDNN_STATUS_BAD_PARAM;
  const int oh = (x->h + 2 * conv->pad_h - w->h) / conv->stride_h + 1;
  const int ow = (x->w + 2 * conv->pad_w - w->w) / conv->stride_w + 1;
  if (oh <= 0 || ow <= 0 || y->h != oh || y->w != ow) return CUDNN_STATUS_BAD_PARAM;
  const bool tensor_ops = is_16_bit(type) ? conv->math != CUDNN_FMA_MATH : allows_tf32(conv->math);
  g = {x->n,
       x->c,
       x->h,
       x->w,
       w->k,
       w->h,
       w->w,
       oh,
       ow,
       conv->pad_h,
       conv->pad_w,
       conv->stride_h,
       conv->stride_w,
       conv->mode == CUDNN_CONVOLUTION,
       type,
       tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH,
       tensor_ops && type == CUDNN_DATA_FLOAT};
  return CUDNN_STATUS_SUCCESS;
}

bool live(cudnnHandle_t h) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  return live_handles().count(h) != 0;
}

}  // namespace ember_sim::cudnn_model

extern "C" {

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED (by the software GPU's cuDNN model)";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED";
    default:
      return "CUDNN_STATUS_INTERNAL_ERROR";
  }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  *handle = new cudnnContext{nullptr, ember_sim::rt::current_device()};
  std::lock_guard<std::mutex> lock(handles_mutex);
  live_handles().insert(*handle);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  {
    std::lock_guard<std::mutex> lock(handles_mutex);
    if (!live_handles().erase(handle)) return CUDNN_STATUS_BAD_PARAM;
  }
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!live(handle)) return CUDNN_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { return create(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format, cudnnDataType_t type,
                                         int n, int c, int h, int w) {
  if (!d || n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED;
  *d = {true, type, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { return create(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  if (!d || k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED;
  *d = {true, type, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) { return create(d); }
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (!d || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  if (dilation_h != 1 || dilation_w != 1) return CUDNN_STATUS_NOT_SUPPORTED;
  d->set = true;
  d->compute = compute;
  d->pad_h = pad_h;
  d->pad_w = pad_w;
  d->stride_h = u;
  d->stride_w = v;
  d->mode = mode;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  d->math = math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  if (!returned || !results || requested < 1) return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(x, w, conv, y, g); st != CUDNN_STATUS_SUCCESS) return st;
  list_algorithms<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(kForward, g, requested, returned, results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  if (!returned || !results || requested < 1) return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(dx, w, conv, dy, g); st != CUDNN_STATUS_SUCCESS) return st;
  list_algorithms<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(kBackwardData, g, requested,
                                                                                    returned, results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  if (!returned || !results || requested < 1) return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(x, dw, conv, dy, g); st != CUDNN_STATUS_SUCCESS) return st;
  list_algorithms<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(kBackwardFilter, g, requested,
                                                                                        returned, results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t conv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* bytes) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(x, w, conv, y, g); st != CUDNN_STATUS_SUCCESS) return st;
  const AlgoInfo* a = find_algo(kForward, algo);
  if (!a || !bytes) return a ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = a->gemm_based ? g.columns_bytes() : 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t conv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(dx, w, conv, dy, g); st != CUDNN_STATUS_SUCCESS) return st;
  const AlgoInfo* a = find_algo(kBackwardData, algo);
  if (!a || !bytes) return a ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = a->gemm_based ? g.columns_bytes() : 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t conv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(x, dw, conv, dy, g); st != CUDNN_STATUS_SUCCESS) return st;
  const AlgoInfo* a = find_algo(kBackwardFilter, algo);
  if (!a || !bytes) return a ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = a->gemm_based ? g.columns_bytes() : 0;
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
