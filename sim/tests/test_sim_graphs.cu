// CUDA graphs on the software GPU: stream capture records kernels, copies, memsets and
// stream-ordered allocations as nodes of their kinds instead of running them; a replay runs them
// again, each time; calls CUDA refuses during capture are refused with its error codes and
// invalidate the capture; and a library call that allocates inside a capture (cuBLAS without a
// workspace of its own) shows as a memory-allocation node.
#include <catch2/catch.hpp>

#include <cublas_v2.h>

#include <map>
#include <thread>
#include <vector>

#include "launch_raw.cuh"

namespace {

__global__ void add_one(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

std::map<cudaGraphNodeType, int> node_kinds(cudaGraph_t graph) {
  std::size_t count = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &count) == cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  if (count) REQUIRE(cudaGraphGetNodes(graph, nodes.data(), &count) == cudaSuccess);
  std::map<cudaGraphNodeType, int> kinds;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    REQUIRE(cudaGraphNodeGetType(node, &type) == cudaSuccess);
    ++kinds[type];
  }
  return kinds;
}

struct CapturedStream {
  cudaStream_t stream = nullptr;
  CapturedStream() { REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess); }
  ~CapturedStream() { cudaStreamDestroy(stream); }
};

}  // namespace

TEST_CASE("a captured graph holds its work as nodes of their kinds, and every replay runs it again") {
  CapturedStream s;
  const int n = 300;
  DeviceBuffer<float> x(n), y(n);
  float* pinned = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned), n * sizeof(float), cudaHostAllocDefault) == cudaSuccess);
  for (int i = 0; i < n; ++i) pinned[i] = static_cast<float>(i);
  REQUIRE(cudaMemsetAsync(x.data, 0, n * sizeof(float), s.stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s.stream) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  cudaStreamCaptureStatus status{};
  REQUIRE(cudaStreamIsCapturing(s.stream, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  REQUIRE(launch_raw<add_one>(3, 128, 0, s.stream, x.data, n) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(y.data, pinned, n * sizeof(float), cudaMemcpyHostToDevice, s.stream) == cudaSuccess);
  REQUIRE(launch_raw<add_one>(3, 128, 0, s.stream, y.data, n) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(y.data, 0, sizeof(float), s.stream) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.stream, &graph) == cudaSuccess);
  // Nothing ran during capture.
  REQUIRE(cudaStreamSynchronize(s.stream) == cudaSuccess);
  std::vector<float> host(n);
  REQUIRE(cudaMemcpy(host.data(), x.data, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host[0] == 0.0f);
  const auto kinds = node_kinds(graph);
  CHECK(kinds.at(cudaGraphNodeTypeKernel) == 2);
  CHECK(kinds.at(cudaGraphNodeTypeMemcpy) == 1);
  CHECK(kinds.at(cudaGraphNodeTypeMemset) == 1);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int replay = 1; replay <= 3; ++replay) {
    pinned[5] = 100.0f * replay;  // read by the copy when each replay runs it
    REQUIRE(cudaGraphLaunch(exec, s.stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s.stream) == cudaSuccess);
    REQUIRE(cudaMemcpy(host.data(), x.data, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host[n - 1] == static_cast<float>(replay));
    REQUIRE(cudaMemcpy(host.data(), y.data, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host[0] == 0.0f);
    CHECK(host[5] == 100.0f * replay + 1.0f);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFreeHost(pinned);
}

TEST_CASE("calls CUDA refuses during capture are refused, and invalidate the capture") {
  DeviceBuffer<float> x(16);
  struct Case {
    const char* what;
    cudaError_t expected;
    std::function<cudaError_t(cudaStream_t)> call;
  };
  const std::vector<Case> cases{
      {"synchronizing the captured stream", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t s) { return cudaStreamSynchronize(s); }},
      {"querying the captured stream", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t s) { return cudaStreamQuery(s); }},
      {"cudaDeviceSynchronize on the capturing thread", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t) { return cudaDeviceSynchronize(); }},
      {"cudaMalloc on the capturing thread", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t) {
         void* p = nullptr;
         return cudaMalloc(&p, 64);
       }},
      {"a synchronous cudaMemcpy", cudaErrorStreamCaptureUnsupported,
       [&](cudaStream_t) {
         float host[16] = {};
         return cudaMemcpy(host, x.data, sizeof(host), cudaMemcpyDeviceToHost);
       }},
      {"a copy from pageable memory into the captured stream", cudaErrorStreamCaptureUnsupported,
       [&](cudaStream_t s) {
         static float host[16] = {};
         return cudaMemcpyAsync(x.data, host, sizeof(host), cudaMemcpyHostToDevice, s);
       }},
      {"waiting on an event recorded outside the capture", cudaErrorStreamCaptureIsolation,
       [](cudaStream_t s) {
         cudaEvent_t e = nullptr;
         cudaEventCreate(&e);
         cudaEventRecord(e, nullptr);
         const cudaError_t result = cudaStreamWaitEvent(s, e, 0);
         cudaEventDestroy(e);
         return result;
       }},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    CapturedStream s;
    REQUIRE(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(c.call(s.stream) == c.expected);
    cudaGetLastError();
    cudaStreamCaptureStatus status{};
    REQUIRE(cudaStreamIsCapturing(s.stream, &status) == cudaSuccess);
    CHECK(status == cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s.stream, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    cudaGetLastError();
  }
  // A thread-local capture leaves other threads free to make such calls; a relaxed one, its own.
  CapturedStream s;
  REQUIRE(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  cudaError_t elsewhere = cudaErrorUnknown;
  std::thread([&] {
    void* p = nullptr;
    elsewhere = cudaMalloc(&p, 64);
    cudaFree(p);
  }).join();
  CHECK(elsewhere == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.stream, &graph) == cudaSuccess);
  cudaGraphDestroy(graph);
  REQUIRE(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 64) == cudaSuccess);
  REQUIRE(cudaStreamEndCapture(s.stream, &graph) == cudaSuccess);
  cudaGraphDestroy(graph);
  cudaFree(p);
}

TEST_CASE("the legacy stream may not run work while a blocking stream of its device is captured") {
  cudaStream_t blocking = nullptr;
  REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
  DeviceBuffer<float> x(16);
  REQUIRE(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(cudaMemsetAsync(x.data, 0, 64, nullptr) == cudaErrorStreamCaptureImplicit);
  cudaGetLastError();
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(blocking, &graph) == cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  cudaStreamDestroy(blocking);
}

TEST_CASE("stream-ordered allocation inside a capture is a memory-allocation node") {
  CapturedStream s;
  REQUIRE(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 1024, s.stream) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 0, 1024, s.stream) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s.stream) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.stream, &graph) == cudaSuccess);
  const auto kinds = node_kinds(graph);
  CHECK(kinds.at(cudaGraphNodeTypeMemAlloc) == 1);
  CHECK(kinds.at(cudaGraphNodeTypeMemFree) == 1);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s.stream) == cudaSuccess);  // the graph's own memory: allowed in its replays
  REQUIRE(cudaStreamSynchronize(s.stream) == cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("cuBLAS inside a capture allocates unless it has a workspace set after its stream") {
  CapturedStream s;
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  DeviceBuffer<float> a(64), b(64), c(64), workspace(1 << 18);
  const float one = 1.0f, zero = 0.0f;
  const auto captured_gemm = [&](bool with_workspace) {
    REQUIRE(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    REQUIRE(cublasSetStream(h, s.stream) == CUBLAS_STATUS_SUCCESS);  // resets the workspace to the default
    if (with_workspace)
      REQUIRE(cublasSetWorkspace(h, workspace.data, (1 << 18) * sizeof(float)) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, a.data, 8, b.data, 8, &zero, c.data, 8) ==
            CUBLAS_STATUS_SUCCESS);
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s.stream, &graph) == cudaSuccess);
    auto kinds = node_kinds(graph);
    cudaGraphDestroy(graph);
    return kinds;
  };
  auto kinds = captured_gemm(false);
  CHECK(kinds[cudaGraphNodeTypeMemAlloc] == 1);
  CHECK(kinds[cudaGraphNodeTypeKernel] == 1);
  kinds = captured_gemm(true);
  CHECK(kinds[cudaGraphNodeTypeMemAlloc] == 0);
  CHECK(kinds[cudaGraphNodeTypeKernel] == 1);
  cublasDestroy(h);
}
