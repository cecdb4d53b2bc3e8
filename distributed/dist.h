// Data-parallel training across processes (docs/distributed.md): the process group mpirun
// starts, and collectives on tensors — CPU tensors through MPI, CUDA tensors through NCCL — that
// every rank calls in the same order.
//
//   dist::init();                                 // in every process mpirun started
//   const Device device = dist::default_device(); // cuda:local_rank, or the CPU
//   if (device.is_cuda()) cuda::set_device(device);  // Note [a rank's device] in core/cuda/runtime.h
//   model->to(device);
//   dist::broadcast_parameters(model->parameters());      // rank 0's initialization everywhere
//   dist::GradientReducer reducer(model->parameters());   // averages gradients during backward
//   ... loss.backward(); reducer.finish(); optimizer.step(); ...
//
// A single process without mpirun is a world of one only when asked (init_single_process);
// init() refuses to guess, so a forgotten mpirun is an error rather than a silent 1-rank run.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/tensor/tensor.h"

namespace ember::dist {

class DistError : public Error {  // no MPI, no mpirun, ranks that disagree, a failed collective
  using Error::Error;
};

// Whether this ember was built with MPI, and with NCCL for CUDA tensors.
bool built_with_mpi();
bool built_with_nccl();
// Whether this process was started by mpirun (or another MPI launcher).
bool launched_by_mpi();

// Joins the process group mpirun started. Throws DistError, saying how to fix it, when ember has
// no MPI or the process was not started by mpirun. Idempotent.
void init();
// A world of one process without mpirun (tests, or the same code run alone); works without MPI
// too, where CUDA tensors still go through NCCL (a one-rank communicator).
void init_single_process();
bool is_initialized();
// Leaves the group at the end of a run, after the last collective.
void finalize();
// Ends every rank of the run at once with `exit_code` (MPI_Abort), for a program's top level
// when one rank failed: the others would otherwise wait in their next collective.
[[noreturn]] void abort_all(int exit_code);

int rank();        // 0 without a process group
int world_size();  // 1 without a process group
int local_rank();  // the rank among the processes on this machine
bool is_main();    // rank 0: it alone prints, logs and writes files
// cuda:(local_rank mod device count) when CUDA devices are usable, else the CPU.
Device default_device();

enum class ReduceOp { sum, max, min };

// In place, on every rank: the element-wise reduction of `t` over all ranks. CPU tensors (f32,
// f64, i32, i64, u8) through MPI; CUDA tensors through NCCL on a communication stream ordered
// after the compute stream's work and before its later work (events).
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum);
void broadcast(Tensor& t, int root = 0);  // rank root's values everywhere
void barrier();
std::vector<std::uint64_t> all_gather(std::uint64_t value);  // one value from each rank, by rank
std::string broadcast_string(const std::string& text, int root = 0);

// Rank 0's values of every tensor everywhere: the same initialization on every rank.
void broadcast_parameters(std::span<const Tensor> parameters);
// A hash of the tensors' bytes (FNV-1a over shapes, dtypes and data, copied to the host).
std::uint64_t hash_tensors(std::span<const Tensor> tensors);
// This machine's host name (gethostname).
std::string host_name();
// Throws DistError naming the first rank whose `text` differs from rank 0's, both ranks' hosts,
// and where: the start-up check that every rank runs the same model with the same options and
// data.
void check_same_on_all_ranks(const std::string& what, const std::string& text);
// Throws DistError unless every rank holds bit-identical tensors (hash_tensors compared).
void check_identical(const std::string& what, std::span<const Tensor> tensors);
// Every rank's `ok`, and-ed: for decisions all ranks must take together.
bool all_agree(bool ok);

// A non-blocking sum of a tensor over all ranks (MPI_Iallreduce; ncclAllReduce on the
// communication stream). On the CPU, Open MPI moves data only inside MPI calls, so test() is
// what lets it progress while the caller computes.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool test() = 0;  // done? (never blocks)
  virtual void wait() = 0;  // until done; on CUDA, until the compute stream is ordered after it
};
std::unique_ptr<Work> all_reduce_async(Tensor t);

}  // namespace ember::dist
