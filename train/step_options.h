// What a training step is given, written once: StepOptions holds what every step takes — the loss,
// the precision, micro-batches, the reduction across ranks — and make_step's choice, beside each
// step's own settings (FusedMlpStepOptions, AutogradStepOptions), which hold nothing the others do.
#pragma once

#include <cstddef>

#include "base/dtype.h"
#include "layers/loss.h"
#include "optim/grad_scaler.h"

namespace ember::train {

// make_step's choice: automatic takes the fused step where it can run and fusion is on (Note
// [fusion off-switch]), else autograd; fused asks for the fused step or a ValueError saying why
// not; autograd asks for autograd.
enum class StepChoice { automatic, fused, autograd };

// The fused MLP step's own settings (train/fused_mlp_step.h).
struct FusedMlpStepOptions {
  // cuBLASLt epilogues on CUDA where cuBLASLt supports them; false forces plain GEMMs and ember's
  // own bias/ReLU kernels (for comparison, or as a fallback). The global off-switch (Note [fusion
  // off-switch], base/fusion.h) turns this and sgd_in_gemm off.
  bool gemm_epilogues = true;
  // Capture the step in a CUDA graph after `eager_steps` (≥ 1) eager steps on full batches (so
  // that every gradient and optimizer buffer exists before capture) and replay it for every full
  // batch. CUDA only. A change to the optimizer's settings other than the learning rate, or to
  // its state (load_state_dict), drops the graph and captures again. Never with micro-batches.
  bool cuda_graph = true;
  int eager_steps = 3;
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
};

// The autograd step's own settings (train/step.h).
struct AutogradStepOptions {
  // f16's loss scaler (optim::GradScaler; StepOptions::precision).
  optim::GradScalerOptions grad_scaler = {};
  // > 0: the gradients clipped to this global 2-norm before the update (optim::clip_grad_norm),
  // after the ranks' average and after an f16 scaler's unscaling, as a PyTorch loop places it.
  double clip_grad_norm = 0.0;
};

struct StepOptions {
  // The criterion (nn::Loss; cross-entropy by default). The fused MLP step computes the plain
  // cross-entropy only (nn::Loss::is_plain_cross_entropy); any other runs on the autograd step.
  nn::Loss loss = {};
  // Mixed precision: bf16 or f16 runs the forward pass and the loss under autocast to that dtype
  // on the model's device (core/ops/autocast.h); f32 leaves autocast off. The parameters and the
  // optimizer stay f32 either way. f16 also scales the loss (AutogradStepOptions::grad_scaler):
  // its gradients would otherwise underflow below 2^-24; bf16 has f32's range and needs no scaler.
  // The fused step runs f32 on either device and bf16 on CUDA (Note [fused step in bf16]); f16's
  // scaling decides on the host whether a step is skipped, so it runs on autograd.
  DType precision = DType::f32;
  // Gradient accumulation: each batch split into this many micro-batches, rows m, m + K, ... (the
  // rows rank m of K ranks would take), their gradients summed in order and divided by K — one
  // process reproducing K ranks bit for bit. Must divide every batch's size.
  std::size_t micro_batches = 1;
  // Data-parallel (dist::): average the gradients over the ranks before every update (the
  // autograd step in buckets during backward; the fused step in one collective, inside its graph).
  bool reduce_across_ranks = false;
  // make_step's: which step, and the largest batch the fused step is built for.
  StepChoice choice = StepChoice::automatic;
  std::size_t batch_size = 0;
  FusedMlpStepOptions fused = {};
  AutogradStepOptions autograd = {};
};

}  // namespace ember::train
