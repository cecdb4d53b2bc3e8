// Optimizers with PyTorch's semantics: parameter groups, step(), zero_grad(set_to_none),
// state_dict()/load_state_dict() for an exact resume. Each group's update is one multi-tensor
// kernel launch on CUDA; the learning rate and the step counts live in the parameters' memory
// (device memory on CUDA), so a captured CUDA graph still sees a changed rate on replay (Note
// [graph-safe kernels] in core/cuda/graph.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/io/serialize.h"
#include "core/tensor/tensor.h"

namespace ember::optim {

// Hyperparameters of one group. Each optimizer reads the ones it uses.
struct GroupOptions {
  double lr = 1e-3;
  double momentum = 0, dampening = 0, weight_decay = 0;  // SGD (weight_decay: Adam, AdamW too)
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  // Every field, a new one included, takes part: what a captured step compares (FusedMlpStep).
  bool operator==(const GroupOptions&) const = default;
};

struct ParamGroup {
  std::vector<Tensor> params;
  GroupOptions options;
  double initial_lr = 0;  // the lr schedulers start from (set when the optimizer is made)
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient; parameters without one are skipped, as in
  // PyTorch. Gradients must be f32 and on the parameter's device.
  void step();
  void zero_grad(bool set_to_none = true);
  // Writes changed learning rates into the memory the update kernels read. step() does it itself;
  // a step replayed from a CUDA graph does not run step()'s host code, so call this before each
  // replay (it enqueues a fill only when a rate has changed, e.g. after a scheduler's step).
  void sync_learning_rates();
  // Grows whenever the state's buffers or the slot tables the update kernels read are replaced:
  // whoever keeps pointers to them (a captured CUDA graph) must take them again.
  std::uint64_t version() const { return version_; }

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  virtual std::string type_name() const = 0;

  // The learning rate's one writer: a group's rate (a scheduler's), or every group's; with
  // `restart`, also the rate schedulers start from (a resumed run given a new rate).
  void set_lr(std::size_t group, double lr);
  void set_lr(double lr, bool restart = false);
  // A group's rate as the update kernels read it (f32), and as a step that updates inside its
  // GEMMs must use it.
  float kernel_lr(std::size_t group) const { return static_cast<float>(groups_.at(group).options.lr); }

  // What a training step may ask of the optimizer (train::make_step):
  // - capturable: every step's update runs in the kernels ember launches, reading the rate from
  //   memory, allocating nothing after the first step and never waiting for the device, so a whole
  //   step can be captured in a CUDA graph and replayed (PyTorch's `capturable`). An optimizer
  //   written outside ember is not, unless it says so.
  // - update_is_plain_descent: the update of a group with these options is p ← p − lr·g and nothing
  //   else, which a step may apply inside the GEMM that computes g (FusedMlpStepOptions::sgd_in_gemm).
  virtual bool capturable() const { return false; }
  virtual bool update_is_plain_descent(const GroupOptions&) const { return false; }

  // Tensors "state.<i>.<name>" (i numbers the parameters across groups, as in PyTorch; names
  // like "momentum_buffer", "exp_avg", "exp_avg_sq", "step") and metadata "optimizer" (the type)
  // and "param_groups" (the hyperparameters, as JSON).
  Checkpoint state_dict() const;
  // Restores state saved by state_dict() of the same kind of optimizer over the same parameters;
  // anything else is a ValueError saying what does not match.
  void load_state_dict(const Checkpoint& state);

 protected:
  explicit Optimizer(std::vector<ParamGroup> groups);
  // The per-parameter state buffers a group needs, e.g. {"momentum_buffer"} for SGD with momentum.
  virtual std::vector<std::string> buffer_names(const GroupOptions& options) const = 0;
  // One group's parameters, gradients and state as the update kernels see them (defined in
  // optimizer.cpp: the kernels' slot tables stay out of this header).
  struct UpdateBatch;
  // Runs the group's update over the batch, in one launch on CUDA.
  virtual void update(const ParamGroup& group, const UpdateBatch& batch) = 0;

 private:
  struct ParamState {
    std::vector<Tensor> buffers;  // one per state name, like the parameter
    Tensor step;                  // f32 scalar
  };
  struct GroupCache;  // the slot table and the lr, in the parameters' memory
  ParamState& state_for(std::size_t index, const Tensor& param, const GroupOptions& options);
  void refresh_lr(std::size_t group);

  std::vector<ParamGroup> groups_;
  std::map<std::size_t, ParamState> state_;
  std::vector<std::unique_ptr<GroupCache>> caches_;
  std::uint64_t version_ = 0;
};

// torch.optim.SGD: momentum, dampening, weight decay and Nesterov, exactly PyTorch's update.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, GroupOptions options);
  SGD(std::vector<ParamGroup> groups);
  std::string type_name() const override { return "SGD"; }
  bool capturable() const override { return true; }
  bool update_is_plain_descent(const GroupOptions& o) const override { return o.momentum == 0 && o.weight_decay == 0; }

 protected:
  std::vector<std::string> buffer_names(const GroupOptions& options) const override;
  void update(const ParamGroup& group, const UpdateBatch& batch) override;
};

// torch.optim.Adam (L2 weight decay added to the gradient), with bias correction.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, GroupOptions options);
  Adam(std::vector<ParamGroup> groups);
  std::string type_name() const override { return "Adam"; }
  bool capturable() const override { return true; }

 protected:
  Adam(std::vector<ParamGroup> groups, bool decoupled);
  std::vector<std::string> buffer_names(const GroupOptions& options) const override;
  void update(const ParamGroup& group, const UpdateBatch& batch) override;

 private:
  bool decoupled_ = false;
};

// torch.optim.AdamW: Adam with decoupled weight decay (p ← p·(1 − lr·wd) before the update).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, GroupOptions options);
  AdamW(std::vector<ParamGroup> groups);
  std::string type_name() const override { return "AdamW"; }
};

// The optimizer a name chooses, as a command line gives it: "sgd", "adam" or "adamw", over
// `params` with `options` (a ValueError listing the names otherwise).
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params,
                                          const GroupOptions& options);

}  // namespace ember::optim
