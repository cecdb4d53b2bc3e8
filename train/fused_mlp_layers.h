// The layers of the fused MLP step (train/fused_mlp_step.h) and their GEMMs: per Linear layer the
// forward GEMM with bias and ReLU, the weight gradient with the bias gradient, and the input
// gradient masked by the ReLU below — through cuBLASLt's epilogues on CUDA where cuBLASLt has an
// algorithm for them, otherwise plain GEMMs and ember's kernels (the CPU's twins on the CPU). In
// f32 on both devices, or in bf16 on CUDA (Note [fused step in bf16] in fused_mlp_step_math.cpp).
// Notation, per layer with W [out, in]: z = a·Wᵀ + b, a' = relu(z) (h holds a' for hidden layers,
// the logits for the last one); dW = dzᵀ·a, db = Σ_rows dz, da = dz·W, and dz of the layer below
// = da ⊙ [h > 0].
#pragma once

#include <cstddef>
#include <vector>

#include "core/ops/dispatch.h"
#include "core/tensor/tensor.h"
#include "kernels/elementwise.h"
#include "kernels/gemm_epilogue.h"

namespace ember::train::fused_mlp {

struct MlpLayer {
  Tensor weight, bias;
  Tensor weight_grad, bias_grad;        // views of the step's one flat gradient buffer
  Tensor weight_scratch, bias_scratch;  // views of the second: a micro-batch's gradients after the first
  std::size_t in = 0, out = 0;
  bool relu = false;              // followed by a ReLU (every layer but the last)
  Tensor h;                       // [batch, out]: relu output, or the logits (in the operands' type)
  Tensor g;                       // [batch, out]: gradient of the pre-activation z (likewise)
  Tensor mask;                    // ReLU mask bits from the cuBLASLt forward (CUDA, hidden layers)
  Tensor weight_half, bias_half;  // bf16 copies of the parameters, remade every step (Note [fused step in bf16])
  Tensor sum_workspace;           // the bias gradient's column sums, sized for the largest batch
  std::size_t weight_group = 0;   // the optimizer's group holding the weight (groups.size(): none)
};

// The GEMM sequence of the layers on one device with one operand type; it owns the scratch
// buffers of the unfused bf16 path, made once (a step allocates nothing).
class MlpLayerGemms {
 public:
  MlpLayerGemms() = default;
  // `epilogues`: use cuBLASLt's where it has them (FusedMlpStepOptions::gemm_epilogues); `widest`:
  // the largest layer width; `batch`: the largest batch.
  MlpLayerGemms(Device device, DType operands, bool epilogues, std::size_t batch, std::size_t widest);

  bool mixed() const { return operands_ != DType::f32; }
  DType operands() const { return operands_; }

  // Runs cpu() or cuda(stream) for the device (Note [device dispatch] in core/ops/dispatch.h).
  template <class Cpu, class Cuda>
  decltype(auto) on_device(Cpu&& cpu, Cuda&& cuda) const {
    return ext::dispatch_device(device_, std::forward<Cpu>(cpu), std::forward<Cuda>(cuda));
  }

  // Layer l's forward GEMM with its epilogue, from input `a` ([rows, in], in the operands' type).
  kernels::EpilogueGemm forward_gemm(const MlpLayer& l, const void* a, std::size_t rows) const;
  // Whether cuBLASLt runs this GEMM with its epilogue here (CUDA, epilogues on, supported).
  bool lt(const kernels::EpilogueGemm& g) const;

  // Forward of layer l from input `a`; returns whether the ReLU mask was written.
  bool forward(MlpLayer& l, const void* a, std::size_t rows) const;
  // dW = dzᵀ·a into `dw` (f32), and db = Σ dz into `db` unless `bias_grad_done`.
  void weight_gradient(const MlpLayer& l, const void* below, const void* dz, std::size_t rows, bool bias_grad_done,
                       float* dw, float* db) const;
  // The gradient of the layer below's pre-activation, dz·W ⊙ [h > 0]; in f32 also that layer's
  // bias gradient into `prev_db` (in bf16 that comes from its weight gradient: returns false).
  bool input_gradient(const MlpLayer& l, MlpLayer& prev, const void* dz, std::size_t rows, bool masked,
                      float* prev_db) const;
  // db = Σ_rows dz in f32.
  void bias_grad_sum(const MlpLayer& l, std::size_t rows, float* db) const;
  // W ← W − lr·dzᵀ·a as one GEMM (α = −lr, β = 1): plain SGD's update of the weights inside the
  // weight-gradient product (FusedMlpStepOptions::sgd_in_gemm; the CPU, f32).
  void descend_in_gemm(const MlpLayer& l, const void* below, const void* dz, std::size_t rows, float lr) const;
  // The first n elements of `from` cast into `to` (the types of the two tensors).
  void cast(const Tensor& from, const Tensor& to, std::size_t n) const;
  // Every entry of `list` (f32) cast to the operands' type, in one launch on CUDA.
  void cast(const kernels::CastList& list) const;

 private:
  const Tensor& weight_operand(const MlpLayer& l) const { return mixed() ? l.weight_half : l.weight; }
  void gemm(kernels::Transpose ta, kernels::Transpose tb, std::size_t m, std::size_t n, std::size_t k, const float* a,
            std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc) const;
  void gemm_epilogue(const kernels::EpilogueGemm& g) const;  // only where lt() said yes
  void forward_unfused_half(const MlpLayer& l, const void* a, std::size_t rows) const;

  Device device_;
  DType operands_ = DType::f32;
  bool epilogues_ = true;
  Tensor unfused_sums_;         // bf16 without cuBLASLt: f32 [batch, widest], a forward GEMM's sums
  Tensor unfused_bias_;         // ... and f32 [widest], its rounded bias widened
  Tensor discarded_bias_grad_;  // bf16: [widest], DRELU_BGRAD's bias gradient in bf16, not used
};

// The casts that make a step's bf16 copies of the layers' parameters and of the input, in as few
// launches as kernels::CastList allows. The input's entry is the last one, empty until the step
// points it at its batch (from[count − 1], n[count − 1]).
std::vector<kernels::CastList> half_copy_lists(const std::vector<MlpLayer>& layers, const Tensor& x_half);

}  // namespace ember::train::fused_mlp
