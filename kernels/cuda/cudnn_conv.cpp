// Convolutions through cuDNN 9's legacy API (cudnnConvolutionForward and friends), which every
// cuDNN 9 release carries. Per thread and device: one handle, bound to the caller's stream at
// each call, and a cache of plans (descriptors and chosen algorithms) per geometry.
#include "base/config.h"
#include "base/error.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if EMBER_WITH_CUDNN
#include <cuda_runtime.h>
#include <cudnn.h>
#if CUDNN_MAJOR < 9
#error "ember needs cuDNN 9 or newer (found an older cudnn.h)"
#endif
#endif

namespace ember::kernels::cuda {
namespace {
std::atomic<bool> g_deterministic{false};
}  // namespace

void set_deterministic(bool on) { g_deterministic = on; }
bool deterministic() { return g_deterministic; }

#if EMBER_WITH_CUDNN

bool cudnn_available() { return true; }
int cudnn_version() { return static_cast<int>(cudnnGetVersion()); }

namespace {

// Everything cuDNN needs for one geometry, and its algorithm choices. The descriptors are host
// objects, released with the plan (when the thread's cache goes).
// Each direction has a convolution descriptor of its own, set to the math type its chosen
// algorithm reported (perf.mathType): a tensor-op algorithm run under a descriptor that says
// otherwise, or the reverse, is not the algorithm that was measured (PyTorch's Conv_v7.cpp does
// the same), and one shared descriptor would give every direction the last one's type.
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;  // for the queries: the math type asked for
  cudnnConvolutionDescriptor_t conv_fwd = nullptr, conv_data = nullptr, conv_filter = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  std::size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    for (cudnnConvolutionDescriptor_t d : {conv, conv_fwd, conv_data, conv_filter})
      if (d) cudnnDestroyConvolutionDescriptor(d);
  }
};

constexpr std::size_t kMaxWorkspace = std::size_t{1} << 30;

// Note [cuDNN math]: the math type asked for, and whether an algorithm on tensor cores may be taken.
// (Every call is f32 here: Note [16-bit convolutions on CUDA].)
cudnnMathType_t math_for(cudnnDataType_t) { return allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }
bool tensor_ops_allowed(cudnnDataType_t) { return allow_tf32(); }

bool acceptable(cudnnStatus_t status, cudnnDeterminism_t determinism, cudnnMathType_t math, std::size_t memory,
                cudnnDataType_t type) {
  const bool tensor_op = math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  return status == CUDNN_STATUS_SUCCESS && memory <= kMaxWorkspace &&
         (!deterministic() || determinism == CUDNN_DETERMINISTIC) && (!tensor_op || tensor_ops_allowed(type));
}

cudnnHandle_t handle_for_current_device() {
  thread_local std::map<int, cudnnHandle_t> handles;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  CUDNN_CHECK(cudnnCreate(&h));
  handles.emplace(device, h);  // kept for the thread's life: destroying at exit may outlive the context
  return h;
}

