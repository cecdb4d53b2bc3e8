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

namespace ember::train {

struct FusedMlpStepOptions {
  // cuBLASLt epilogues on CUDA where cuBLASLt supports them; false forces plain GEMMs and ember's
  // own bias/ReLU kernels (for comparison, or as a fallback). The global off-switch (Note [fusion
  // off-switch], base/fusion.h) turns this and sgd_in_gemm off.
  bool gemm_epilogues = true;
  // Capture the step in a CUDA graph after `eager_steps` (≥ 1) eager steps on full batches (so
  // that every gradient and optimizer buffer exists before capture) and replay it for every full
  // batch. CUDA only. A change to the optimizer's settings other than the learning rate, or to
  // its state (load_state_dict), drops the graph and captures again.
  bool cuda_graph = true;
  int eager_steps = 3;
  // Data-parallel: average the gradients over the ranks of dist:: (one collective over all of
  // them, between backward and update; inside the graph on CUDA) before every update.
  bool reduce_across_ranks = false;
  // Gradient accumulation: each step's batch is split into this many micro-batches, rows m, m + K,
  // ... (the rows rank m of K ranks would take), their gradients summed in order and divided by K
  // — one process reproducing K ranks bit for bit. Eager (never captured) when above 1.
  std::size_t micro_batches = 1;
  // Plain SGD's weight update inside the weight-gradient GEMM, on the CPU: W ← W − lr·dzᵀ·a as one
  // GEMM (α = −lr, β = 1) instead of a gradient written, read back and applied by the optimizer:
  // three passes over every weight fewer, and OpenBLAS skips its pass over C for β = 1 (4–5% of a
  // 784-512-256-10 step on one core, docs/performance.md). It applies only where it is the same
  // update — an optim::SGD whose groups hold every weight with no momentum and no weight decay, no
  // reduction across ranks, one micro-batch — and the step runs as without it otherwise. The
  // arithmetic differs from the separate update by rounding only (one rounding of p − lr·g).
  // Then the weights' .grad is left undefined after the step (no gradient was stored); the
  // biases' hold theirs and the optimizer updates them. Off by default: .grad is part of the
  // step's contract.
  bool sgd_in_gemm = false;
  // Mixed precision (CUDA): bf16 runs the step as autocast runs an MLP (Note [fused step in bf16]
  // in fused_mlp_step_math.cpp): bf16 copies of the f32 parameters made at the start of every step,
  // bf16 GEMM operands and activations with f32 sums (cuBLASLt's 16-bit epilogues), the logits
  // widened for an f32 loss; the gradients of the f32 master parameters are written in f32 and the
  // optimizer updates those. f32 is ember's f32 step. f16 is refused: its loss scaling decides on
  // the host whether a step is skipped (train f16 with AutogradStep and its GradScaler).
  DType precision = DType::f32;
};

// Why `model` cannot be trained by FusedMlpStep, or an empty string when it can.
std::string fused_mlp_step_unsupported(const nn::Sequential& model);
// Why FusedMlpStep cannot train in `precision` on `device` (FusedMlpStepOptions::precision: f32 on
// either device, bf16 on CUDA), naming what can; an empty string when it can.
std::string fused_mlp_step_unsupported(DType precision, Device device);

class FusedMlpStep final : public Step {
 public:
  // Throws ValueError (naming the reason) when fused_mlp_step_unsupported(model) is not empty.
  FusedMlpStep(nn::Sequential& model, optim::Optimizer& optimizer, std::size_t batch_size,
               FusedMlpStepOptions options = {});
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
