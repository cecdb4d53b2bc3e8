// scaled_dot_product_attention on the CPU: the fused kernels (kernels/attention.h) in f32 against
// the reference path in f64, results and gradients, over the cases of PyTorch's semantics; dropout
// against the reference path's mask; rows masked everywhere; the errors; the same bits at 1, 2 and
// 3 threads; and memory that does not hold the score matrix. (The op table's entry adds gradcheck,
// the CUDA comparison and PyTorch's own results, tests/support/op_table_attention.cpp.)
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "core/tensor/random.h"
#include "core/tensor/storage.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

struct Case {
  Shape batch;
  std::int64_t l, s, e;
  enum Mask { none, causal, boolean, additive } mask;
};

Tensor seeded(const Shape& shape, std::uint64_t seed) {
  Generator g(seed);
  return uniform(shape, -1.0, 1.0, {.dtype = DType::f64}, &g);
}

Shape with(Shape batch, std::int64_t rows, std::int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

// The case's options; a boolean mask keeps the diagonal so that no row is masked everywhere (that
// row has a test of its own). An additive mask's values are those of `values` (below).
AttentionOptions options_for(const Case& c, DType dtype, DType values = DType::f64) {
  AttentionOptions o;
  if (c.mask == Case::causal) o.is_causal = true;
  if (c.mask == Case::boolean) {
    Tensor keep = gt(seeded({c.l, c.s}, 7), -0.3);  // about two thirds kept
    std::vector<std::uint8_t> bytes = keep.to_vector<std::uint8_t>();
    for (std::int64_t i = 0; i < c.l; ++i) bytes[static_cast<std::size_t>(i * c.s + i % c.s)] = 1;
    o.attn_mask = from_vector(bytes, {c.l, c.s}, {.dtype = DType::u8});
  }
  if (c.mask == Case::additive) o.attn_mask = mul(seeded({c.l, c.s}, 8), 3.0).to(values).to(dtype);
  return o;
}

struct Run {
  Tensor out, dq, dk, dv;
};

// The case in `dtype`, its inputs holding values of `values` (bf16: the f64 reference on exactly
// the inputs a bf16 run sees).
template <class Attention>
Run run(const Case& c, DType dtype, Attention attention, DType values = DType::f64) {
  const auto input = [&](const Shape& shape, std::uint64_t seed) { return seeded(shape, seed).to(values).to(dtype); };
  Tensor q = input(with(c.batch, c.l, c.e), 1).set_requires_grad();
  Tensor k = input(with(c.batch, c.s, c.e), 2).set_requires_grad();
  Tensor v = input(with(c.batch, c.s, c.e), 3).set_requires_grad();
  const Tensor upstream = input(with(c.batch, c.l, c.e), 4);
  Tensor out = attention(q, k, v, options_for(c, dtype, values));
  sum(out * upstream).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// |got − want| ≤ atol + rtol·|want| everywhere; the number of elements outside.
std::size_t outside(const Tensor& got, const Tensor& want, double rtol, double atol) {
  const std::vector<double> g = got.to(DType::f64).to_vector<double>(), w = want.to(DType::f64).to_vector<double>();
  REQUIRE(g.size() == w.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]))) ++bad;
  return bad;
}

const auto fused = [](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return scaled_dot_product_attention(q, k, v, o);
};
const auto reference = [](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return scaled_dot_product_attention_reference(q, k, v, o);
};

}  // namespace

TEST_CASE("fused attention in f32 is the f64 reference within rtol 1e-5 + atol 1e-6, results and gradients") {
  for (const std::int64_t l : {1, 17, 50, 197})
    for (const std::int64_t e : {16, 32, 64})
      for (const Case::Mask mask : {Case::none, Case::causal, Case::boolean, Case::additive}) {
        const Case c{{2, 2}, l, l == 50 ? 70 : l, e, mask};  // one case with more keys than queries
        INFO("L " << c.l << ", S " << c.s << ", E " << c.e << ", mask kind " << static_cast<int>(mask));
        const Run got = run(c, DType::f32, fused), want = run(c, DType::f64, reference);
        CHECK(outside(got.out, want.out, 1e-5, 1e-6) == 0);
        CHECK(outside(got.dq, want.dq, 1e-5, 1e-6) == 0);
        CHECK(outside(got.dk, want.dk, 1e-5, 1e-6) == 0);
        CHECK(outside(got.dv, want.dv, 1e-5, 1e-6) == 0);
      }
}

