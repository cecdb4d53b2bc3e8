// The fused MLP step's per-layer GEMMs (see fused_mlp_layers.h).
#include "train/fused_mlp_layers.h"

#include "kernels/bias_activation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "layers/activation.h"
#include "layers/linear.h"
#include "train/fused_mlp_step.h"

namespace ember::train {

// Declared in fused_mlp_step.h: what the layers below can run.
std::string fused_mlp_step_unsupported(const nn::Sequential& model) {
  const auto& children = model.named_children();
  if (children.empty()) return "the model has no layers";
  bool expect_linear = true;
  for (std::size_t i = 0; i < children.size(); ++i) {
    const nn::Module* m = children[i].second.get();
    const std::string where = "layer " + children[i].first + " (" + m->type_name() + ")";
    for (std::size_t j = 0; j < i; ++j)
      if (children[j].second.get() == m && m->kind() == nn::ModuleKind::linear)
        return where + " is the same Linear as layer " + children[j].first +
               " (shared weights): the fused step keeps one gradient buffer per layer";
    if (m->kind() == nn::ModuleKind::linear) {
      const auto& linear = static_cast<const nn::Linear&>(*m);
      if (!expect_linear) return where + " follows a Linear without a ReLU between them";
      if (!linear.bias().defined()) return where + " has no bias";
      if (linear.weight().dtype() != DType::f32) return where + " is not f32";
      expect_linear = false;
    } else if (m->kind() == nn::ModuleKind::relu) {
      if (expect_linear) return where + " is not preceded by a Linear";
      expect_linear = true;
    } else {
      return where + " is neither Linear nor ReLU";
    }
  }
  if (expect_linear) return "the model ends with a ReLU; the step needs logits from a Linear layer";
  return "";
}

std::string fused_mlp_step_unsupported(DType precision, Device device) {
  if (precision == DType::f16)
    return "f16 needs loss scaling, whose skipped steps are decided on the host; train f16 with AutogradStep "
           "(precision f16, with its GradScaler), or use bf16";
  if (precision != DType::f32 && precision != DType::bf16)
    return detail::concat("precision must be f32 or bf16, got ", precision);
  if (precision == DType::bf16 && !device.is_cuda())
    return "bf16 runs on CUDA (cuBLASLt's 16-bit GEMMs); on the CPU train bf16 with AutogradStep (precision bf16: "
           "autocast and the CPU's bf16 GEMM)";
  return "";
}

namespace fused_mlp {

using kernels::GemmEpilogue;
using kernels::Transpose;

MlpLayerGemms::MlpLayerGemms(Device device, DType operands, bool epilogues, std::size_t batch, std::size_t widest)
    : device_(device), operands_(operands), epilogues_(epilogues) {
  if (!mixed()) return;
  const auto B = static_cast<std::int64_t>(batch), W = static_cast<std::int64_t>(widest);
  unfused_sums_ = zeros({B, W}, {.device = device});
  unfused_bias_ = zeros({W}, {.device = device});
  discarded_bias_grad_ = zeros({W}, {.dtype = operands, .device = device});
}

bool MlpLayerGemms::lt(const kernels::EpilogueGemm& g) const {
  return on_device([] { return false; }, [&](auto) { return epilogues_ && kernels::cuda::gemm_epilogue_supported(g); });
}

void MlpLayerGemms::gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, const float* a,
                         std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc) const {
  on_device([&] { kernels::cpu::gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc); },
            [&](auto stream) { kernels::cuda::gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, stream); });
}

void MlpLayerGemms::gemm_epilogue(const kernels::EpilogueGemm& g) const {
  on_device([] {}, [&](auto stream) { kernels::cuda::gemm_epilogue(g, stream); });
}

kernels::EpilogueGemm MlpLayerGemms::forward_gemm(const MlpLayer& l, const void* a, std::size_t rows) const {
  return {.epilogue = l.relu ? GemmEpilogue::relu_aux_bias : GemmEpilogue::bias,
          .ta = Transpose::no,
          .tb = Transpose::yes,
          .m = rows,
          .n = l.out,
          .k = l.in,
          .a = a,
          .lda = l.in,
          .b = weight_operand(l).raw_bytes(),
          .ldb = l.in,
          .c = l.h.raw_bytes(),
          .ldc = l.out,
          .vec = (mixed() ? l.bias_half : l.bias).raw_bytes(),
          .aux = l.mask.defined() ? l.mask.raw_bytes() : nullptr,
          .ab = operands_,
          .out = operands_};
}

