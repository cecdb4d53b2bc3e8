// cuDNN on the software GPU: the legacy convolution API ember calls (cuDNN 9's cudnn_cnn and
// cudnn_ops), written from the declarations and comments in the toolkit's cudnn headers.
// Descriptors are checked as cuDNN checks them (a filter whose channels differ from the input's, an
// output descriptor of the wrong size: CUDNN_STATUS_BAD_PARAM; what the model does not cover —
// another layout, data type, dilation, groups: CUDNN_STATUS_NOT_SUPPORTED), and the convolutions
// are computed by reference loops in stream order, their memory checked against the other streams.
//
// The algorithm lists follow cuDNN's own notes on determinism: backward-data and backward-filter
// ALGO_0 are non-deterministic, and here they are offered first and really are — each call adds
// the batch's images in a freshly shuffled order, so a sum over the batch (every weight gradient)
// differs in its last bits from run to run — so a caller that asked for deterministic results and
// took ALGO_0 anyway is caught by comparing two runs. (Backward data sums over no images, so its
// ALGO_0 is non-deterministic in name only here.) Every algorithm that needs a workspace refuses to run without one of
// its size (CUDNN_STATUS_BAD_PARAM), and the workspace is written, so it is checked like any memory.
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

#include "executor.h"
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
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

// The geometry of one convolution, from its descriptors.
struct Geometry {
  int n, c, h, w, k, kh, kw, oh, ow, pad_h, pad_w, stride_h, stride_w;
  bool flip;  // CUDNN_CONVOLUTION (the kernel flipped) rather than cross-correlation
  std::size_t x_bytes() const { return std::size_t(n) * c * h * w * sizeof(float); }
  std::size_t w_bytes() const { return std::size_t(k) * c * kh * kw * sizeof(float); }
  std::size_t y_bytes() const { return std::size_t(n) * k * oh * ow * sizeof(float); }
  // The im2col buffer a GEMM-based algorithm works in: one image's columns.
  std::size_t columns_bytes() const { return std::size_t(c) * kh * kw * oh * ow * sizeof(float); }
};

cudnnStatus_t geometry(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                       const cudnnTensorStruct* y, Geometry& g) {
  if (!x || !w || !conv || !y || !x->set || !w->set || !conv->set || !y->set) return CUDNN_STATUS_BAD_PARAM;
  if (x->type != CUDNN_DATA_FLOAT || w->type != CUDNN_DATA_FLOAT || y->type != CUDNN_DATA_FLOAT)
    return CUDNN_STATUS_NOT_SUPPORTED;
  if (w->c != x->c || y->n != x->n || y->c != w->k) return CUDNN_STATUS_BAD_PARAM;
  const int oh = (x->h + 2 * conv->pad_h - w->h) / conv->stride_h + 1;
  const int ow = (x->w + 2 * conv->pad_w - w->w) / conv->stride_w + 1;
  if (oh <= 0 || ow <= 0 || y->h != oh || y->w != ow) return CUDNN_STATUS_BAD_PARAM;
  g = {x->n, x->c, x->h,        x->w,        w->k,           w->h,           w->w,
       oh,   ow,   conv->pad_h, conv->pad_w, conv->stride_h, conv->stride_w, conv->mode == CUDNN_CONVOLUTION};
  return CUDNN_STATUS_SUCCESS;
}

