// FusedMlpStep's arithmetic (see fused_mlp_step.h): the loss, the order of the layers' GEMMs
// (train/fused_mlp_layers.h, which gives the notation), micro-batches and the update.
//
// Note [fused step in bf16]
// FusedMlpStepOptions::precision = bf16 (CUDA) computes what the autograd step computes under
// autocast (core/ops/autocast.h), but for one difference, on the side of accuracy:
//   - as autocast: every step starts from bf16 copies of the f32 parameters and of the input
//     (kernels::CastList: one launch for all of them); each Linear multiplies bf16 operands with f32 sums and rounds
//     its output — bias and ReLU included — once to bf16 (cuBLASLt's 16-bit epilogues); the logits are widened to f32
//     for the loss, and the loss gradient is rounded to bf16 as it enters the last layer; dz·W and its ReLU mask give
//     the layer below its bf16 gradient;
//   - unlike autocast, the GEMMs write dW and db of the f32 master parameters in f32 (C in f32,
//     BGRADB's bias gradient in C's type), where autocast rounds them to bf16 and widens them
//     back. So every bias gradient comes from its layer's weight-gradient GEMM: DRELU_BGRAD's
//     would be in bf16, and is discarded.
// The optimizer updates the f32 parameters, and the next step's copies see the update. Where
// cuBLASLt has no algorithm for a 16-bit epilogue (or epilogues are off), cuBLAS's 16-bit GEMM and
// ember's kernels give the same roundings: the forward sums in f32, adds the rounded bias and
// rounds once; the masked gradient is the rounded dz·W times the mask, as autograd's.
#include "train/fused_mlp_step_impl.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "base/fault_point.h"
#include "base/fusion.h"
#include "core/cuda/graph.h"
#include "core/cuda/kernel_errors.h"
#include "core/cuda/runtime.h"
#include "core/ops/dispatch.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "distributed/dist.h"
#include "kernels/gemm.h"
#include "kernels/gemm_epilogue.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "layers/activation.h"
#include "layers/linear.h"
#include "train/fused_mlp_layers.h"

