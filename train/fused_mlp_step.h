// A whole training step of an MLP classifier — forward, softmax cross-entropy, backward, update —
// built once for a batch size and then run with no allocation, no synchronization and no read of
// device memory by the host. The model is a Sequential of Linear layers (with bias) and ReLUs, as
// nn::mlp makes; the optimizer is any ember optimizer over its parameters.
//
// The step is written out as fused kernels rather than recorded by autograd: on CUDA the forward
// GEMMs carry bias and ReLU in cuBLASLt epilogues (RELU_AUX_BIAS, which also stores the ReLU mask
// as bits), the backward GEMMs carry the mask and the bias gradient (DRELU_BGRAD, BGRADB); the
// loss and its gradient are one kernel; the update is one multi-tensor launch. Where cuBLASLt has
// no fp32 algorithm for an epilogue, plain GEMM and ember's own fused kernels take its place, and
// the CPU runs the same sequence with its twins. On CUDA the step is then captured in a CUDA graph
// and replayed for every full batch (every call in it follows Note [graph-safe kernels] in
// core/cuda/graph.h); a last partial batch runs eagerly.
//
// Loss sums and device-side errors (a target out of range, a non-finite loss) stay on the device
// until read: on the CPU a bad batch throws at its step; on CUDA at the next synchronization.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/tensor/tensor.h"
#include "layers/container.h"
#include "optim/optimizer.h"
#include "train/step.h"
#include "train/step_options.h"

namespace ember::train {

// Why `model` cannot be trained by FusedMlpStep, or an empty string when it can.
std::string fused_mlp_step_unsupported(const nn::Sequential& model);
// Why FusedMlpStep cannot train in `precision` on `device` (StepOptions::precision: f32 on either
// device, bf16 on CUDA), naming what can; an empty string when it can.
std::string fused_mlp_step_unsupported(DType precision, Device device);

class FusedMlpStep final : public Step {
 public:
  // Throws ValueError (naming the reason) when fused_mlp_step_unsupported(model) is not empty.
  // Takes StepOptions' precision, micro-batches and reduction across ranks, and its `fused`
  // settings; its loss must be the plain cross-entropy (ValueError otherwise).
  FusedMlpStep(nn::Sequential& model, optim::Optimizer& optimizer, std::size_t batch_size,
               const StepOptions& options = {});
  ~FusedMlpStep() override;
  FusedMlpStep(const FusedMlpStep&) = delete;
  FusedMlpStep& operator=(const FusedMlpStep&) = delete;

  // One step on a batch: x f32 [B, in], y class indices [B] (i32 or i64), both on the model's
  // device, 1 ≤ B ≤ batch_size. The parameters' .grad tensors hold this step's gradients after it
  // (but for the weights' when the update ran inside the GEMMs: sgd_in_gemm).
  void step(const Tensor& x, const Tensor& y) override;

  // Σ of the per-image losses since the last reset (f32 scalar in the model's memory): read it
  // once per epoch; reading synchronizes and reports device-side errors.
  const Tensor& loss_sum() const override;
  const Tensor& batch_loss() const override;  // the last step's mean loss, f32 scalar, same memory
  void reset_loss_sum() override;

  bool graph_captured() const;
  std::size_t graph_kernel_nodes() const;  // kernel nodes of the captured step (0 until captured)
  // What the captured graph should hold: the kernels and library calls the last full-batch eager
  // step issued (kernels::cuda::launches_issued; CUDA only, 0 before a full batch).
  std::size_t step_launches() const;
  std::size_t graph_replays() const;  // steps run by replaying the graph so far
  // Host seconds spent in the reduction across ranks since the last reset (reduce_across_ranks;
  // on the CPU the whole exchange, on CUDA only the host's share of issuing it).
  double communication_seconds() const override;
  void reset_communication_seconds() override;
  // How the step runs, for logs: "fused MLP step, CUDA graph, 8 kernels per step; cuBLASLt epilogues: ...".
  const nn::Loss& loss() const override;  // the plain cross-entropy
  std::string describe() const override;
  std::string kind() const override { return "fused"; }
  // graph_kernels, step_launches and graph_replays.
  std::vector<std::pair<std::string, std::int64_t>> counters() const override;
  // Whether the last step updated the weights inside their GEMMs (FusedMlpStepOptions::sgd_in_gemm).
  bool sgd_in_gemm_applied() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::train