// Each (output, input, weight) index triple of the convolution, image by image in `images`' order.
template <class Visit>
void for_each_tap(const Geometry& g, const std::vector<int>& images, Visit visit) {
  for (int b : images)
    for (int f = 0; f < g.k; ++f)
      for (int oy = 0; oy < g.oh; ++oy)
        for (int ox = 0; ox < g.ow; ++ox)
          for (int ch = 0; ch < g.c; ++ch)
            for (int ky = 0; ky < g.kh; ++ky)
              for (int kx = 0; kx < g.kw; ++kx) {
                const int iy = oy * g.stride_h - g.pad_h + ky, ix = ox * g.stride_w - g.pad_w + kx;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                const int wy = g.flip ? g.kh - 1 - ky : ky, wx = g.flip ? g.kw - 1 - kx : kx;
                const std::size_t y_index = ((std::size_t(b) * g.k + f) * g.oh + oy) * g.ow + ox;
                const std::size_t x_index = ((std::size_t(b) * g.c + ch) * g.h + iy) * g.w + ix;
                const std::size_t w_index = ((std::size_t(f) * g.c + ch) * g.kh + wy) * g.kw + wx;
                visit(y_index, x_index, w_index);
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

// out = alpha·sums + beta·out (out is not read when beta is 0).
void finish(float* out, const std::vector<float>& sums, float alpha, float beta) {
  for (std::size_t i = 0; i < sums.size(); ++i) out[i] = alpha * sums[i] + (beta != 0.0f ? beta * out[i] : 0.0f);
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
void list_algorithms(const AlgoInfo (&list)[N], const Geometry& g, cudnnMathType_t math, int requested, int* returned,
                     Perf* results) {
  *returned = 0;
  for (std::size_t i = 0; i < N && *returned < requested; ++i) {
    Perf p{};
    p.algo = static_cast<Algo>(list[i].algo);
    p.status = CUDNN_STATUS_SUCCESS;
    p.time = -1.0f;  // a heuristic's answer, not a measurement
    p.memory = list[i].gemm_based ? g.columns_bytes() : 0;
    p.determinism = list[i].deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    p.mathType = math == CUDNN_DEFAULT_MATH ? CUDNN_FMA_MATH : math;
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
  if (dilation_h != 1 || dilation_w != 1 || compute != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
  d->set = true;
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
  list_algorithms<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(kForward, g, conv->math, requested,
                                                                            returned, results);
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
  list_algorithms<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(kBackwardData, g, conv->math,
                                                                                    requested, returned, results);
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
  list_algorithms<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(kBackwardFilter, g, conv->math,
                                                                                        requested, returned, results);
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

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                      const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                      const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, size_t bytes, const void* beta, const cudnnTensorDescriptor_t yd,
                                      void* y) {
  if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta || !x || !w || !y) return CUDNN_STATUS_BAD_PARAM;
  Geometry g{};
  if (const cudnnStatus_t st = geometry(xd, wd, conv, yd, g); st != CUDNN_STATUS_SUCCESS) return st;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const auto* xs = static_cast<const float*>(x);
  const auto* ws = static_cast<const float*>(w);
  auto* ys = static_cast<float*>(y);
  std::vector<ember_sim::rt::Access> accesses{{x, g.x_bytes(), false, "x of cudnnConvolutionForward"},
                                              {w, g.w_bytes(), false, "w of cudnnConvolutionForward"},
                                              {y, g.y_bytes(), true, "y of cudnnConvolutionForward"}};
  return run(
      h, find_algo(kForward, algo), g, workspace, bytes, std::move(accesses),
      [=] {
        std::vector<float> sums(g.y_bytes() / sizeof(float), 0.0f);
        for_each_tap(g, image_order(g, false),
                     [&](std::size_t yi, std::size_t xi, std::size_t wi) { sums[yi] += xs[xi] * ws[wi]; });
        finish(ys, sums, a, b);
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
  const AlgoInfo* info = find_algo(kBackwardData, algo);
  const bool shuffled = info && !info->deterministic;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const auto* ws = static_cast<const float*>(w);
  const auto* dys = static_cast<const float*>(dy);
  auto* dxs = static_cast<float*>(dx);
  std::vector<ember_sim::rt::Access> accesses{{w, g.w_bytes(), false, "w of cudnnConvolutionBackwardData"},
                                              {dy, g.y_bytes(), false, "dy of cudnnConvolutionBackwardData"},
                                              {dx, g.x_bytes(), true, "dx of cudnnConvolutionBackwardData"}};
  return run(
      h, info, g, workspace, bytes, std::move(accesses),
      [=] {
        std::vector<float> sums(g.x_bytes() / sizeof(float), 0.0f);
        for_each_tap(g, image_order(g, shuffled),
                     [&](std::size_t yi, std::size_t xi, std::size_t wi) { sums[xi] += dys[yi] * ws[wi]; });
        finish(dxs, sums, a, b);
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
  const AlgoInfo* info = find_algo(kBackwardFilter, algo);
  const bool shuffled = info && !info->deterministic;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const auto* xs = static_cast<const float*>(x);
  const auto* dys = static_cast<const float*>(dy);
  auto* dws = static_cast<float*>(dw);
  std::vector<ember_sim::rt::Access> accesses{{x, g.x_bytes(), false, "x of cudnnConvolutionBackwardFilter"},
                                              {dy, g.y_bytes(), false, "dy of cudnnConvolutionBackwardFilter"},
                                              {dw, g.w_bytes(), true, "dw of cudnnConvolutionBackwardFilter"}};
  return run(
      h, info, g, workspace, bytes, std::move(accesses),
      [=] {
        std::vector<float> sums(g.w_bytes() / sizeof(float), 0.0f);
        for_each_tap(g, image_order(g, shuffled),
                     [&](std::size_t yi, std::size_t xi, std::size_t wi) { sums[wi] += dys[yi] * xs[xi]; });
        finish(dws, sums, a, b);
      },
      "cudnnConvolutionBackwardFilter");
}

}  // extern "C"
