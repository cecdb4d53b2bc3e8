// bench_kernels' layer_norm family: F.layer_norm's kernels (kernels/layer_norm.h), forward and
// forward + backward, in f32 and bf16, at the ViT's rows (batch 64 × 50 tokens, width 64) and at a
// transformer's long sequences (B 32 × L 1,024, d 64); quick: 256 rows of 64. Each row is read and
// written once forward; the backward reads the upstream gradient and the input and writes the
// input's gradient (γ's and β's gradients are a width's worth): 2 and 5 row-sized passes, memory
// bound (a few FLOPs a byte), so the figure that matters is the share of the copy's bandwidth.
#include "apps/bench/case.h"
#include "core/ops/ops.h"
#include "core/tensor/random.h"

namespace ember::apps::bench {

namespace {
void add_layer_norm_shape(std::vector<Case>& cases, const Arena& arena, std::int64_t rows, std::int64_t width) {
  Generator g(7);
  const Tensor x32 = uniform({rows, width}, -2, 2, {}, &g), up32 = uniform({rows, width}, -1, 1, {}, &g),
               weight32 = uniform({width}, 0.5, 1.5, {}, &g), bias32 = uniform({width}, -0.5, 0.5, {}, &g);
  const std::string label = std::to_string(rows) + " rows × " + std::to_string(width);
  const auto add = [&](DType dtype, bool backward) {
    const Tensor x = arena.copy(x32.to(dtype)), upstream = arena.copy(up32.to(dtype));
    const Tensor weight = arena.copy(weight32.to(dtype)), bias = arena.copy(bias32.to(dtype));  // as the input
    const auto run_once = [=](int) {
      if (!backward) {
        Tensor out = layer_norm(x, {width}, weight, bias);
        return;
      }
      Tensor xl = x.detach().set_requires_grad(), wl = weight.detach().set_requires_grad(),
             bl = bias.detach().set_requires_grad();
      sum(layer_norm(xl, {width}, wl, bl) * upstream).backward();
    };
    // Checked against the formula in f32 ops on the same values: (x − mean)/√(var + ε)·γ + β, with
    // |x − mean|/σ ≤ 1.8 for x in [−2, 2], so |y| ≤ 1.8·1.5 + 0.5 < 4. In f32 within the two ways'
    // rounding (1e-4); in bf16 (the input, γ and β rounded alike on both sides) within the output's
    // one rounding, half an ulp below 4 (2^-7), twice over for slack: 1.6e-2.
    const double allowed = dtype == DType::f32 ? 1e-4 : 1.6e-2;
    const auto check = [=]() -> std::string {
      const Tensor xf = x.to(DType::f32), centred = xf - mean(xf, -1, true);
      const Tensor want =
          (centred / sqrt(var(xf, -1, 0, true) + 1e-5) * weight.to(DType::f32) + bias.to(DType::f32)).cpu();
      const Tensor got = layer_norm(x, {width}, weight, bias).cpu().to(DType::f32);
      const double worst = max(reshape(abs(got - want), {1, -1}), -1).to_vector<float>()[0];
      return worst <= allowed ? std::string() : "differs from the formula by " + std::to_string(worst);
    };
    const double pass_bytes = static_cast<double>(dtype_size(dtype)) * rows * width;
    cases.push_back({"layer_norm",
                     std::string(dtype == DType::f32 ? "f32" : "bf16") + (backward ? " fwd+bwd" : " forward"), true,
                     arena.device(), label, pass_bytes * (backward ? 5 : 2), 0, 1, run_once, check});
  };
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const bool backward : {false, true}) add(dtype, backward);
}
}  // namespace

void add_layer_norm(std::vector<Case>& cases, const Arena& arena, bool quick) {
  if (quick) return add_layer_norm_shape(cases, arena, 256, 64);
  add_layer_norm_shape(cases, arena, 64 * 50, 64);    // the ViT's
  add_layer_norm_shape(cases, arena, 32 * 1024, 64);  // B 32 × L 1,024, d 64
}

}  // namespace ember::apps::bench
