// A CUDA graph: work issued on a stream, captured once and replayed with one launch. Compiles
// without the CUDA toolkit; in a build without CUDA every call throws DeviceError.
//
// Capture runs in thread-local mode, so other threads (a data loader's) may keep making CUDA
// calls meanwhile — but none on the stream being captured: work issued to it from any thread
// joins the capture. ember allocates and frees device memory on the compute stream (Note [stream
// ownership of device memory] in core/tensor/storage.h), so while a device's compute stream is captured
// no other thread may make or drop tensors on that device. What may be captured is Note
// [graph-safe kernels].
//
// Note [graph-safe kernels]
// A step captured in a CUDA graph is replayed exactly as recorded: its kernel arguments are frozen
// and none of the host code around the launches runs again. So every kernel and library call a
// capturable step issues must
//   - read whatever changes between steps (learning rate, step counts, seeds, loss sums) from
//     device memory it points at, never take it as an argument by value;
//   - not synchronize, allocate (buffers come from the stream-ordered pool before capture), or
//     copy from pageable memory;
//   - report bad input through the device-side error record (core/cuda/runtime.h), which the host reads at
//     its next natural synchronization — never synchronize just to check;
//   - leave any counter it uses as it found it (the last block resets it), so the next replay
//     starts from the same state.
// Code that relies on the rule names this note.
#pragma once

#include <cstddef>
#include <memory>

#include "core/cuda/runtime.h"

namespace ember::cuda {

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts recording the work issued on `stream` instead of running it.
  void begin_capture(cudaStream_t stream);
  // Stops recording and instantiates the graph; replay() runs it from then on.
  void end_capture();
  // Stops a capture that failed (an exception between begin and end), leaving the stream usable.
  void abandon_capture() noexcept;
  void replay(cudaStream_t stream) const;
  bool ready() const;
  std::size_t kernel_nodes() const;      // kernel launches in the captured graph (0 before capture)
  std::size_t allocation_nodes() const;  // memory-allocation nodes: a graph-safe step has none
  std::size_t nodes() const;             // every node: kernels, copies, memsets, allocations

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::cuda
