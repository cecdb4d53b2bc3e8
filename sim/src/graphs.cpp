// Stream capture and CUDA graphs on the software GPU.
//
// While a stream is captured, every operation issued to it — a kernel, a library call, a copy, a
// memset, a stream-ordered allocation or free — becomes a node of its graph instead of running.
// A replay (cudaGraphLaunch) issues the nodes to the launch stream in order as ordinary operations,
// so each replay is checked against the other streams like any other work, and a kernel's blocks
// run in a fresh shuffled order every time. Memory allocated inside a capture belongs to the graph:
// touching it from outside the graph's replays is reported.
//
// Calls CUDA refuses during capture are refused here with its error codes, and they invalidate
// the capture as CUDA's do (cudaStreamEndCapture then answers cudaErrorStreamCaptureInvalidated):
// synchronizing or querying the captured stream, a copy from or into pageable memory on it,
// waiting on an event recorded outside the capture, using the legacy stream while a blocking
// stream is captured, and — under the capture mode's rule — the "potentially unsafe" calls:
// device, stream and event synchronization, cudaMalloc, cudaFree, cudaHostAlloc, cudaFreeHost,
// synchronous copies and memsets.
#include <algorithm>
#include <cstring>

#include "executor.h"
#include "state.h"

namespace ember_sim::graphs {

Graph::~Graph() { release_graph_memory(owned_memory); }

void release_graph_memory(const std::vector<void*>& blocks) {
  if (blocks.empty()) return;
  rt::Runtime& r = rt::runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (void* p : blocks) {
    rt::Memory* m = rt::find_memory(r, p);
    if (!m) continue;
    r.devices[static_cast<std::size_t>(m->device)].in_use -= m->size;
    rt::release_memory(r, m);
  }
}

}  // namespace ember_sim::graphs

namespace ember_sim::rt {

thread_local const graphs::Graph* t_replaying = nullptr;

bool capturing(const Stream* s) { return s && s->capture; }

namespace {

// Invalidates a capture (the first reason is kept) and returns `error`.
cudaError_t invalidate(Capture& c, cudaError_t error) {
  if (c.invalidated == cudaSuccess) c.invalidated = error;
  return error;
}

std::string capture_name(const Stream& s) {
  return "stream " + std::to_string(s.id) + " (being captured into a CUDA graph)";
}

}  // namespace

OpPtr capture_node(Runtime& rt, Stream* s, cudaGraphNodeType type, std::string what, std::vector<Access> accesses,
                   std::function<std::function<void()>()> make_work) {
  Capture& c = *s->capture;
  // A blocking stream's work would depend on the legacy stream's: CUDA refuses the implicit edge.
  if (s->blocking) {
    const Stream* legacy = rt.devices[static_cast<std::size_t>(s->device)].legacy;
    if (legacy && legacy->last && !legacy->last->done) invalidate(c, cudaErrorStreamCaptureImplicit);
  }
  auto node = std::make_unique<graphs::Node>();
  node->type = type;
  node->what = std::move(what);
  node->accesses = std::move(accesses);
  node->make_work = std::move(make_work);
  if (config().trace)
    std::fprintf(stderr, "ember software GPU: %s records %s\n", capture_name(*s).c_str(), node->what.c_str());
  c.graph->nodes.push_back(std::move(node));
  // Nothing runs now: a placeholder that is already complete.
  auto op = std::make_shared<Op>();
  op->what = "captured";
  op->stream = s;
  op->stream_id = s->id;
  op->released = op->done = true;
  return op;
}

cudaError_t unsafe_during_capture(Runtime& rt, const char* call) {
  cudaError_t result = cudaSuccess;
  for (Stream* s : rt.streams) {
    if (!s->capture) continue;
    Capture& c = *s->capture;
    const bool forbids = c.mode == cudaStreamCaptureModeGlobal ||
                         (c.mode == cudaStreamCaptureModeThreadLocal && c.thread == std::this_thread::get_id());
    if (!forbids) continue;
    if (config().trace)
      std::fprintf(stderr, "ember software GPU: %s during the capture of stream %d: refused\n", call, s->id);
    result = invalidate(c, cudaErrorStreamCaptureUnsupported);
  }
  return result;
}

cudaError_t conflicts_with_capture(Runtime& rt, Stream* s, cudaError_t error, const char* call) {
  (void)rt;
  if (!capturing(s)) return cudaSuccess;
  if (config().trace) std::fprintf(stderr, "ember software GPU: %s on %s: refused\n", call, capture_name(*s).c_str());
  return invalidate(*s->capture, error);
}

cudaError_t legacy_conflict(Runtime& rt, Stream* s) {
  if (!s || !s->legacy) return cudaSuccess;
  cudaError_t result = cudaSuccess;
  for (Stream* other : rt.streams)
    if (other->capture && other->blocking && other->device == s->device)
      result = invalidate(*other->capture, cudaErrorStreamCaptureImplicit);
  return result;
}

}  // namespace ember_sim::rt

