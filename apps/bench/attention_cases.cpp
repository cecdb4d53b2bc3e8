// bench_kernels' attention family: scaled_dot_product_attention's fused kernels (Note [fused
// attention]) against the reference path (the batched matmul, softmax and matmul that autograd
// records), forward and forward + backward, at the shape the ViT's long sequences stress: B·H =
// 32, L = S = 1024, d = 64, and at the ViT's own, B·H = 256, L = S = 50, d = 16 (quick: B·H = 4,
// L = S = 128, d = 32), on either device; and in bf16 (the CPU's own kernels, Note [bf16 attention];
// on CUDA the f32 kernels on widened copies, which a user of bf16 gets there). The family
// attention_memory (add_attention_memory) measures what each path holds.
#include <chrono>

#include "apps/bench/case.h"
#include "apps/bench/timing.h"
#include "core/ops/ops.h"
#include "core/tensor/random.h"
#include "core/tensor/storage.h"

namespace ember::apps::bench {

namespace {
void add_attention_shape(std::vector<Case>& cases, const Arena& arena, std::int64_t heads, std::int64_t length,
                         std::int64_t dim) {
  const Shape shape{heads, length, dim};
  Generator g(5);
  const Tensor q32 = uniform(shape, -1, 1, {}, &g), k32 = uniform(shape, -1, 1, {}, &g),
               v32 = uniform(shape, -1, 1, {}, &g), up32 = uniform(shape, -1, 1, {}, &g);
  const std::string label =
      "B·H " + std::to_string(heads) + ", L=S " + std::to_string(length) + ", d " + std::to_string(dim);
  // Forward: the two products, 4·B·L·S·d. The backward recomputes the scores and makes the four
  // gradient products: 2.5 times the forward, as FlashAttention counts it.
  const double forward_flops = 4.0 * heads * length * length * dim;
  using Attention = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const AttentionOptions&);
  const auto add = [&](std::string version, Attention attention, bool backward, bool in_use, DType dtype) {
    const Tensor q = arena.copy(q32.to(dtype)), k = arena.copy(k32.to(dtype)), v = arena.copy(v32.to(dtype)),
                 upstream = arena.copy(up32.to(dtype));
    const double io_bytes = 4.0 * static_cast<double>(dtype_size(dtype)) * heads * length * dim;  // q, k, v, out
    const auto run_once = [=](int) {
      if (!backward) {
        Tensor out = attention(q, k, v, AttentionOptions{});
        return;
      }
      Tensor ql = q.detach().set_requires_grad(), kl = k.detach().set_requires_grad(),
             vl = v.detach().set_requires_grad();
      sum(attention(ql, kl, vl, AttentionOptions{}) * upstream).backward();
    };
    // Checked against the f32 reference path on the same values: the same attention within f32
    // rounding of softmax and products, or in bf16 within its roundings (|v| ≤ 1: 2^-8 and an ulp).
    const double allowed = dtype == DType::f32 ? 1e-4 : 8e-3;
    const auto check = [=]() -> std::string {
      const Tensor got = attention(q, k, v, AttentionOptions{}).cpu().to(DType::f32),
                   want = scaled_dot_product_attention_reference(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32),
                                                                 AttentionOptions{})
                              .cpu();
      const double worst = max(reshape(abs(got - want), {1, -1}), -1).to_vector<float>()[0];
      return worst <= allowed ? std::string() : "differs from the reference path by " + std::to_string(worst);
    };
    cases.push_back({"attention", version + (backward ? " fwd+bwd" : " forward"), in_use, arena.device(), label,
                     io_bytes * (backward ? 2 : 1), forward_flops * (backward ? 3.5 : 1.0), 1, run_once, check});
  };
  for (const bool backward : {false, true}) {
    add("fused", scaled_dot_product_attention, backward, true, DType::f32);
    add("reference", scaled_dot_product_attention_reference, backward, false, DType::f32);
    add("fused bf16", scaled_dot_product_attention, backward, true, DType::bf16);
  }
}
}  // namespace

void add_attention(std::vector<Case>& cases, const Arena& arena, bool quick) {
  if (quick) return add_attention_shape(cases, arena, 4, 128, 32);
  add_attention_shape(cases, arena, 32, 1024, 64);
  add_attention_shape(cases, arena, 256, 50, 16);  // the ViT's: batch 64 × 4 heads, 50 tokens
}

void add_attention_memory(std::vector<nlohmann::json>& rows, bool quick) {
  // The host allocator's high-water mark over one forward and backward, above what was held
  // before (q, k, v and the upstream gradient): the fused path's grows with L, the reference
  // path's with L·S, its score matrix and the probabilities autograd keeps.
  const std::int64_t heads = 8, dim = 64;
  using Attention = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const AttentionOptions&);
  for (const std::int64_t length :
       quick ? std::vector<std::int64_t>{64, 128} : std::vector<std::int64_t>{256, 1024, 4096}) {
    Generator g(7);
    const Shape shape{heads, length, dim};
    const Tensor q = uniform(shape, -1, 1, {}, &g), k = uniform(shape, -1, 1, {}, &g),
                 v = uniform(shape, -1, 1, {}, &g), upstream = uniform(shape, -1, 1, {}, &g);
    for (const auto& [version, attention] :
         {std::pair<const char*, Attention>{"fused", scaled_dot_product_attention},
          std::pair<const char*, Attention>{"reference", scaled_dot_product_attention_reference}}) {
      const std::size_t before = memory_stats(Device::cpu()).bytes_in_use;
      reset_peak_memory_stats(Device::cpu());
      const auto start = std::chrono::steady_clock::now();
      {
        Tensor ql = q.detach().set_requires_grad(), kl = k.detach().set_requires_grad(),
               vl = v.detach().set_requires_grad();
        sum(attention(ql, kl, vl, AttentionOptions{}) * upstream).backward();
      }
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      const double peak_mb = static_cast<double>(memory_stats(Device::cpu()).peak_bytes_in_use - before) / 1e6;
      rows.push_back({{"family", "attention_memory"},
                      {"version", std::string(version) + " fwd+bwd"},
                      {"device", "cpu"},
                      {"shape", "B·H 8, L=S " + std::to_string(length) + ", d 64"},
                      {"time_us", us},
                      {"peak_mb", peak_mb},
                      {"status", "ok"},
                      {"in_use", std::string(version) == "fused"}});
    }
  }
}

}  // namespace ember::apps::bench
