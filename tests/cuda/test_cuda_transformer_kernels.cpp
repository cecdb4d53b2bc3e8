// The transformer's CUDA kernels against their CPU twins on random inputs.
//
// Fused attention (kernels/cuda/attention.cu) against the CPU twin run in f64: across the 16-row blocks and 32-key
// tiles, causal with fewer and with more queries than keys, boolean masks (full, with a row masked everywhere, and key
// padding broadcast over the queries), an additive mask broadcast over the batch, dropout, no keys at all, and heads of
// 128. The bound is the one scaled_dot_product_attention is held to against a float64 reference: rtol 1e-5 plus atol
// 1e-6. The backward must also give the same bits on every run (no atomics).
//
// The embedding's gradient sums in the same order on both devices: its twin test asks for the CPU's bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "cuda/cuda_helpers.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/layer_norm.h"

using namespace ember::kernels;
using namespace ember::testing;
using ember::Tensor;

namespace {

struct Case {
  std::size_t batch, q_len, kv_len, head_dim, value_dim;
  std::string mask;  // none, keep ([B, L, S] u8), padding ([B, 1, S] u8) or add ([L, S] floats)
  bool causal = false;
  float dropout = 0.0f;
};

std::vector<double> widened(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// Every element within rtol 1e-5 + atol 1e-6 of the reference; −∞ where the reference is −∞.
void check_close(const char* what, const std::vector<float>& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(expected[i])) {
      REQUIRE(got[i] == static_cast<float>(expected[i]));
      continue;
    }
    REQUIRE(std::isfinite(got[i]));
    const double bound = 1e-6 + 1e-5 * std::abs(expected[i]);
    worst = std::max(worst, std::abs(got[i] - expected[i]) / bound);
  }
  INFO(what << ": worst error " << worst << " of the bound");
  CHECK(worst <= 1.0);
}

}  // namespace

