// cuDNN on the software GPU: the three convolutions (cudnnConvolutionForward, …BackwardData,
// …BackwardFilter), each checked against its descriptors, its algorithm's workspace and reported
// math type, its inputs read as f32 and its sums (convolution.cpp) rounded once into the data
// type, run in stream order on the handle's stream. The model's rules: cudnn.cpp's comment.
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "convolution.h"
#include "cudnn_descriptors.h"
#include "executor.h"
#include "numerics.h"
#include "runtime.h"
#include "state.h"

using namespace ember_sim::cudnn_model;

namespace {

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

extern "C" {

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
