// What the library models (cuBLAS, ...) need from the software GPU's runtime: the memory an
// argument points at, checked, and host work enqueued on a stream like any other operation, so
// it runs in stream order and takes part in the checks between streams.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace ember_sim::rt {

// A range an operation reads or writes, for the checks between streams.
struct Access {
  const void* address;
  std::size_t bytes;
  bool write;
  std::string what;  // "argument A of cublasSgemm", for messages
};

// Enqueues `work` on `stream` (0: the legacy default stream of the current device) after checking
// that every access lies inside memory the device can reach and is ordered after the accesses of
// other streams it conflicts with. Returns the CUDA error a real call would (a sticky one, a bad
// stream); a broken access aborts with a report.
cudaError_t enqueue_work(cudaStream_t stream, const std::string& what, std::vector<Access> accesses,
                         std::function<void()> work);

// The current device of the calling host thread.
int current_device();

}  // namespace ember_sim::rt
