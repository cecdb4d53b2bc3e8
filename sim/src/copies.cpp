// Copies and memsets: the copy between device, pinned and pageable memory (staging, the check on
// pinned sources), and the API (cudaMemcpy*, cudaMemset*).
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>

#include "executor.h"
#include "state.h"

namespace ember_sim::rt {

namespace {
// A kind of memory for a copy's endpoint.
enum class Side { device, pinned, pageable };
Side side_of(Runtime& rt, const void* p) {
  const Memory* m = find_memory(rt, p);
  if (!m || m->freed) return Side::pageable;
  return m->device >= 0 ? Side::device : Side::pinned;
}

std::uint64_t checksum(const void* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  const auto* c = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ULL;
  return h;
}

cudaError_t copy_async(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                       bool synchronous) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  note_context_use(t_device);
  if (cudaError_t e = sticky_error(rt, t_device)) return record_error(e);
  Stream* s = resolve(rt, stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (synchronous)
    if (cudaError_t e = unsafe_during_capture(rt, "cudaMemcpy")) return record_error(e);
  if (cudaError_t e = legacy_conflict(rt, s)) return record_error(e);
  if (n == 0) return cudaSuccess;
  const Side from = side_of(rt, src), to = side_of(rt, dst);
  // A copy from or into pageable memory finishes (or is staged) at the call: it cannot be captured.
  if (from == Side::pageable || to == Side::pageable)
    if (cudaError_t e = conflicts_with_capture(rt, s, cudaErrorStreamCaptureUnsupported, "a copy with pageable memory"))
      return record_error(e);
  const auto expects_device = [](cudaMemcpyKind k, bool destination) {
    if (k == cudaMemcpyHostToDevice) return destination;
    if (k == cudaMemcpyDeviceToHost) return !destination;
    return k == cudaMemcpyDeviceToDevice;
  };
  if (kind != cudaMemcpyDefault && kind != cudaMemcpyHostToHost) {
    if (expects_device(kind, true) != (to == Side::device) || expects_device(kind, false) != (from == Side::device))
      return record_error(cudaErrorInvalidValue);
  }
  std::ostringstream what;
  what << (synchronous ? "cudaMemcpy " : "cudaMemcpyAsync ") << (from == Side::device ? "device" : "host") << "→"
       << (to == Side::device ? "device" : "host") << " of " << bytes_text(n);
  if (config().trace) what << " (" << src << " to " << dst << ")";
  std::vector<Access> accesses;
  if (from != Side::pageable) accesses.push_back({src, n, false, "its source"});
  if (to != Side::pageable) accesses.push_back({dst, n, true, "its destination"});
  std::function<void()> work;
  if (from == Side::pageable) {
    // From pageable memory the host may reuse its buffer as soon as the call returns: CUDA stages
    // it first, and so does this runtime.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    work = [dst, staged, n] { std::memcpy(dst, staged->data(), n); };
  }
  std::function<std::function<void()>()> make_work;
  if (from == Side::pinned && !synchronous) {
    // From pinned memory the copy reads the buffer when the stream reaches it, as a GPU's DMA does;
    // a buffer the host refilled in between is reported instead of silently copied. (The sum is
    // taken when the copy is issued: at the call, or at each replay of a graph holding it.)
    const std::string description = what.str();
    const int id = s->id;
    make_work = [dst, src, n, description, id]() -> std::function<void()> {
      const std::uint64_t sum = checksum(src, n);
      return [dst, src, n, sum, description, id] {
        if (checksum(src, n) != sum)
          fail(description + " on stream " + std::to_string(id) + ": its pinned source buffer at " +
               hex(reinterpret_cast<std::uintptr_t>(src)) +
               " was written by the host after the copy was issued and before it ran; wait for the copy (an event "
               "recorded after it, or a synchronization) before refilling the buffer");
        std::memcpy(dst, src, n);
      };
    };
    work = make_work();
  } else if (from != Side::pageable) {
    work = [dst, src, n] { std::memmove(dst, src, n); };
  }
  OpPtr op = enqueue(rt, s, what.str(), accesses, work, nullptr, cudaGraphNodeTypeMemcpy, make_work);
  // Synchronous copies, and copies into pageable memory, return only when done (as in CUDA).
  if (synchronous || to == Side::pageable) wait_done(rt, lock, op);
  return sticky_error(rt, t_device) ? record_error(sticky_error(rt, t_device)) : cudaSuccess;
}
}  // namespace

}  // namespace ember_sim::rt

// ---- the copy API ------------------------------------------------------------------------------------
using namespace ember_sim::rt;

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return copy_async(dst, src, n, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy_async(dst, src, n, kind, stream, false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t n,
                                cudaStream_t stream) {
  Runtime& rt = runtime();
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    const Memory* d = find_memory(rt, dst);
    const Memory* s = find_memory(rt, src);
    if (!d || !s || d->device != dst_device || s->device != src_device) return record_error(cudaErrorInvalidValue);
  }
  return copy_async(dst, src, n, cudaMemcpyDeviceToDevice, stream, false);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t n, cudaStream_t stream) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = nullptr;
  if (cudaError_t e = issuing_stream(rt, stream, &s)) return record_error(e);
  if (n == 0) return cudaSuccess;
  enqueue(
      rt, s, "cudaMemsetAsync of " + bytes_text(n), {{ptr, n, true, "its destination"}},
      [ptr, value, n] { std::memset(ptr, value, n); }, nullptr, cudaGraphNodeTypeMemset);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t n) {
  {
    Runtime& rt = runtime();
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (cudaError_t e = unsafe_during_capture(rt, "cudaMemset")) return record_error(e);
  }
  if (cudaError_t e = cudaMemsetAsync(ptr, value, n, nullptr)) return e;
  return cudaStreamSynchronize(nullptr);
}
