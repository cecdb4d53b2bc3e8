// cuDNN on the software GPU: the legacy convolution API ember calls (cuDNN 9's cudnn_cnn and
// cudnn_ops), written from the declarations and comments in the toolkit's cudnn headers.
// Descriptors are checked as cuDNN checks them (a filter whose channels differ from the input's, an
// output descriptor of the wrong size: CUDNN_STATUS_BAD_PARAM; what the model does not cover —
// another layout, data type, dilation, groups: CUDNN_STATUS_NOT_SUPPORTED), and the convolutions
// are computed by reference loops in stream order, their memory checked against the other streams.
//
// Data types: f32, and bf16 and f16 with f32 compute (PSEUDO_BFLOAT16/PSEUDO_HALF_CONFIG: x, w, y of
// one type; the values widened exactly, f32 sums, α·sum + β·y rounded once); anything else is
// CUDNN_STATUS_NOT_SUPPORTED. Math types: 16-bit algorithms run on tensor cores unless the
// descriptor says CUDNN_FMA_MATH; f32 ones under any other math type (DEFAULT, TENSOR_OP — what a
// TF32 algorithm reports as its perf.mathType — and …_ALLOW_CONVERSION) round their inputs to TF32
// (numerics.h), as cuDNN documents for Ampere and later (docs/simulator.md).
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "convolution.h"
#include "executor.h"
#include "numerics.h"
#include "runtime.h"
#include "state.h"

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

namespace {

using ember_sim::cudnn_model::Geometry;

bool is_16_bit(cudnnDataType_t type) { return type == CUDNN_DATA_BFLOAT16 || type == CUDNN_DATA_HALF; }

// Whether an f32 convolution's tensor-core algorithms may round its inputs to TF32 (the file comment).
bool allows_tf32(cudnnMathType_t math) { return math != CUDNN_FMA_MATH; }

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

ember_sim::Format format_of(cudnnDataType_t type) {
  return type == CUDNN_DATA_BFLOAT16 ? ember_sim::Format::bf16
                                     : (type == CUDNN_DATA_HALF ? ember_sim::Format::f16 : ember_sim::Format::f32);
}

// The n values of a tensor as f32: 16-bit ones widen exactly, f32 ones are rounded to TF32 where
// the algorithm does (numerics.h).
std::vector<float> widened(const void* data, std::size_t n, const Geometry& g) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = ember_sim::load(data, i, format_of(g.type));
    out[i] = g.tf32 ? ember_sim::tf32_round(v) : v;
  }
  return out;
}

// out = alpha·sums + beta·out in f32 (out is not read when beta is 0), rounded once to the data type.
void finish(void* out, const std::vector<float>& sums, float alpha, float beta, const Geometry& g) {
  for (std::size_t i = 0; i < sums.size(); ++i) {
    const float prior = beta != 0.0f ? beta * ember_sim::load(out, i, format_of(g.type)) : 0.0f;
    ember_sim::store(out, i, format_of(g.type), alpha * sums[i] + prior);
  }
}

// The images in order, or — for a non-deterministic algorithm — in a fresh random order per call,
// so that sums over the batch (a weight gradient) come out in other last bits from run to run.
std::vector<int> image_order(const Geometry& g, bool shuffled) {
  std::vector<int> order(static_cast<std::size_t>(g.n));
  std::iota(order.begin(), order.end(), 0);
  if (shuffled) {
    static std::mutex rng_mutex;
    static std::mt19937_64 rng(ember_sim::rt::config().seed ^ 0x63756e6eULL);
    std::lock_guard<std::mutex> lock(rng_mutex);
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

struct AlgoInfo {
  int algo;
  bool deterministic;
  bool gemm_based;  // works in an im2col buffer: needs a workspace
};
// In the order the model's heuristics list them (ALGO_0 first where cuDNN documents it as
// non-deterministic, so that a caller must look at the flag).
constexpr AlgoInfo kForward[] = {{CUDNN_CONVOLUTION_FWD_ALGO_GEMM, true, true},
                                 {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, true, false}};
constexpr AlgoInfo kBackwardData[] = {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false, false},
                                      {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true, true}};
constexpr AlgoInfo kBackwardFilter[] = {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false, false},
                                        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true, true}};

template <std::size_t N>
const AlgoInfo* find_algo(const AlgoInfo (&list)[N], int algo) {
  for (const AlgoInfo& a : list)
    if (a.algo == algo) return &a;
  return nullptr;
}

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
bool live(cudnnHandle_t h) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  return live_handles().count(h) != 0;
}