TEST_CASE("fused attention in bf16 is the f64 reference on the same inputs within bf16's roundings") {
  // Each probability and each dS is rounded to bf16 (relative error ≤ 2⁻⁹) before its product, and
  // each result once more: an element is off by at most 2⁻⁹ of its own size plus 2⁻⁹ of Σ|terms|,
  // which for these inputs (|q|, |k|, |v|, |dO| ≤ 1) stays under 2⁻⁶ of the tensor's largest
  // element; measured, the worst is under half of that.
  const auto close = [](const Tensor& got, const Tensor& want) {
    const std::vector<double> g = got.to(DType::f64).to_vector<double>(), w = want.to_vector<double>();
    double largest = 0;
    for (double x : w) largest = std::max(largest, std::fabs(x));
    std::size_t bad = 0;
    double worst = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const double error = std::fabs(g[i] - w[i]);
      worst = std::max(worst, error / largest);
      if (!(error <= std::ldexp(std::fabs(w[i]), -9) + std::ldexp(largest, -6))) ++bad;
    }
    INFO("worst error / largest element: " << worst);
    CHECK(bad == 0);
  };
  for (const std::int64_t l : {1, 17, 50, 197})
    for (const std::int64_t e : {16, 64})
      for (const Case::Mask mask : {Case::none, Case::causal, Case::boolean, Case::additive}) {
        const Case c{{2, 2}, l, l == 50 ? 70 : l, e, mask};
        INFO("L " << c.l << ", S " << c.s << ", E " << c.e << ", mask kind " << static_cast<int>(mask));
        const Run got = run(c, DType::bf16, fused), want = run(c, DType::f64, reference, DType::bf16);
        CHECK(got.out.dtype() == DType::bf16);
        close(got.out, want.out);
        close(got.dq, want.dq);
        close(got.dk, want.dk);
        close(got.dv, want.dv);
      }
}

TEST_CASE("fused attention's dropout drops what the reference path's dropout drops") {
  const Case c{{2, 3}, 70, 90, 16, Case::none};
  for (const double p : {0.1, 0.5}) {
    const auto with_dropout = [p](auto attention) {
      return [p, attention](const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions o) {
        o.dropout_p = p;
        o.dropout_seed = 1234;
        o.dropout_offset = 99;
        return attention(q, k, v, o);
      };
    };
    const Run got = run(c, DType::f64, with_dropout(fused)), want = run(c, DType::f64, with_dropout(reference));
    CHECK(outside(got.out, want.out, 1e-12, 1e-13) == 0);
    CHECK(outside(got.dq, want.dq, 1e-12, 1e-13) == 0);
    CHECK(outside(got.dk, want.dk, 1e-12, 1e-13) == 0);
    CHECK(outside(got.dv, want.dv, 1e-12, 1e-13) == 0);
    // And it drops something: the result differs from no dropout.
    const Run plain = run(c, DType::f64, fused);
    CHECK(outside(got.out, plain.out, 1e-3, 1e-3) > 0);
  }
}