const Plan& plan_for(cudnnHandle_t h, const ConvGeometry& g, cudnnDataType_t type) {
  thread_local std::map<std::tuple<cudnnHandle_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t,
                                   std::size_t, std::size_t, std::size_t, std::size_t, bool, int, int>,
                        std::unique_ptr<Plan>>
      cache;
  const cudnnMathType_t math = math_for(type);
  const auto key = std::make_tuple(h, g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.stride, g.pad, deterministic(),
                                   static_cast<int>(type), static_cast<int>(math));
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  auto plan = std::make_unique<Plan>();  // cached only once complete: a failure below leaves nothing behind
  Plan& p = *plan;
  auto i = [](std::size_t v) { return static_cast<int>(v); };
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, type, i(g.n), i(g.c), i(g.h), i(g.w)));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, type, i(g.n), i(g.k), i(g.oh()), i(g.ow())));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, type, CUDNN_TENSOR_NCHW, i(g.k), i(g.c), i(g.kh), i(g.kw)));
  // f32 compute for every data type (the PSEUDO_* configurations for the 16-bit ones).
  const auto make_conv = [&](cudnnConvolutionDescriptor_t& d, cudnnMathType_t type) {
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, i(g.pad), i(g.pad), i(g.stride), i(g.stride), 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(d, type));
  };
  make_conv(p.conv, math);

  constexpr int kCandidates = 8;
  int found = 0;
  bool chosen = false;
  cudnnConvolutionFwdAlgoPerf_t fwd[kCandidates];
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y, kCandidates, &found, fwd));
  for (int k = 0; k < found && !chosen; ++k)
    if (acceptable(fwd[k].status, fwd[k].determinism, fwd[k].mathType, fwd[k].memory, type)) {
      p.fwd = fwd[k].algo;
      make_conv(p.conv_fwd, fwd[k].mathType);
      chosen = true;
    }
  EMBER_CHECK(chosen, CudaError, "cuDNN offers no usable forward algorithm for this convolution",
              deterministic() ? " in deterministic mode (EMBER_DETERMINISTIC=1)" : "");
  // The workspace is asked for under the math type the call will run with.
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv_fwd, p.y, p.fwd, &p.fwd_bytes));

  chosen = false;
  cudnnConvolutionBwdDataAlgoPerf_t data[kCandidates];
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv, p.x, kCandidates, &found, data));
  for (int k = 0; k < found && !chosen; ++k)
    if (acceptable(data[k].status, data[k].determinism, data[k].mathType, data[k].memory, type)) {
      p.bwd_data = data[k].algo;
      make_conv(p.conv_data, data[k].mathType);
      chosen = true;
    }
  EMBER_CHECK(chosen, CudaError, "cuDNN offers no usable backward-data algorithm for this convolution");
  CUDNN_CHECK(
      cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv_data, p.x, p.bwd_data, &p.bwd_data_bytes));

  chosen = false;
  cudnnConvolutionBwdFilterAlgoPerf_t filter[kCandidates];
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.conv, p.w, kCandidates, &found, filter));
  for (int k = 0; k < found && !chosen; ++k)
    if (acceptable(filter[k].status, filter[k].determinism, filter[k].mathType, filter[k].memory, type)) {
      p.bwd_filter = filter[k].algo;
      make_conv(p.conv_filter, filter[k].mathType);
      chosen = true;
    }
  EMBER_CHECK(chosen, CudaError, "cuDNN offers no usable backward-filter algorithm for this convolution",
              deterministic() ? " in deterministic mode (EMBER_DETERMINISTIC=1)" : "");
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv_filter, p.w, p.bwd_filter,
                                                             &p.bwd_filter_bytes));
  return *cache.emplace(key, std::move(plan)).first->second;
}

// A workspace from the stream-ordered pool: freed on the same stream, after the call that uses it.
class Workspace {
 public:
  Workspace(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes) CUDA_CHECK(cudaMallocAsync(&data_, bytes, stream));
  }
  ~Workspace() {
    if (data_) CUDA_CHECK_NOTHROW(cudaFreeAsync(data_, stream_));
  }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace

// Note [16-bit convolutions on CUDA]
// On an H200 (cuDNN 9.14), bf16 convolutions in the PSEUDO_BFLOAT16 configuration, with the channel
// bias added through β = 1, gave outputs outside one rounding of the f32 sum: 106 to 397 of 86,528
// at the CNN's conv2 shape (2×32×26×26 → 64), more than even an f32 accumulator that truncates
// would lose, and f16 15 of them. The ReLU masks that follow then differ from the CPU's, and so do
// the gradients. cuDNN's legacy API has no switch for f32 partial sums and a single rounding (as
// cuBLAS's CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION is), so a bf16 or f16 convolution runs
// cuDNN's f32 algorithms on widened copies and rounds each result once: Note [cuDNN math]'s
// promise kept, at f32 speed (no 16-bit tensor cores), until a path that keeps it is measured.
template <class T, class F32Call>
void in_f32(std::initializer_list<std::pair<const T*, std::size_t>> inputs, T* out, std::size_t out_count,
            bool out_is_input, cudaStream_t stream, F32Call call) {
  std::vector<std::unique_ptr<Workspace>> wide;
  std::vector<const float*> wide_inputs;
  for (const auto& [data, count] : inputs) {
    wide.push_back(std::make_unique<Workspace>(count * sizeof(float), stream));
    cast(data, static_cast<float*>(wide.back()->data()), count, stream);
    wide_inputs.push_back(static_cast<const float*>(wide.back()->data()));
  }
  Workspace wide_out(out_count * sizeof(float), stream);
  if (out_is_input) cast(static_cast<const T*>(out), static_cast<float*>(wide_out.data()), out_count, stream);
  call(wide_inputs, static_cast<float*>(wide_out.data()));
  cast(static_cast<const float*>(wide_out.data()), out, out_count, stream);
}

// α and β are floats (f32 compute).
template <class T>
void conv2d_forward(const T* x, const T* w, T* y, const ConvGeometry& g, cudaStream_t stream, bool accumulate) {
  const std::size_t y_count = g.n * g.k * g.oh() * g.ow();
  if (y_count == 0) return;
  if constexpr (!std::is_same_v<T, float>) {  // Note [16-bit convolutions on CUDA]
    in_f32<T>({{x, g.n * g.c * g.h * g.w}, {w, g.k * g.c * g.kh * g.kw}}, y, y_count, accumulate, stream,
              [&](const std::vector<const float*>& in, float* out) {
                conv2d_forward<float>(in[0], in[1], out, g, stream, accumulate);
              });
  } else {
    cudnnHandle_t h = handle_for_current_device();
    CUDNN_CHECK(cudnnSetStream(h, stream));
    const Plan& p = plan_for(h, g, CUDNN_DATA_FLOAT);
    Workspace ws(p.fwd_bytes, stream);
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUDNN_CHECK(
        cudnnConvolutionForward(h, &one, p.x, x, p.w, w, p.conv_fwd, p.fwd, ws.data(), p.fwd_bytes, &beta, p.y, y));
    count_library_call();
  }
}