// Checks the workspace an algorithm needs, and enqueues `work` on the handle's stream with its
// memory accesses (the workspace written).
cudnnStatus_t run(cudnnHandle_t h, const AlgoInfo* algo, const Geometry& g, void* workspace, std::size_t bytes,
                  std::vector<ember_sim::rt::Access> accesses, std::function<void()> work, const char* call) {
  if (!algo) return CUDNN_STATUS_BAD_PARAM;
  const std::size_t need = algo->gemm_based ? g.columns_bytes() : 0;
  if (need > 0 && (!workspace || bytes < need)) return CUDNN_STATUS_BAD_PARAM;
  if (need > 0) accesses.push_back({workspace, need, true, std::string("the workspace of ") + call});
  if (h->device != ember_sim::rt::current_device())
    ember_sim::fail(std::string(call) + ": the cuDNN handle belongs to cuda:" + std::to_string(h->device));
  const cudaError_t e = ember_sim::rt::enqueue_work(h->stream, call, std::move(accesses), std::move(work));
  return e == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
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

namespace {
// Stricter than cuDNN: a convolution runs under the math type its algorithm reported
// (perf.mathType), on a descriptor set to it, as PyTorch's Conv_v7.cpp does — the type asked for
// (CUDNN_DEFAULT_MATH, say) is not the one the algorithm was chosen under.
void require_reported_math(const cudnnConvolutionStruct* conv, const Geometry& g, const char* call) {
  if (conv->math == g.math) return;
  ember_sim::fail(std::string(call) + ": the convolution descriptor's math type is " +
                  std::to_string(static_cast<int>(conv->math)) + " but the algorithm reports " +
                  std::to_string(static_cast<int>(g.math)) +
                  " (perf.mathType): set the reported type on the descriptor the call runs with");
}
}  // namespace

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                      const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                      const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, size_t bytes, const void* beta, const cudnnTensorDescriptor_t yd,
                                      void* y) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta || !x || !w || !y) return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(xd, wd, conv, yd, g); st != CUDNN_STATUS_SUCCESS) return st;
  require_reported_math(conv, g, "cudnnConvolutionForward");
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  std::vector<ember_sim::rt::Access> accesses{{x, g.x_bytes(), false, "x of cudnnConvolutionForward"},
                                              {w, g.w_bytes(), false, "w of cudnnConvolutionForward"},
                                              {y, g.y_bytes(), true, "y of cudnnConvolutionForward"}};
  return run(
      h, find_algo(kForward, algo), g, workspace, bytes, std::move(accesses),
      [=] {
        const std::vector<float> xs = widened(x, g.x_count(), g), ws = widened(w, g.w_count(), g);
        finish(y, ember_sim::cudnn_model::forward_sums(g, xs, ws), a, b, g);
      },
      "cudnnConvolutionForward");
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha, const cudnnFilterDescriptor_t wd,
                                           const void* w, const cudnnTensorDescriptor_t dyd, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void* workspace, size_t bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta || !w || !dy || !dx) return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(dxd, wd, conv, dyd, g); st != CUDNN_STATUS_SUCCESS) return st;
  require_reported_math(conv, g, "cudnnConvolutionBackwardData");
  const AlgoInfo* info = find_algo(kBackwardData, algo);
  const bool shuffled = info && !info->deterministic;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  std::vector<ember_sim::rt::Access> accesses{{w, g.w_bytes(), false, "w of cudnnConvolutionBackwardData"},
                                              {dy, g.y_bytes(), false, "dy of cudnnConvolutionBackwardData"},
                                              {dx, g.x_bytes(), true, "dx of cudnnConvolutionBackwardData"}};
  return run(
      h, info, g, workspace, bytes, std::move(accesses),
      [=] {
        const std::vector<float> ws = widened(w, g.w_count(), g), dys = widened(dy, g.y_count(), g);
        finish(dx, ember_sim::cudnn_model::input_gradient_sums(g, image_order(g, shuffled), ws, dys), a, b, g);
      },
      "cudnnConvolutionBackwardData");
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                             const void* x, const cudnnTensorDescriptor_t dyd, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace, size_t bytes,
                                             const void* beta, const cudnnFilterDescriptor_t dwd, void* dw) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta || !x || !dy || !dw) return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(xd, dwd, conv, dyd, g); st != CUDNN_STATUS_SUCCESS) return st;
  require_reported_math(conv, g, "cudnnConvolutionBackwardFilter");
  const AlgoInfo* info = find_algo(kBackwardFilter, algo);
  const bool shuffled = info && !info->deterministic;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  std::vector<ember_sim::rt::Access> accesses{{x, g.x_bytes(), false, "x of cudnnConvolutionBackwardFilter"},
                                              {dy, g.y_bytes(), false, "dy of cudnnConvolutionBackwardFilter"},
                                              {dw, g.w_bytes(), true, "dw of cudnnConvolutionBackwardFilter"}};
  return run(
      h, info, g, workspace, bytes, std::move(accesses),
      [=] {
        const std::vector<float> xs = widened(x, g.x_count(), g), dys = widened(dy, g.y_count(), g);
        finish(dw, ember_sim::cudnn_model::weight_gradient_sums(g, image_order(g, shuffled), xs, dys), a, b, g);
      },
      "cudnnConvolutionBackwardFilter");
}

}  // extern "C"
