// CUDA graph capture and replay (see core/cuda/graph.h).
#include "core/cuda/graph.h"

#include <vector>

#include "base/config.h"
#include "base/error.h"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#endif

namespace ember::cuda {

#if EMBER_WITH_CUDA

struct Graph::Impl {
  cudaStream_t capturing = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::size_t kernels = 0, allocations = 0, nodes = 0;
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}

Graph::~Graph() {
  abandon_capture();
  if (impl_->exec) CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(impl_->exec));
  if (impl_->graph) CUDA_CHECK_NOTHROW(cudaGraphDestroy(impl_->graph));
}

void Graph::begin_capture(cudaStream_t stream) {
  EMBER_CHECK(!impl_->capturing && !impl_->exec, ValueError, "Graph::begin_capture: this graph was already captured");
  EMBER_CHECK(!sync_debug(), ValueError,
              "CUDA graphs cannot be captured with EMBER_SYNC_DEBUG=1 (it synchronizes "
              "after every launch): unset it, or run without graphs");
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  impl_->capturing = stream;
}

void Graph::end_capture() {
  EMBER_CHECK(impl_->capturing, ValueError, "Graph::end_capture without begin_capture");
  cudaStream_t stream = impl_->capturing;
  impl_->capturing = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream, &impl_->graph));
  CUDA_CHECK(cudaGraphInstantiate(&impl_->exec, impl_->graph, 0));
  std::size_t count = 0;
  CUDA_CHECK(cudaGraphGetNodes(impl_->graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  if (count) CUDA_CHECK(cudaGraphGetNodes(impl_->graph, nodes.data(), &count));
  impl_->nodes = count;
  impl_->kernels = impl_->allocations = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel) ++impl_->kernels;
    if (type == cudaGraphNodeTypeMemAlloc) ++impl_->allocations;
  }
}

void Graph::abandon_capture() noexcept {
  if (!impl_ || !impl_->capturing) return;
  cudaGraph_t partial = nullptr;
  // A capture that a refused call invalidated ends with that error: expected here, not reported.
  const cudaError_t ended = cudaStreamEndCapture(impl_->capturing, &partial);
  if (ended != cudaErrorStreamCaptureInvalidated) CUDA_CHECK_NOTHROW(ended);
  if (partial) CUDA_CHECK_NOTHROW(cudaGraphDestroy(partial));
  impl_->capturing = nullptr;
  (void)cudaGetLastError();  // an invalidated capture leaves its (non-sticky) error behind: clear it
}

void Graph::replay(cudaStream_t stream) const {
  EMBER_CHECK(impl_->exec, ValueError, "Graph::replay before the graph was captured");
  CUDA_CHECK(cudaGraphLaunch(impl_->exec, stream));
}

bool Graph::ready() const { return impl_->exec != nullptr; }
std::size_t Graph::kernel_nodes() const { return impl_->kernels; }
std::size_t Graph::allocation_nodes() const { return impl_->allocations; }
std::size_t Graph::nodes() const { return impl_->nodes; }

#else  // built without CUDA

struct Graph::Impl {};
namespace {
[[noreturn]] void no_cuda() { throw DeviceError("CUDA graphs need the CUDA backend; ember was built without CUDA"); }
}  // namespace
Graph::Graph() = default;
Graph::~Graph() = default;
void Graph::begin_capture(cudaStream_t) { no_cuda(); }
void Graph::end_capture() { no_cuda(); }
void Graph::abandon_capture() noexcept {}
void Graph::replay(cudaStream_t) const { no_cuda(); }
bool Graph::ready() const { return false; }
std::size_t Graph::kernel_nodes() const { return 0; }
std::size_t Graph::allocation_nodes() const { return 0; }
std::size_t Graph::nodes() const { return 0; }

#endif

}  // namespace ember::cuda
