// CUDA tensors' collectives through NCCL (see distributed/nccl.h).
#include "distributed/nccl.h"

#include "base/config.h"

#if EMBER_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "core/cuda/runtime.h"
#endif

namespace ember::dist::nccl {

#if EMBER_WITH_NCCL
namespace {

struct Communicator {
  ncclComm_t comm = nullptr;
  Device device;
  std::unique_ptr<cuda::Stream> stream;  // the communication stream
};
Communicator& the_communicator() {
  static Communicator c;
  return c;
}

void check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  throw DistError(ember::detail::concat("dist: ", what, " failed on rank ", rank(), ": ", ncclGetErrorString(result),
                                        " (NCCL_DEBUG=WARN says more)"));
}

Communicator& communicator(Device device) {
  Communicator& c = the_communicator();
  if (c.comm) {
    EMBER_CHECK(c.device == device, DistError, "dist: this rank's NCCL communicator is for ", c.device, ", not ",
                device, ": each rank trains on one device (dist::default_device())");
    return c;
  }
  ncclUniqueId id{};
  if (rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  broadcast_from_rank0(&id, sizeof id);
  cuda::DeviceGuard guard(device);
  check(ncclCommInitRank(&c.comm, world_size(), id, rank()), "ncclCommInitRank");
  c.device = device;
  c.stream = std::make_unique<cuda::Stream>(device);
  return c;
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
#define EMBER_NCCL_TYPE(name, type, floating, safetensors, mpi, suffix) \
  case DType::name:                                                     \
    return nccl##suffix;
    EMBER_FORALL_DTYPES(EMBER_NCCL_TYPE)
#undef EMBER_NCCL_TYPE
  }
  throw DTypeError("dist: no NCCL type for this dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// A collective issued on the communication stream after the compute stream's work so far; wait()
// orders the compute stream after it. While the compute stream is captured, it is issued there.
class NcclWork final : public Work {
 public:
  template <class Call>
  NcclWork(Tensor t, Call&& call) : tensor_(std::move(t)), done_(tensor_.device()) {
    Communicator& c = communicator(tensor_.device());
    cuda::DeviceGuard guard(c.device);
    compute_ = cuda::current_stream(c.device);
    cudaStream_t stream = compute_;
    if (!capturing(compute_)) {
      stream = c.stream->handle();
      cuda::order_after(stream, compute_, c.device);
      tensor_.record_stream(stream);  // its memory stays until the collective ran
    }
    call(c.comm, stream);
    done_.record(stream);
  }
  bool test() override { return done_.query(); }
  void wait() override { done_.wait(compute_); }

 private:
  Tensor tensor_;
  cuda::Event done_;
  cudaStream_t compute_ = nullptr;
};

}  // namespace

std::unique_ptr<Work> all_reduce_async(Tensor t) {
  return std::make_unique<NcclWork>(t, [&](ncclComm_t comm, cudaStream_t stream) {
    check(ncclAllReduce(t.raw_bytes(), t.raw_bytes(), static_cast<std::size_t>(t.numel()), nccl_type(t.dtype()),
                        ncclSum, comm, stream),
          "ncclAllReduce");
  });
}

void all_reduce(Tensor& t, ReduceOp op) {
  NcclWork(t, [&](ncclComm_t comm, cudaStream_t stream) {
    check(ncclAllReduce(t.raw_bytes(), t.raw_bytes(), static_cast<std::size_t>(t.numel()), nccl_type(t.dtype()),
                        nccl_op(op), comm, stream),
          "ncclAllReduce");
  }).wait();
}

void broadcast(Tensor& t, int root) {
  NcclWork(t, [&](ncclComm_t comm, cudaStream_t stream) {
    check(ncclBroadcast(t.raw_bytes(), t.raw_bytes(), static_cast<std::size_t>(t.numel()), nccl_type(t.dtype()), root,
                        comm, stream),
          "ncclBroadcast");
  }).wait();
}

void shutdown() {
  Communicator& c = the_communicator();
  if (!c.comm) return;
  c.stream->synchronize();
  ncclCommDestroy(c.comm);
  c = Communicator{};
}

#else  // built without NCCL

namespace {
[[noreturn]] void no_nccl() {
  throw DistError(
      "dist: this ember has no NCCL, so CUDA tensors cannot be reduced across ranks; build with the "
      "CUDA toolkit's NCCL (or EMBER_NCCL_ROOT pointing at one), or train distributed on the CPU");
}
}  // namespace

std::unique_ptr<Work> all_reduce_async(Tensor) { no_nccl(); }
void all_reduce(Tensor&, ReduceOp) { no_nccl(); }
void broadcast(Tensor&, int) { no_nccl(); }
void shutdown() {}

#endif

}  // namespace ember::dist::nccl