bool MlpLayerGemms::forward(MlpLayer& l, const void* a, std::size_t rows) const {
  if (const kernels::EpilogueGemm fused = forward_gemm(l, a, rows); lt(fused)) {
    gemm_epilogue(fused);
    return l.relu;
  }
  if (mixed()) {
    forward_unfused_half(l, a, rows);
    return false;
  }
  float* h = l.h.raw<float>();
  float* bias = l.bias.raw<float>();
  gemm(Transpose::no, Transpose::yes, rows, l.out, l.in, static_cast<const float*>(a), l.in, l.weight.raw<float>(),
       l.in, h, l.out);
  on_device(
      [&] {
        if (l.relu)
          kernels::cpu::bias_relu_forward(h, bias, rows, l.out);
        else
          kernels::cpu::bias_forward(h, bias, rows, l.out);
      },
      [&](auto stream) {
        if (l.relu)
          kernels::cuda::bias_relu_forward(h, bias, rows, l.out, stream);
        else
          kernels::cuda::bias_forward(h, bias, rows, l.out, stream);
      });
  return false;
}

// bf16 without cuBLASLt's epilogue (CUDA): the f32 sums, plus the rounded bias (and the ReLU),
// rounded once — the epilogue's arithmetic.
void MlpLayerGemms::forward_unfused_half(const MlpLayer& l, const void* a, std::size_t rows) const {
  on_device([] {},
            [&](auto stream) {
              float* sums = unfused_sums_.raw<float>();
              float* bias = unfused_bias_.raw<float>();
              kernels::cuda::gemm_half(Transpose::no, Transpose::yes, rows, l.out, l.in, operands_, a, l.in,
                                       l.weight_half.raw_bytes(), l.in, DType::f32, sums, l.out, false, stream);
              kernels::cuda::cast(operands_, l.bias_half.raw_bytes(), DType::f32, bias, l.out, stream);
              if (l.relu)
                kernels::cuda::bias_relu_forward(sums, bias, rows, l.out, stream);
              else
                kernels::cuda::bias_forward(sums, bias, rows, l.out, stream);
              kernels::cuda::cast(DType::f32, sums, operands_, l.h.raw_bytes(), rows * l.out, stream);
            });
}

void MlpLayerGemms::cast(const Tensor& from, const Tensor& to, std::size_t n) const {
  on_device(
      [&] { kernels::cpu::cast(from.dtype(), from.raw_bytes(), to.dtype(), to.raw_bytes(), n); },
      [&](auto stream) { kernels::cuda::cast(from.dtype(), from.raw_bytes(), to.dtype(), to.raw_bytes(), n, stream); });
}

void MlpLayerGemms::cast(const kernels::CastList& list) const {
  on_device([&] { kernels::cpu::cast_list(list, operands_); },
            [&](auto stream) { kernels::cuda::cast_list(list, operands_, stream); });
}

void MlpLayerGemms::descend_in_gemm(const MlpLayer& l, const void* below, const void* dz, std::size_t rows,
                                    float lr) const {
  EMBER_CHECK(!device_.is_cuda() && !mixed(), ValueError, "the update inside the GEMMs runs on the CPU in f32");
  kernels::cpu::gemm(Transpose::yes, Transpose::no, l.out, l.in, rows, -lr, static_cast<const float*>(dz), l.out,
                     static_cast<const float*>(below), l.in, 1.0f, l.weight.raw<float>(), l.in);
}

void MlpLayerGemms::bias_grad_sum(const MlpLayer& l, std::size_t rows, float* db) const {
  float* workspace = l.sum_workspace.defined() ? l.sum_workspace.raw<float>() : nullptr;
  on_device([&] { kernels::cpu::sum(l.g.raw<float>(), db, 1, rows, l.out, 1.0f); },
            [&](auto stream) {
              ext::visit_float_or_half(operands_, [&](auto zero) {
                using T = decltype(zero);
                kernels::cuda::sum(l.g.raw<T>(), db, 1, rows, l.out, 1.0f, workspace, stream);
              });
            });
}