TEST_CASE("a query row masked everywhere gives output 0 and gradients 0, not NaN") {
  // Each element type's own kernel: f64's loops, f32's and bf16's AVX-512 lanes where the CPU has them.
  for (const DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    INFO(dtype_name(dtype));
    Tensor q = seeded({1, 4, 8}, 11).to(dtype).set_requires_grad(),
           k = seeded({1, 6, 8}, 12).to(dtype).set_requires_grad(),
           v = seeded({1, 6, 8}, 13).to(dtype).set_requires_grad();
    std::vector<std::uint8_t> keep(4 * 6, 1);
    for (int j = 0; j < 6; ++j) keep[2 * 6 + j] = 0;  // row 2 sees nothing
    const Tensor mask = from_vector(keep, {4, 6}, {.dtype = DType::u8});
    Tensor out = scaled_dot_product_attention(q, k, v, {.attn_mask = mask});
    sum(out).backward();
    const std::vector<double> o = out.to(DType::f64).to_vector<double>(),
                              dq = q.grad().to(DType::f64).to_vector<double>();
    for (int x = 0; x < 8; ++x) {
      CHECK(o[2 * 8 + x] == 0.0);
      CHECK(dq[2 * 8 + x] == 0.0);
    }
    for (double value : o) CHECK(std::isfinite(value));
  }
  // A large finite negative additive mask is a softmax like any other (not "masked").
  const Tensor q = seeded({1, 4, 8}, 11), k = seeded({1, 6, 8}, 12), v = seeded({1, 6, 8}, 13);
  std::vector<std::uint8_t> keep(4 * 6, 1);
  for (int j = 0; j < 6; ++j) keep[2 * 6 + j] = 0;
  const Tensor mask = from_vector(keep, {4, 6}, {.dtype = DType::u8});
  const Tensor additive =
      where(mask, scalar_tensor(0.0, {.dtype = DType::f64}), scalar_tensor(-1e30, {.dtype = DType::f64}));
  const Tensor finite = scaled_dot_product_attention(q, k, v, {.attn_mask = additive});
  CHECK(finite.to_vector<double>()[2 * 8] != 0.0);
}

TEST_CASE("a query row that sees nothing in the first key tiles starts its softmax where it sees keys") {
  // 300 keys are three of the CPU kernel's key tiles. Row 1 sees keys 200 to 299 only, row 2 key
  // 299 only, row 3 the first key only: their running maximum is −∞ through the first tiles.
  const Case c{{2}, 4, 300, 16, Case::none};
  std::vector<std::uint8_t> keep(4 * 300, 1);
  for (int j = 0; j < 300; ++j) {
    keep[1 * 300 + j] = j >= 200;
    keep[2 * 300 + j] = j == 299;
    keep[3 * 300 + j] = j == 0;
  }
  const Tensor mask = from_vector(keep, {4, 300}, {.dtype = DType::u8});
  const auto with_mask = [&](auto attention) {
    return [&, attention](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions&) {
      return attention(q, k, v, AttentionOptions{.attn_mask = mask});
    };
  };
  const Run got = run(c, DType::f32, with_mask(fused)), want = run(c, DType::f64, with_mask(reference));
  CHECK(outside(got.out, want.out, 1e-5, 1e-6) == 0);
  CHECK(outside(got.dq, want.dq, 1e-5, 1e-6) == 0);
  CHECK(outside(got.dk, want.dk, 1e-5, 1e-6) == 0);
  CHECK(outside(got.dv, want.dv, 1e-5, 1e-6) == 0);
}

TEST_CASE("attention refuses a mask with is_causal, shapes that do not fit and masks it cannot read") {
  const Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  const Tensor mask = ones({3, 5}, {.dtype = DType::u8});
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {.attn_mask = mask, .is_causal = true}),
                    Contains("attn_mask and is_causal together"));
  CHECK_THROWS_AS(scaled_dot_product_attention(q, zeros({2, 5, 3}), v), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, zeros({1, 5, 4}), zeros({1, 5, 6})), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({4, 5}, {.dtype = DType::u8})}), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({3, 5}, {.dtype = DType::i64})}),
                  DTypeError);
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {.attn_mask = zeros({3, 5}).set_requires_grad()}),
                    Contains("attn_mask gets no gradient"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {.dropout_p = 1.5}), Contains("dropout_p"));
  // Broadcast masks read right: a key-padding mask [2, 1, 5] equals its expanded [2, 3, 5] copy.
  const Tensor qs = seeded({2, 3, 4}, 21), ks = seeded({2, 5, 4}, 22), vs = seeded({2, 5, 6}, 23);
  const std::vector<std::uint8_t> rows{1, 1, 1, 0, 0, 1, 1, 1, 1, 0};
  std::vector<std::uint8_t> expanded;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i) expanded.insert(expanded.end(), rows.begin() + b * 5, rows.begin() + b * 5 + 5);
  const Tensor padding = from_vector(rows, {2, 1, 5}, {.dtype = DType::u8}),
               full = from_vector(expanded, {2, 3, 5}, {.dtype = DType::u8});
  CHECK(scaled_dot_product_attention(qs, ks, vs, {.attn_mask = padding}).to_vector<double>() ==
        scaled_dot_product_attention(qs, ks, vs, {.attn_mask = full}).to_vector<double>());
  CHECK(scaled_dot_product_attention(qs, ks, vs, {.attn_mask = padding}).to_vector<double>() !=
        scaled_dot_product_attention(qs, ks, vs).to_vector<double>());
}