TEST_CASE("fused attention on the GPU matches the CPU twin in f64, forward and backward, bit-stable") {
  const std::vector<Case> cases = {
      {3, 1, 1, 16, 16, "none"},         {2, 17, 50, 32, 16, "none"},
      {2, 70, 130, 16, 8, "none", true}, {1, 50, 17, 64, 64, "none", true},
      {2, 33, 40, 128, 128, "keep"},     {3, 20, 45, 24, 40, "padding"},
      {2, 20, 45, 24, 40, "add"},        {2, 40, 37, 16, 16, "none", false, 0.2f},
      {1, 3, 0, 8, 8, "none"},
  };
  for (const Case& c : cases) {
    INFO("B " << c.batch << ", L " << c.q_len << ", S " << c.kv_len << ", E " << c.head_dim << ", Ev " << c.value_dim
              << ", mask " << c.mask << (c.causal ? ", causal" : "") << ", dropout " << c.dropout);
    const std::size_t B = c.batch, L = c.q_len, S = c.kv_len, E = c.head_dim, Ev = c.value_dim;
    const AttentionShape shape{B, L, S, E, Ev};
    const std::uint64_t seed = B * 1000 + L * 10 + S;
    const auto q = random_floats(B * L * E, seed), k = random_floats(B * S * E, seed + 1),
               v = random_floats(B * S * Ev, seed + 2), dout = random_floats(B * L * Ev, seed + 3);

    // The mask, on both devices; its batch offsets likewise.
    std::vector<std::uint8_t> keep;
    std::vector<float> add;
    std::vector<std::size_t> offsets(B, 0);
    AttentionMask mask;
    if (c.mask == "keep") {
      for (std::size_t x = 0; x < B * L * S; ++x) keep.push_back((x * 2654435761u >> 7) % 4 != 0);
      for (std::size_t j = 0; j < S; ++j) keep[3 * S + j] = 0;  // query 3 of batch 0 sees nothing
      for (std::size_t b = 0; b < B; ++b) offsets[b] = b * L * S;
      mask = {AttentionMaskKind::boolean, nullptr, nullptr, S, 1};
    } else if (c.mask == "padding") {
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t j = 0; j < S; ++j) keep.push_back(j + 7 * b < S ? 1 : 0);
      for (std::size_t b = 0; b < B; ++b) offsets[b] = b * S;
      mask = {AttentionMaskKind::boolean, nullptr, nullptr, 0, 1};
    } else if (c.mask == "add") {
      add = random_floats(L * S, seed + 4, -3.0f, 1.0f);
      mask = {AttentionMaskKind::additive, nullptr, nullptr, S, 1};
    }
    const std::vector<double> add64 = widened(add);
    std::vector<std::int64_t> offsets64(offsets.begin(), offsets.end());
    const Tensor gpu_keep = device_copy(keep), gpu_add = device_copy(add), gpu_offsets = device_copy(offsets64);
    AttentionParams params{mask, c.causal, 1.0 / std::sqrt(static_cast<double>(E)), c.dropout, 11, 400};
    AttentionParams cpu_params = params, gpu_params = params;
    cpu_params.mask.batch_offsets = offsets.data();
    cpu_params.mask.data = c.mask == "add" ? static_cast<const void*>(add64.data()) : keep.data();
    gpu_params.mask.batch_offsets = reinterpret_cast<const std::size_t*>(gpu_offsets.raw<std::int64_t>());
    gpu_params.mask.data = c.mask == "add" ? gpu_add.raw_bytes() : gpu_keep.raw_bytes();

    // The reference: the CPU's kernels in f64.
    const auto q64 = widened(q), k64 = widened(k), v64 = widened(v), dout64 = widened(dout);
    std::vector<double> out64(B * L * Ev), lse64(B * L), dq64(q.size()), dk64(k.size()), dv64(v.size());
    cpu::attention_forward<double>(q64.data(), k64.data(), v64.data(), out64.data(), lse64.data(), shape, cpu_params);
    cpu::attention_backward<double>(q64.data(), k64.data(), v64.data(), out64.data(), dout64.data(), lse64.data(),
                                    dq64.data(), dk64.data(), dv64.data(), shape, cpu_params);

    const Tensor gq = device_copy(q), gk = device_copy(k), gv = device_copy(v), gdout = device_copy(dout);
    Tensor out = poisoned<float>(B * L * Ev), lse = poisoned<float>(B * L), row_dot = poisoned<float>(B * L);
    cuda::attention_forward(gq.raw<float>(), gk.raw<float>(), gv.raw<float>(), out.raw<float>(), lse.raw<float>(),
                            shape, gpu_params, gpu_stream());
    const auto backward = [&] {
      Tensor dq = poisoned<float>(q.size()), dk = poisoned<float>(k.size()), dv = poisoned<float>(v.size());
      cuda::attention_backward(gq.raw<float>(), gk.raw<float>(), gv.raw<float>(), out.raw<float>(), gdout.raw<float>(),
                               lse.raw<float>(), row_dot.raw<float>(), dq.raw<float>(), dk.raw<float>(),
                               dv.raw<float>(), shape, gpu_params, gpu_stream());
      return std::vector<std::vector<float>>{read_back<float>(dq), read_back<float>(dk), read_back<float>(dv)};
    };
    const auto grads = backward();
    check_close("out", read_back<float>(out), out64);
    check_close("lse", read_back<float>(lse), lse64);
    check_close("dq", grads[0], dq64);
    check_close("dk", grads[1], dk64);
    check_close("dv", grads[2], dv64);
    CHECK(backward() == grads);  // bit for bit: no float is added atomically
  }
}

TEST_CASE("layer norm on the GPU matches the CPU twin in f64, with and without γ and β") {
  for (auto [rows, width] : {std::pair<std::size_t, std::size_t>{0, 8}, {1, 1}, {3, 31}, {70, 64}, {9, 1000}}) {
    for (const bool affine : {true, false}) {
      INFO(rows << " rows of " << width << (affine ? ", with γ and β" : ", no affine"));
      const std::size_t n = rows * width;
      const auto x = random_floats(n, n + 1), dy = random_floats(n, n + 2);
      const auto gamma = random_floats(width, 3, 0.5f, 1.5f), beta = random_floats(width, 4);
      const auto x64 = widened(x), dy64 = widened(dy), gamma64 = widened(gamma), beta64 = widened(beta);
      std::vector<double> y64(n), mean64(rows), invstd64(rows), dx64(n), dy_xhat64(n);
      const double eps = 1e-5;
      cpu::layer_norm_forward<double>(x64.data(), affine ? gamma64.data() : nullptr, affine ? beta64.data() : nullptr,
                                      y64.data(), mean64.data(), invstd64.data(), rows, width, eps);
      cpu::layer_norm_backward<double>(dy64.data(), x64.data(), affine ? gamma64.data() : nullptr, mean64.data(),
                                       invstd64.data(), dx64.data(), dy_xhat64.data(), rows, width);
      const Tensor gx = device_copy(x), gdy = device_copy(dy), ggamma = device_copy(gamma), gbeta = device_copy(beta);
      Tensor y = poisoned<float>(n), mean = poisoned<float>(rows), invstd = poisoned<float>(rows),
             dx = poisoned<float>(n), dy_xhat = poisoned<float>(n);
      cuda::layer_norm_forward(gx.raw<float>(), affine ? ggamma.raw<float>() : nullptr,
                               affine ? gbeta.raw<float>() : nullptr, y.raw<float>(), mean.raw<float>(),
                               invstd.raw<float>(), rows, width, eps, gpu_stream());
      cuda::layer_norm_backward(gdy.raw<float>(), gx.raw<float>(), affine ? ggamma.raw<float>() : nullptr,
                                mean.raw<float>(), invstd.raw<float>(), dx.raw<float>(), dy_xhat.raw<float>(), rows,
                                width, gpu_stream());
      // f32 row sums (a warp's tree) against f64 ones: the bound of the attention test, which these
      // pass with room (the statistics of a row of 1000 values round about 1e-7 apart).
      check_close("y", read_back<float>(y), y64);
      check_close("mean", read_back<float>(mean), mean64);
      check_close("invstd", read_back<float>(invstd), invstd64);
      check_close("dx", read_back<float>(dx), dx64);
      check_close("dy·x̂", read_back<float>(dy_xhat), dy_xhat64);
    }
  }
}