void MlpLayerGemms::weight_gradient(const MlpLayer& l, const void* below, const void* dz, std::size_t rows,
                                    bool bias_grad_done, float* dw, float* db) const {
  const kernels::EpilogueGemm weight_and_bias{.epilogue = GemmEpilogue::bgrad_a,
                                              .ta = Transpose::yes,
                                              .tb = Transpose::no,
                                              .m = l.out,
                                              .n = l.in,
                                              .k = rows,
                                              .a = dz,
                                              .lda = l.out,
                                              .b = below,
                                              .ldb = l.in,
                                              .c = dw,
                                              .ldc = l.in,
                                              .vec = db,
                                              .ab = operands_,
                                              .out = DType::f32};
  if (!bias_grad_done && lt(weight_and_bias)) {
    gemm_epilogue(weight_and_bias);
    return;
  }
  if (mixed())
    on_device([] {},
              [&](auto stream) {
                kernels::cuda::gemm_half(Transpose::yes, Transpose::no, l.out, l.in, rows, operands_, dz, l.out, below,
                                         l.in, DType::f32, dw, l.in, false, stream);
              });
  else
    gemm(Transpose::yes, Transpose::no, l.out, l.in, rows, static_cast<const float*>(dz), l.out,
         static_cast<const float*>(below), l.in, dw, l.in);
  if (!bias_grad_done) bias_grad_sum(l, rows, db);
}

bool MlpLayerGemms::input_gradient(const MlpLayer& l, MlpLayer& prev, const void* dz, std::size_t rows, bool masked,
                                   float* prev_db) const {
  const kernels::EpilogueGemm masked_input_grad{.epilogue = GemmEpilogue::drelu_bgrad,
                                                .ta = Transpose::no,
                                                .tb = Transpose::no,
                                                .m = rows,
                                                .n = prev.out,
                                                .k = l.out,
                                                .a = dz,
                                                .lda = l.out,
                                                .b = weight_operand(l).raw_bytes(),
                                                .ldb = l.in,
                                                .c = prev.g.raw_bytes(),
                                                .ldc = prev.out,
                                                .vec = mixed() ? discarded_bias_grad_.raw_bytes() : prev_db,
                                                .aux = prev.mask.defined() ? prev.mask.raw_bytes() : nullptr,
                                                .ab = operands_,
                                                .out = operands_};
  if (masked && lt(masked_input_grad)) {
    gemm_epilogue(masked_input_grad);
    return !mixed();
  }
  if (mixed()) {  // the rounded dz·W, masked by the saved activation (exact)
    on_device([] {},
              [&](auto stream) {
                bfloat16* dprev = prev.g.raw<bfloat16>();
                kernels::cuda::gemm_half(Transpose::no, Transpose::no, rows, prev.out, l.out, operands_, dz, l.out,
                                         l.weight_half.raw_bytes(), l.in, operands_, dprev, prev.out, false, stream);
                kernels::cuda::activation_grad<bfloat16>(kernels::ActivationGrad::relu, dprev, prev.h.raw<bfloat16>(),
                                                         dprev, rows * prev.out, kernels::WriteMode::overwrite, {},
                                                         stream);
              });
    return false;
  }
  float* dprev = prev.g.raw<float>();
  float* workspace = prev.sum_workspace.defined() ? prev.sum_workspace.raw<float>() : nullptr;
  gemm(Transpose::no, Transpose::no, rows, prev.out, l.out, static_cast<const float*>(dz), l.out, l.weight.raw<float>(),
       l.in, dprev, prev.out);
  on_device([&] { kernels::cpu::bias_relu_backward(dprev, prev.h.raw<float>(), dprev, prev_db, rows, prev.out); },
            [&](auto stream) {
              kernels::cuda::bias_relu_backward(dprev, prev.h.raw<float>(), dprev, prev_db, rows, prev.out, workspace,
                                                stream);
            });
  return true;
}

std::vector<kernels::CastList> half_copy_lists(const std::vector<MlpLayer>& layers, const Tensor& x_half) {
  std::vector<kernels::CastList> lists;
  const auto copy = [&lists](const float* from, const Tensor& to, std::size_t n) {
    if (lists.empty() || lists.back().full()) lists.emplace_back();
    lists.back().add(from, to.raw_bytes(), n);
  };
  for (const MlpLayer& l : layers) {
    copy(l.weight.raw<float>(), l.weight_half, l.out * l.in);
    copy(l.bias.raw<float>(), l.bias_half, l.out);
  }
  copy(nullptr, x_half, 0);
  return lists;
}

}  // namespace fused_mlp
}  // namespace ember::train
