// A CUDA graph: work issued on a stream, captured once and replayed with one launch. Compiles
// without the CUDA toolkit; in a build without CUDA every call throws DeviceError.
//
// Capture runs in thread-local mode, so other threads (a data loader's) may keep making CUDA
// calls meanwhile. Nothing captured may synchronize, allocate, or copy from pageable memory; what
// changes between replays must be read from memory the kernels point at, not passed by value.
#pragma once

#include <cstddef>
#include <memory>

#include "core/cuda.h"

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
  std::size_t kernel_nodes() const;  // kernel launches in the captured graph (0 before capture)
  std::size_t nodes() const;         // every node: kernels, copies, memsets

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::cuda
