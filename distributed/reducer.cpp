// The bucketed gradient reducer (see distributed/reducer.h).
#include "distributed/reducer.h"

#include <chrono>

#include "base/fault_point.h"
#include "core/ops/ops.h"

namespace ember::dist {

GradientReducer::GradientReducer(std::vector<Tensor> parameters, ReducerOptions options)
    : parameters_(std::move(parameters)), bucket_of_(parameters_.size()), arrived_(parameters_.size(), false) {
  EMBER_CHECK(is_initialized(), DistError,
              "GradientReducer: no process group; call dist::init() first (in a program started by mpirun)");
  EMBER_CHECK(!parameters_.empty(), ValueError, "GradientReducer: no parameters");
  const Device device = parameters_.front().device();
  const DType dtype = parameters_.front().dtype();
  std::size_t bytes = 0;
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    const Tensor& p = parameters_[i];
    EMBER_CHECK(p.device() == device && p.dtype() == dtype, ValueError,
                "GradientReducer: every parameter must be on one device with one dtype; parameter ", i, " is ",
                p.dtype(), " on ", p.device(), ", the last is ", dtype, " on ", device);
    if (buckets_.empty() || (bytes > 0 && bytes + p.nbytes() > options.bucket_bytes)) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    b.offsets.push_back(b.members.empty() ? 0 : b.offsets.back() + parameters_[b.members.back()].numel());
    b.members.push_back(i);
    bucket_of_[i] = buckets_.size() - 1;
    bytes += p.nbytes();
  }
  for (Bucket& b : buckets_) {
    const std::int64_t n = b.offsets.back() + parameters_[b.members.back()].numel();
    b.flat = zeros({n}, {.dtype = dtype, .device = device});
  }
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    hooks_.push_back(autograd::on_grad_accumulated(parameters_[i], [this, i] { arrived(i); }));
}

GradientReducer::~GradientReducer() {
  for (Bucket& b : buckets_)
    if (b.work) b.work->test();  // a reduction in flight finishes in Work's destructor
}

void GradientReducer::arrived(std::size_t parameter) {
  if (!enabled_) return;
  EMBER_CHECK(!arrived_[parameter], DistError, "GradientReducer: parameter ", parameter,
              " received a gradient twice in one backward (a parameter used twice, e.g. tied weights): its bucket ",
              "may already be on its way; reduce such a model after backward with dist::all_reduce instead");
  arrived_[parameter] = true;
  Bucket& b = buckets_[bucket_of_[parameter]];
  if (++b.arrived == b.members.size()) fill(b);
  start_ready_buckets();
  poll();
}

void GradientReducer::fill(Bucket& b) {
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < b.members.size(); ++k) {
    const Tensor& p = parameters_[b.members[k]];
    Tensor slot = b.flat.narrow(0, b.offsets[k], p.numel());
    const Tensor grad = p.grad();
    if (grad.defined())
      slot.copy_(grad.reshape({p.numel()}));
    else
      slot.zero_();  // unused this step: a zero gradient
  }
  b.arrived = b.members.size();
}

void GradientReducer::start_ready_buckets() {
  while (next_to_start_ < buckets_.size() &&
         buckets_[next_to_start_].arrived == buckets_[next_to_start_].members.size()) {
    Bucket& b = buckets_[next_to_start_++];
    b.work = all_reduce_async(b.flat);
  }
}

void GradientReducer::poll() {
  for (std::size_t i = 0; i < next_to_start_; ++i)
    if (buckets_[i].work) buckets_[i].work->test();
}

void GradientReducer::finish() {
  for (Bucket& b : buckets_)
    if (b.arrived < b.members.size()) fill(b);
  start_ready_buckets();
  fault_point("allreduce");  // the sums in flight (Note [fault points])
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) {
    b.work->wait();
    b.work.reset();
  }
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  NoGradGuard no_grad;
  const double scale = 1.0 / static_cast<double>(world_size());
  for (Bucket& b : buckets_) {
    mul_(b.flat, scale);
    for (std::size_t k = 0; k < b.members.size(); ++k) {
      Tensor& p = parameters_[b.members[k]];
      const Tensor average = b.flat.narrow(0, b.offsets[k], p.numel()).reshape(p.shape());
      if (p.grad().defined())
        p.grad().copy_(average);
      else
        p.set_grad(average.clone());
    }
    b.arrived = 0;
  }
  std::fill(arrived_.begin(), arrived_.end(), false);
  next_to_start_ = 0;
}

}  // namespace ember::dist