TEST_CASE("fused attention gives the same bits at 1, 2 and 3 threads, forward and backward, f32 and bf16") {
  const Case c{{2, 4}, 130, 150, 32, Case::causal};
  for (const DType dtype : {DType::f32, DType::bf16}) {
    INFO(dtype);
    std::vector<std::vector<float>> firsts;
    for (const int threads : {1, 2, 3}) {
      set_num_threads(threads);
      const Run r = run(c, dtype, fused);
      std::vector<float> all = r.out.to(DType::f32).to_vector<float>();
      for (const Tensor& t : {r.dq, r.dk, r.dv}) {
        const std::vector<float> part = t.to(DType::f32).to_vector<float>();
        all.insert(all.end(), part.begin(), part.end());
      }
      firsts.push_back(all);
    }
    set_num_threads(1);
    CHECK(firsts[1] == firsts[0]);
    CHECK(firsts[2] == firsts[0]);
  }
}

TEST_CASE("fused attention never holds the score matrix; the reference path does") {
  // L = S = 1024, two heads: one [2, L, S] f32 matrix is 8 MiB, the inputs and outputs 512 KiB.
  const Tensor q = seeded({2, 1024, 16}, 31).to(DType::f32).set_requires_grad(),
               k = seeded({2, 1024, 16}, 32).to(DType::f32).set_requires_grad(),
               v = seeded({2, 1024, 16}, 33).to(DType::f32).set_requires_grad();
  const std::size_t scores_bytes = 2 * 1024 * 1024 * sizeof(float);
  const auto peak_above_start = [&](auto attention) {
    reset_peak_memory_stats(Device::cpu());
    const std::size_t start = memory_stats(Device::cpu()).bytes_in_use;
    sum(attention(q, k, v, AttentionOptions{})).backward();
    return memory_stats(Device::cpu()).peak_bytes_in_use - start;
  };
  const std::size_t fused_peak = peak_above_start(fused), reference_peak = peak_above_start(reference);
  INFO("peak tensor bytes above the inputs: fused " << fused_peak << ", reference " << reference_peak);
  CHECK(fused_peak < scores_bytes / 4);
  CHECK(reference_peak > scores_bytes);
}

TEST_CASE("attention memory: the fused path's grows with L, the reference path's with L·S") {
  // The allocator's high-water mark over a forward and backward, above what was held before.
  auto peak = [](std::int64_t length, bool fused) {
    Generator g(8);
    const Shape shape{2, length, 16};
    const Tensor q = uniform(shape, -1, 1, {}, &g).set_requires_grad(), k = uniform(shape, -1, 1, {}, &g),
                 v = uniform(shape, -1, 1, {}, &g);
    const std::size_t before = memory_stats(Device::cpu()).bytes_in_use;
    reset_peak_memory_stats(Device::cpu());
    {
      const Tensor out =
          fused ? scaled_dot_product_attention(q, k, v) : scaled_dot_product_attention_reference(q, k, v);
      sum(out).backward();
    }
    return static_cast<double>(memory_stats(Device::cpu()).peak_bytes_in_use - before);
  };
  // Four times the length: a linear path holds about four times as much, a quadratic one sixteen.
  const double fused = peak(1024, true) / peak(256, true), reference = peak(1024, false) / peak(256, false);
  INFO("fused ×" << fused << ", reference ×" << reference);
  CHECK(fused < 6.0);
  CHECK(reference > 10.0);
}

