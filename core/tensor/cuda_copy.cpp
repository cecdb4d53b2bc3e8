// Tensor copies that involve a CUDA device.
#include "core/tensor/cuda_copy.h"

#include "base/config.h"
#include "base/error.h"
#include "core/cuda/kernel_errors.h"
#include "core/cuda/runtime.h"
#include "core/tensor/storage.h"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ember::cuda {

#if EMBER_WITH_CUDA
namespace {

char* byte_ptr(const Tensor& t) { return static_cast<char*>(t.storage()->data()) + t.offset() * dtype_size(t.dtype()); }

// Device memory a copy on a side stream uses records the copy (an event after it); work on the
// memory's own compute stream needs no record. Note [stream ownership of device memory].
void record_copy(cudaStream_t stream, Device stream_device, std::initializer_list<const Tensor*> tensors,
                 std::shared_ptr<Event> done = nullptr) {
  for (const Tensor* t : tensors) {
    if (!t->is_cuda() || t->storage()->belongs_to(stream)) continue;
    if (!done) {
      done = std::make_shared<Event>(stream_device);
      done->record(stream);
    }
    t->storage()->record_use(stream, done);
  }
}

}  // namespace

void copy_bytes(const Tensor& dst, const Tensor& src, bool non_blocking) {
  const std::size_t bytes = src.nbytes();
  if (src.device().is_cpu()) {  // host → device
    const DeviceGuard guard(dst.device());
    const cudaStream_t stream = current_stream(dst.device());
    const bool async = non_blocking && src.is_pinned();
    // Made before the copy is queued: if it cannot be made, nothing reads the source unguarded.
    auto done = async ? std::make_shared<Event>(dst.device()) : nullptr;
    CUDA_CHECK(cudaMemcpyAsync(byte_ptr(dst), byte_ptr(src), bytes, cudaMemcpyHostToDevice, stream));
    if (async) {
      // The DMA reads the source when the stream reaches it: the source must not be reused (a
      // loader's staging slot refilled) before then.
      done->record(stream);
      src.storage()->record_pending_read(done);
      record_copy(stream, dst.device(), {&dst}, done);
      return;
    }
    // From pageable memory the copy must finish before the host may touch the source again.
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  if (dst.device().is_cpu()) {  // device → host
    const DeviceGuard guard(src.device());
    const cudaStream_t stream = current_stream(src.device());
    CUDA_CHECK(cudaMemcpyAsync(byte_ptr(dst), byte_ptr(src), bytes, cudaMemcpyDeviceToHost, stream));
    if (non_blocking && dst.is_pinned()) {
      auto done = std::make_shared<Event>(src.device());
      done->record(stream);
      dst.storage()->set_ready_event(done);
      record_copy(stream, src.device(), {&src}, done);
      return;
    }
    check_device_errors(src.device());  // waits for the stream, the copy included
    return;
  }
  // device → device
  const DeviceGuard guard(src.device());
  const cudaStream_t stream = current_stream(src.device());
  if (src.device() == dst.device()) {
    CUDA_CHECK(cudaMemcpyAsync(byte_ptr(dst), byte_ptr(src), bytes, cudaMemcpyDeviceToDevice, stream));
    record_copy(stream, src.device(), {&src, &dst});
    return;
  }
  // Between devices, on the source's stream: after the destination's allocation and earlier work
  // on its device, and before the destination's later work — events both ways, the host waits for
  // neither. The destination's memory is used by the source's stream, so its free waits for it.
  const cudaStream_t dst_stream = current_stream(dst.device());
  order_after(stream, dst_stream, dst.device());
  CUDA_CHECK(cudaMemcpyPeerAsync(byte_ptr(dst), dst.device().index, byte_ptr(src), src.device().index, bytes, stream));
  auto done = std::make_shared<Event>(src.device());
  done->record(stream);
  done->wait(dst_stream);
  src.storage()->record_use(stream, done);
  dst.storage()->record_use(stream, done);
}

#else

void copy_bytes(const Tensor&, const Tensor&, bool) {
  throw DeviceError("this build of ember has no CUDA backend (EMBER_CUDA=OFF), so no tensor can be on a CUDA device");
}

#endif

}  // namespace ember::cuda