using namespace ember_sim::rt;
using ember_sim::graphs::GraphHandle;

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (s->legacy) return record_error(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
  if (s->capture) return record_error(cudaErrorIllegalState);
  auto c = std::make_unique<Capture>();
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->graph = std::make_shared<ember_sim::graphs::Graph>();
  c->graph->device = s->device;
  c->id = rt.next_capture_id++;
  s->capture = std::move(c);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  Runtime& rt = runtime();
  std::shared_ptr<ember_sim::graphs::Graph> dropped;  // released outside the lock
  cudaError_t result = cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    Stream* s = resolve(rt, stream);
    if (!s || !graph) return record_error(s ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
    if (!s->capture) return record_error(cudaErrorIllegalState);
    Capture& c = *s->capture;
    if (c.mode != cudaStreamCaptureModeRelaxed && c.thread != std::this_thread::get_id())
      return record_error(cudaErrorStreamCaptureWrongThread);
    *graph = nullptr;
    if (c.invalidated != cudaSuccess) {
      dropped = std::move(c.graph);
      result = record_error(cudaErrorStreamCaptureInvalidated);
    } else {
      *graph = reinterpret_cast<cudaGraph_t>(new GraphHandle{std::move(c.graph)});
    }
    for (Event* e : rt.events)
      if (e->captured_in == c.id) e->captured_in = 0;
    s->capture.reset();
  }
  return result;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  if (!s || !status) return record_error(s ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
  *status = !s->capture                              ? cudaStreamCaptureStatusNone
            : s->capture->invalidated != cudaSuccess ? cudaStreamCaptureStatusInvalidated
                                                     : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!exec || !graph) return record_error(cudaErrorInvalidValue);
  *exec = reinterpret_cast<cudaGraphExec_t>(new GraphHandle{reinterpret_cast<GraphHandle*>(graph)->graph});
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return record_error(cudaErrorInvalidValue);
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = sticky_error(rt, s->device)) return record_error(e);
  if (cudaError_t e = legacy_conflict(rt, s)) return record_error(e);
  // A graph launched into a capture would become a child graph node: not modelled.
  if (cudaError_t e = conflicts_with_capture(rt, s, cudaErrorStreamCaptureUnsupported, "cudaGraphLaunch"))
    return record_error(e);
  const ember_sim::graphs::Graph& g = *reinterpret_cast<GraphHandle*>(exec)->graph;
  if (g.device != s->device) return record_error(cudaErrorInvalidValue);
  t_replaying = &g;
  for (const auto& node : g.nodes)
    enqueue(rt, s, node->what + " (graph replay)", node->accesses, node->make_work ? node->make_work() : nullptr,
            nullptr, node->type);
  t_replaying = nullptr;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<GraphHandle*>(graph);  // the graph itself goes when its last exec does too
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<GraphHandle*>(exec);
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (!graph || !count) return record_error(cudaErrorInvalidValue);
  const auto& all = reinterpret_cast<GraphHandle*>(graph)->graph->nodes;
  if (nodes) {
    for (std::size_t i = 0; i < *count; ++i)
      nodes[i] = i < all.size() ? reinterpret_cast<cudaGraphNode_t>(all[i].get()) : nullptr;
  }
  *count = all.size();
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (!node || !type) return record_error(cudaErrorInvalidValue);
  *type = reinterpret_cast<const ember_sim::graphs::Node*>(node)->type;
  return cudaSuccess;
}