template <class T>
void conv2d_backward_data(const T* dy, const T* w, T* dx, const ConvGeometry& g, cudaStream_t stream) {
  const std::size_t dx_count = g.n * g.c * g.h * g.w;
  if (dx_count == 0) return;
  if constexpr (!std::is_same_v<T, float>) {  // Note [16-bit convolutions on CUDA]
    in_f32<T>({{dy, g.n * g.k * g.oh() * g.ow()}, {w, g.k * g.c * g.kh * g.kw}}, dx, dx_count, false, stream,
              [&](const std::vector<const float*>& in, float* out) {
                conv2d_backward_data<float>(in[0], in[1], out, g, stream);
              });
  } else {
    cudnnHandle_t h = handle_for_current_device();
    CUDNN_CHECK(cudnnSetStream(h, stream));
    const Plan& p = plan_for(h, g, CUDNN_DATA_FLOAT);
    Workspace ws(p.bwd_data_bytes, stream);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, p.w, w, p.y, dy, p.conv_data, p.bwd_data, ws.data(),
                                             p.bwd_data_bytes, &zero, p.x, dx));
    count_library_call();
  }
}

template <class T>
void conv2d_backward_filter(const T* x, const T* dy, T* dw, const ConvGeometry& g, cudaStream_t stream) {
  const std::size_t dw_count = g.k * g.c * g.kh * g.kw;
  if (dw_count == 0) return;
  if constexpr (!std::is_same_v<T, float>) {  // Note [16-bit convolutions on CUDA]
    in_f32<T>({{x, g.n * g.c * g.h * g.w}, {dy, g.n * g.k * g.oh() * g.ow()}}, dw, dw_count, false, stream,
              [&](const std::vector<const float*>& in, float* out) {
                conv2d_backward_filter<float>(in[0], in[1], out, g, stream);
              });
  } else {
    cudnnHandle_t h = handle_for_current_device();
    CUDNN_CHECK(cudnnSetStream(h, stream));
    const Plan& p = plan_for(h, g, CUDNN_DATA_FLOAT);
    Workspace ws(p.bwd_filter_bytes, stream);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, p.x, x, p.y, dy, p.conv_filter, p.bwd_filter, ws.data(),
                                               p.bwd_filter_bytes, &zero, p.w, dw));
    count_library_call();
  }
}

#else  // built without cuDNN

bool cudnn_available() { return false; }
int cudnn_version() { return 0; }

namespace {
[[noreturn]] void no_cudnn() {
  throw NotImplementedError(
      "convolutions on CUDA need cuDNN, and this build of ember has none (install cuDNN 9 or "
      "point -DEMBER_CUDNN_ROOT at it and rebuild), or run the model on the CPU");
}
}  // namespace

template <class T>
void conv2d_forward(const T*, const T*, T*, const ConvGeometry&, cudaStream_t, bool) {
  no_cudnn();
}
template <class T>
void conv2d_backward_data(const T*, const T*, T*, const ConvGeometry&, cudaStream_t) {
  no_cudnn();
}
template <class T>
void conv2d_backward_filter(const T*, const T*, T*, const ConvGeometry&, cudaStream_t) {
  no_cudnn();
}

#endif

#define EMBER_INSTANTIATE_CUDNN_CONV(T)                                                             \
  template void conv2d_forward<T>(const T*, const T*, T*, const ConvGeometry&, cudaStream_t, bool); \
  template void conv2d_backward_data<T>(const T*, const T*, T*, const ConvGeometry&, cudaStream_t); \
  template void conv2d_backward_filter<T>(const T*, const T*, T*, const ConvGeometry&, cudaStream_t);
EMBER_INSTANTIATE_CUDNN_CONV(float)
EMBER_INSTANTIATE_CUDNN_CONV(bfloat16)
EMBER_INSTANTIATE_CUDNN_CONV(float16)
#undef EMBER_INSTANTIATE_CUDNN_CONV

}  // namespace ember::kernels::cuda

#if EMBER_WITH_CUDNN
namespace ember::detail {
void throw_cudnn_error(int status, const char* call, const char* file, int line) {
  throw CudaError(concat("cuDNN error: ", call, " failed at ", file, ":", line, ": ",
                         cudnnGetErrorString(static_cast<cudnnStatus_t>(status))));
}
}  // namespace ember::detail
#endif
