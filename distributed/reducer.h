// Gradients averaged across ranks while backward still runs, as PyTorch's
// DistributedDataParallel does: the parameters are grouped into buckets in the reverse of their
// order (the order backward produces their gradients); when every gradient of a bucket has
// arrived (autograd::on_grad_accumulated), the bucket is copied into one flat buffer and its sum
// over ranks starts, non-blocking, while backward computes the gradients below. finish() waits
// for the rest, divides by the number of ranks and writes the averages back into .grad.
//
// Buckets start strictly in order on every rank, so the ranks' collectives always match. On the
// CPU, Open MPI moves data only inside MPI calls: each arriving gradient also polls the buckets in
// flight, which is what lets them progress during backward. On CUDA the sums run on NCCL's
// communication stream, ordered by events. See docs/distributed.md.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/tensor/autograd.h"
#include "core/tensor/tensor.h"
#include "distributed/dist.h"

namespace ember::dist {

struct ReducerOptions {
  // A bucket closes when adding the next parameter would pass this size (one larger parameter
  // makes a bucket of its own). Small buckets start sooner; large ones make fewer calls.
  std::size_t bucket_bytes = 256 * 1024;
};

class GradientReducer {
 public:
  explicit GradientReducer(std::vector<Tensor> parameters, ReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // After backward, before the optimizer's step: waits for every bucket (starting any whose
  // gradients did not all arrive — a parameter unused this step counts as a zero gradient) and
  // leaves each parameter's .grad the average over ranks. Throws DistError if a collective failed.
  void finish();

  // Hooks off while a backward runs for a micro-batch whose gradients are only accumulated
  // (PyTorch's no_sync()): the next backward with hooks on reduces the accumulated sum.
  void set_enabled(bool enabled) { enabled_ = enabled; }

  std::size_t bucket_count() const { return buckets_.size(); }
  // Seconds this rank's host spent blocked waiting for the reductions since the last reset:
  // the communication the backward pass did not hide.
  double wait_seconds() const { return wait_s_; }
  void reset_wait_seconds() { wait_s_ = 0; }

 private:
  struct Bucket {
    std::vector<std::size_t> members;  // indices into parameters_
    std::vector<std::int64_t> offsets;
    Tensor flat;
    std::size_t arrived = 0;
    std::unique_ptr<Work> work;
  };

  void arrived(std::size_t parameter);
  void fill(Bucket& bucket);
  void start_ready_buckets();
  void poll();

  std::vector<Tensor> parameters_;
  std::vector<std::size_t> bucket_of_;
  std::vector<bool> arrived_;
  std::vector<Bucket> buckets_;
  std::size_t next_to_start_ = 0;
  std::vector<autograd::HookHandle> hooks_;
  bool enabled_ = true;
  double wait_s_ = 0;
};

}  // namespace ember::dist
