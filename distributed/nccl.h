// CUDA tensors' collectives through NCCL, for distributed/mpi.cpp (internal to dist/). One communicator
// per process for its device, made on first use from an id rank 0 sends over MPI. Each collective
// runs on a communication stream that waits for the compute stream's work so far, and the compute
// stream waits for it in turn (events, Note [stream ownership of device memory]); while the
// compute stream is being captured into a CUDA graph, it runs on the compute stream itself, so
// that the graph holds it (NCCL supports capture). Built without NCCL, each throws DistError.
#pragma once

#include <cstddef>
#include <memory>

#include "distributed/dist.h"

namespace ember::dist::nccl {

void all_reduce(Tensor& t, ReduceOp op);
void broadcast(Tensor& t, int root);
std::unique_ptr<Work> all_reduce_async(Tensor t);
void shutdown();  // destroys the communicator (at finalize)

// Defined in distributed/mpi.cpp: `bytes` of rank 0's `data` to every rank.
void broadcast_from_rank0(void* data, std::size_t bytes);

}  // namespace ember::dist::nccl