TEST_CASE("attention over heads in rows, and over one packed qkv: the bits of the heads split out") {
  // [N, len, H·E] ↔ [N, H, len, E].
  constexpr std::int64_t heads = 4;
  const auto split = [](const Tensor& x) {
    return permute(reshape(x, {x.size(0), x.size(1), heads, x.size(2) / heads}), {0, 2, 1, 3});
  };
  const auto merge = [](const Tensor& x) {
    return reshape(permute(x, {0, 2, 1, 3}), {x.size(0), x.size(2), x.size(1) * x.size(3)});
  };
  const auto in_rows = [](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
    return scaled_dot_product_attention_heads(q, k, v, heads, o);
  };
  const auto split_out = [&](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
    return merge(scaled_dot_product_attention(split(q), split(k), split(v), o));
  };
  const auto with_dropout = [](auto attention) {
    return [attention](const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions o) {
      o.dropout_p = 0.2;
      o.dropout_seed = 5;
      o.dropout_offset = 17;
      return attention(q, k, v, o);
    };
  };
  // Case's batch is [N] and its E is H·E here; 150 rows cross the kernels' 128-row tiles.
  for (const Case::Mask mask : {Case::none, Case::causal, Case::boolean, Case::additive})
    for (const bool dropout : {false, true})
      for (const int threads : {1, 2, 3}) {
        INFO("mask kind " << static_cast<int>(mask) << (dropout ? ", dropout" : "") << ", " << threads << " threads");
        set_num_threads(threads);
        const Case c{{3}, 150, 140, heads * 8, mask};
        const Run got = dropout ? run(c, DType::f32, with_dropout(in_rows)) : run(c, DType::f32, in_rows);
        const Run want = dropout ? run(c, DType::f32, with_dropout(split_out)) : run(c, DType::f32, split_out);
        CHECK(got.out.to_vector<float>() == want.out.to_vector<float>());
        CHECK(got.dq.to_vector<float>() == want.dq.to_vector<float>());
        CHECK(got.dk.to_vector<float>() == want.dk.to_vector<float>());
        CHECK(got.dv.to_vector<float>() == want.dv.to_vector<float>());
      }
  set_num_threads(1);
  // One packed tensor [N, L, 3·H·E] (self-attention): its gradient's blocks are dq, dk and dv; in
  // bf16 too.
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const Case::Mask mask : {Case::none, Case::causal, Case::additive}) {
      INFO("packed, " << dtype << ", mask kind " << static_cast<int>(mask));
      const Case c{{3}, 150, 150, heads * 8, mask};
      const Run want = run(c, dtype, in_rows);
      const Tensor q = seeded(with(c.batch, c.l, c.e), 1), k = seeded(with(c.batch, c.s, c.e), 2),
                   v = seeded(with(c.batch, c.s, c.e), 3);
      Tensor qkv = cat({q.to(dtype), k.to(dtype), v.to(dtype)}, 2).set_requires_grad();
      const Tensor out = scaled_dot_product_attention_qkv(qkv, heads, options_for(c, dtype));
      sum(out * seeded(with(c.batch, c.l, c.e), 4).to(dtype)).backward();
      const auto values = [](const Tensor& t) { return t.to(DType::f32).to_vector<float>(); };
      CHECK(values(out) == values(want.out));
      CHECK(values(slice(qkv.grad(), 2, 0, c.e)) == values(want.dq));
      CHECK(values(slice(qkv.grad(), 2, c.e, c.e)) == values(want.dk));
      CHECK(values(slice(qkv.grad(), 2, 2 * c.e, c.e)) == values(want.dv));
    }
  CHECK_THROWS_WITH(scaled_dot_product_attention_qkv(zeros({2, 3, 8}), 4), Contains("[N, L, 3·H·E]"));
  const Tensor q = zeros({2, 3, 8}), k = zeros({2, 5, 8});
  CHECK_THROWS_WITH(scaled_dot_product_attention_heads(q, k, zeros({2, 5, 6}), 4), Contains("H = heads = 4"));
  CHECK_THROWS_AS(scaled_dot_product_attention_heads(q, k, k, 3), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention_heads(q, k, k, 0), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention_heads(zeros({2, 3, 2, 4}), k, k, 2), ShapeError);
}