TEMPLATE_TEST_CASE("embedding on the GPU gives the CPU twin's bits, lookup and gradient", "", std::int32_t,
                   std::int64_t) {
  using Index = TestType;
  struct Lookup {
    std::size_t n, rows, width;
    long long padding;
  };
  // Few rows and many indices (long runs of one index), more rows than indices (rows left zero), a
  // width over a warp, n one past a power of two (the sort's padding), and no indices at all.
  for (const Lookup& c : {Lookup{1, 1, 1, -1}, Lookup{200, 3, 5, -1}, Lookup{37, 100, 45, 7}, Lookup{1025, 40, 33, 0},
                          Lookup{0, 4, 6, -1}, Lookup{3000, 512, 64, 2}}) {
    INFO(c.n << " indices into " << c.rows << "x" << c.width << ", padding " << c.padding);
    std::vector<Index> index(c.n);
    for (std::size_t i = 0; i < c.n; ++i) index[i] = static_cast<Index>((i * 7919 + i * i) % c.rows);
    const auto weight = random_floats(c.rows * c.width, c.n + 5), dy = random_floats(c.n * c.width, c.n + 6);
    std::vector<float> out(c.n * c.width), dweight(c.rows * c.width);
    cpu::embedding_forward(weight.data(), index.data(), out.data(), c.n, c.rows, c.width, nullptr);
    cpu::embedding_backward(dy.data(), index.data(), dweight.data(), c.n, c.rows, c.width, c.padding);
    const Tensor gweight = device_copy(weight), gindex = device_copy(index), gdy = device_copy(dy);
    const Tensor keys = ember::zeros({static_cast<std::int64_t>(embedding_sort_keys(c.n))},
                                     {.dtype = ember::DType::i64, .device = kGpu});
    Tensor gout = poisoned<float>(c.n * c.width);
    cuda::embedding_forward(gweight.raw<float>(), gindex.raw<Index>(), gout.raw<float>(), c.n, c.rows, c.width,
                            ember::cuda::device_error_record(kGpu), gpu_stream());
    CHECK(read_back<float>(gout) == out);
    auto backward = [&] {
      Tensor gdweight = poisoned<float>(c.rows * c.width);
      cuda::embedding_backward(gdy.raw<float>(), gindex.raw<Index>(), gdweight.raw<float>(), c.n, c.rows, c.width,
                               c.padding, reinterpret_cast<unsigned long long*>(keys.raw<std::int64_t>()),
                               gpu_stream());
      return read_back<float>(gdweight);
    };
    CHECK(backward() == dweight);  // the same additions in the same order
    ember::cuda::check_device_errors(kGpu);
  }
}

TEST_CASE("embedding on the GPU reports the first bad index and zeroes its row") {
  const std::vector<std::int64_t> index{1, 9, 0, -2};
  const auto weight = random_floats(3 * 4, 11);
  const Tensor gweight = device_copy(weight), gindex = device_copy(index);
  Tensor gout = poisoned<float>(4 * 4);
  cuda::embedding_forward(gweight.raw<float>(), gindex.raw<std::int64_t>(), gout.raw<float>(), 4, 3, 4,
                          ember::cuda::device_error_record(kGpu), gpu_stream());
  CHECK_THROWS_WITH(ember::cuda::check_device_errors(kGpu),
                    Catch::Contains("embedding: index 9 at position 1 of the input is out of range [0, 3)"));
  const std::vector<float> out = read_back<float>(gout);  // the record was cleared when it was reported
  for (std::size_t c = 0; c < 4; ++c) {
    CHECK(out[c] == weight[4 + c]);
    CHECK(out[4 + c] == 0.0f);
    CHECK(out[12 + c] == 0.0f);
  }
}