namespace ember::train {

using fused_mlp::MlpLayer;

bool FusedMlpStep::Impl::sgd_in_gemm_applies() const {
  if (!options.fused.sgd_in_gemm || cuda() || options.reduce_across_ranks || options.micro_batches != 1) return false;
  const auto& groups = optimizer->param_groups();
  for (const MlpLayer& l : layers)
    if (l.weight_group >= groups.size() || !optimizer->update_is_plain_descent(groups[l.weight_group].options))
      return false;
  return true;
}

void FusedMlpStep::Impl::loss(const Tensor& y, std::size_t rows) {
  const MlpLayer& last = layers.back();
  const float* logits_in = (mixed() ? logits : last.h).raw<float>();
  float* logits_grad = (mixed() ? dlogits : last.g).raw<float>();
  const float scale = 1.0f / static_cast<float>(rows);
  auto run = [&](auto target_type) {
    using Target = decltype(target_type);
    const Target* targets = y.raw<Target>();
    on_device(
        [&] {
          kernels::cpu::cross_entropy_fused(logits_in, targets, logits_grad, row_loss.raw<float>(),
                                            batch_loss.raw<float>(), loss_sum.raw<float>(), rows, classes, scale,
                                            &cpu_error);
        },
        [&](auto stream) {
          kernels::cuda::cross_entropy_fused(logits_in, targets, logits_grad, row_loss.raw<float>(),
                                             batch_loss.raw<float>(), loss_sum.raw<float>(), rows, classes, scale,
                                             cuda::device_error_record(device),
                                             reinterpret_cast<unsigned*>(blocks_done.raw<std::int32_t>()), stream);
        });
    if (cpu_error.code != 0) {  // the CPU's record, at once; CUDA's is read at the epoch's end
      const kernels::DeviceErrorRecord found = cpu_error;
      cpu_error = {};
      throw_kernel_error(found, device);
    }
  };
  if (y.dtype() == DType::i64)
    run(std::int64_t{});
  else
    run(std::int32_t{});
}

void FusedMlpStep::Impl::run(const Tensor& x, const Tensor& y, std::size_t rows) {
  forward_backward(x, y, rows);
  reduce_and_update();
}

void FusedMlpStep::Impl::reduce_and_update() {
  if (options.reduce_across_ranks && dist::is_initialized()) {  // (a world of one too: the same calls)
    const auto t0 = std::chrono::steady_clock::now();
    fault_point("allreduce");  // Note [fault points]
    dist::all_reduce(grads);
    communication_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mul_(grads, 1.0 / static_cast<double>(dist::world_size()));
  }
  // Weights already updated inside their GEMMs have no gradient: step() skips them.
  if (sgd_in_gemm)
    for (MlpLayer& l : layers) l.weight.set_grad(Tensor());
  optimizer->step();
}

void FusedMlpStep::Impl::run_micro_batches(const Tensor& x, const Tensor& y, std::size_t rows) {
  const auto k = static_cast<std::int64_t>(options.micro_batches);
  const std::int64_t per = static_cast<std::int64_t>(rows) / k, in = x.size(1);
  Tensor loss_total = zeros({}, {.device = device});
  for (std::int64_t m = 0; m < k; ++m) {
    const Tensor xm = slice(x.reshape({per, k, in}), 1, m, 1).reshape({per, in});
    const Tensor ym = slice(y.reshape({per, k}), 1, m, 1).reshape({per});
    into_scratch = m > 0;
    forward_backward(xm, ym, static_cast<std::size_t>(per));
    into_scratch = false;
    if (m > 0) add_(grads, scratch);
    add_(loss_total, batch_loss);
  }
  mul_(grads, 1.0 / static_cast<double>(k));
  batch_loss.copy_(mul_(loss_total, 1.0 / static_cast<double>(k)));
  reduce_and_update();
}

void FusedMlpStep::Impl::forward_backward(const Tensor& x, const Tensor& y, std::size_t rows) {
  const MlpLayer& last = layers.back();
  Tensor input = x;
  if (mixed()) {  // Note [fused step in bf16]: this step's bf16 copies
    kernels::CastList& with_input = half_copies.back();
    with_input.from[with_input.count - 1] = x.raw<float>();
    with_input.n[with_input.count - 1] = rows * layers.front().in;
    for (const kernels::CastList& list : half_copies) gemms.cast(list);
    input = x_half;
  }
  std::vector<bool> masked(layers.size(), false);
  const void* a = input.raw_bytes();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    masked[i] = gemms.forward(layers[i], a, rows);
    a = layers[i].h.raw_bytes();
  }
  if (mixed()) gemms.cast(last.h, logits, rows * classes);
  loss(y, rows);
  if (mixed()) gemms.cast(dlogits, last.g, rows * classes);
  // Backward, top layer first. A layer's bias gradient comes from the GEMM below it when that
  // GEMM ran with DRELU_BGRAD (f32 only); otherwise from its own weight-gradient GEMM (BGRADB) or a sum.
  bool bias_grad_done = false;
  for (std::size_t i = layers.size(); i-- > 0;) {
    MlpLayer& l = layers[i];
    const void* below = i == 0 ? input.raw_bytes() : layers[i - 1].h.raw_bytes();
    const void* dz = l.g.raw_bytes();
    if (!sgd_in_gemm)
      gemms.weight_gradient(l, below, dz, rows, bias_grad_done, weight_grad(l), bias_grad(l));
    else if (!bias_grad_done)
      gemms.bias_grad_sum(l, rows, bias_grad(l));
    bias_grad_done = i > 0 && gemms.input_gradient(l, layers[i - 1], dz, rows, masked[i - 1], bias_grad(layers[i - 1]));
    // W ← W − lr·dzᵀ·a, after the input gradient's GEMM has read W (CPU, f32).
    if (sgd_in_gemm) gemms.descend_in_gemm(l, below, dz, rows, optimizer->kernel_lr(l.weight_group));
  }
}

void FusedMlpStep::Impl::attach_grads() {
  auto attach = [](Tensor& param, const Tensor& grad) {
    const Tensor current = param.grad();
    if (!current.defined() || current.raw_bytes() != grad.raw_bytes()) param.set_grad(grad);
  };
  for (MlpLayer& l : layers) {
    attach(l.weight, l.weight_grad);
    attach(l.bias, l.bias_grad);
  }
}

}  // namespace ember::train
