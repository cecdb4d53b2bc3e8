// The CUDA kernels other than the elementwise ones (tests/cuda/test_cuda_elementwise_kernels.cpp)
// against their CPU twins on fresh random inputs: sizes 0, 1, 31, 1000, 65,537 and over 4 million,
// a misaligned offset, and outputs poisoned with NaN before the call. Tolerances:
// tests/cuda/twin_tolerances.h.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/ops/ops.h"
#include "cuda/cuda_helpers.h"
#include "cuda/twin_tolerances.h"
#include "kernels/bias_activation.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/gather.h"
#include "kernels/gemm.h"
#include "kernels/layout.h"
#include "kernels/optim.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

using namespace ember::kernels;
using namespace ember::testing;
using ember::Tensor;
namespace kcuda = ember::kernels::cuda;
namespace kcpu = ember::kernels::cpu;

TEST_CASE("transpose and copy_2d match the CPU twins exactly") {
  for (auto [batch, rows, cols] : {std::tuple<std::size_t, std::size_t, std::size_t>{1, 1, 1},
                                   {2, 31, 33},
                                   {3, 1000, 65},
                                   {1, 65537, 3},
                                   {1, 2048, 2049}}) {
    INFO(batch << "x" << rows << "x" << cols);
    const std::size_t n = batch * rows * cols;
    if (too_large_for_short_runs(n)) continue;
    const auto x = random_floats(n, n);
    Tensor dx = device_copy(x, 1), dy = poisoned<float>(n);
    kcuda::transpose_last2(dx.raw<float>() + 1, dy.raw<float>(), batch, rows, cols, gpu_stream());
    std::vector<float> expected(n);
    kcpu::transpose_last2(x.data(), expected.data(), batch, rows, cols);
    CHECK(read_back<float>(dy) == expected);
    // Copy the middle third of each row into a wider destination.
    const std::size_t width = cols / 3 + 1, dst_ld = width + 5;
    Tensor dd = poisoned<float>(rows * dst_ld);
    std::vector<float> host_dst(rows * dst_ld, std::numeric_limits<float>::quiet_NaN());
    kcuda::copy_2d(dx.raw<float>() + 1 + cols / 3, cols, dd.raw<float>() + 2, dst_ld, rows, width, gpu_stream());
    kcpu::copy_2d(x.data() + cols / 3, cols, host_dst.data() + 2, dst_ld, rows, width);
    const auto got = read_back<float>(dd);
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(host_dst[i]))
        CHECK(std::isnan(got[i]));
      else
        REQUIRE(got[i] == host_dst[i]);
    }
  }
}

TEST_CASE("sum matches the CPU twin within K·eps·sum|x| and is bit-identical run to run") {
  for (auto [outer, reduce, inner] : {std::tuple<std::size_t, std::size_t, std::size_t>{1, 0, 1},
                                      {1, 1, 1},
                                      {1, 31, 1},
                                      {1, 4194319, 1},
                                      {3, 65537, 1},
                                      {1000, 31, 1},
                                      {1, 128, 10},
                                      {7, 1000, 33},
                                      {65537, 3, 1},
                                      {1, 16385, 1},
                                      {1, 6000, 10},  // few long columns: rows split into chunks
                                      {3, 2500, 7},   // the same with outer > 1
                                      {2, 0, 5}}) {   // an empty sum of columns
    INFO(outer << "x" << reduce << "x" << inner);
    const std::size_t n = outer * reduce * inner, n_out = outer * inner;
    if (too_large_for_short_runs(n)) continue;
    const auto x = random_floats(n, n + outer);
    Tensor dx = device_copy(x, 1), dout = poisoned<float>(n_out);
    const std::size_t ws = sum_workspace_size(outer, reduce, inner);
    Tensor workspace = ws ? poisoned<float>(ws) : Tensor();
    const float scale = reduce ? 1.0f / static_cast<float>(reduce) : 1.0f;
    kcuda::sum(dx.raw<float>() + 1, dout.raw<float>(), outer, reduce, inner, scale,
               ws ? workspace.raw<float>() : nullptr, gpu_stream());
    std::vector<float> expected(n_out);
    kcpu::sum(x.data(), expected.data(), outer, reduce, inner, scale);
    const auto got = read_back<float>(dout);
    for (std::size_t o = 0; o < outer; ++o)
      for (std::size_t i = 0; i < inner; ++i) {
        double abs_sum = 0;
        for (std::size_t r = 0; r < reduce; ++r) abs_sum += std::abs(x[(o * reduce + r) * inner + i]);
        const double bound = (static_cast<double>(reduce) + 2) * kEps * abs_sum * scale + 1e-30;
        const std::size_t j = o * inner + i;
        INFO("element " << j << ": got " << got[j] << ", expected " << expected[j] << ", bound " << bound);
        REQUIRE(std::abs(static_cast<double>(got[j]) - expected[j]) <= bound);
      }
    kcuda::sum(dx.raw<float>() + 1, dout.raw<float>(), outer, reduce, inner, scale,
               ws ? workspace.raw<float>() : nullptr, gpu_stream());
    const auto again = read_back<float>(dout);
    REQUIRE(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("the mean over an empty dimension is NaN on both backends, the sum 0") {
  for (auto [outer, inner] : {std::pair<std::size_t, std::size_t>{1, 1}, {4, 1}, {1, 6}, {3, 5}}) {
    INFO(outer << "x0x" << inner);
    const float mean_scale = 1.0f / 0.0f;  // what mean() passes for 1/reduce with reduce = 0
    Tensor dout = poisoned<float>(outer * inner);
    kcuda::sum(static_cast<const float*>(nullptr), dout.raw<float>(), outer, 0, inner, mean_scale, nullptr,
               gpu_stream());
    std::vector<float> cpu_mean(outer * inner, 7.0f);
    kcpu::sum<float>(nullptr, cpu_mean.data(), outer, 0, inner, mean_scale);
    for (float v : read_back<float>(dout)) CHECK(std::isnan(v));
    for (float v : cpu_mean) CHECK(std::isnan(v));
    kcuda::sum(static_cast<const float*>(nullptr), dout.raw<float>(), outer, 0, inner, 1.0f, nullptr, gpu_stream());
    for (float v : read_back<float>(dout)) CHECK(v == 0.0f);
  }
  // And through the ops, as PyTorch gives them.
  const Tensor empty_rows = ember::zeros({0, 3}, {.device = kGpu});
  for (float v : ember::mean(empty_rows, {0}).to_vector<float>()) CHECK(std::isnan(v));
  for (float v : ember::sum(empty_rows, {0}).to_vector<float>()) CHECK(v == 0.0f);
  for (float v : ember::mean(ember::zeros({0, 3}), {0}).to_vector<float>()) CHECK(std::isnan(v));
}

TEST_CASE("max, argmax and count_equal match the CPU twins") {
  for (auto [rows, cols] :
       {std::pair<std::size_t, std::size_t>{1, 1}, {31, 10}, {1000, 33}, {65537, 10}, {3, 100003}}) {
    INFO(rows << "x" << cols);
    if (too_large_for_short_runs(rows * cols)) continue;
    auto x = random_floats(rows * cols, rows + cols);
    if (cols > 3) x[2] = x[cols - 1] = 7.0f;  // a tie: the first index must win
    Tensor dx = device_copy(x, 1), dv = poisoned<float>(rows), di = poisoned<std::int64_t>(rows);
    kcuda::max_last_dim(dx.raw<float>() + 1, dv.raw<float>(), di.raw<std::int64_t>(), rows, cols, gpu_stream());
    std::vector<float> values(rows);
    std::vector<std::int64_t> indices(rows);
    kcpu::max_last_dim(x.data(), values.data(), indices.data(), rows, cols);
    CHECK(read_back<float>(dv) == values);
    CHECK(read_back<std::int64_t>(di) == indices);
    std::vector<std::int32_t> targets(rows);
    for (std::size_t r = 0; r < rows; ++r) targets[r] = static_cast<std::int32_t>((r * 7) % cols);
    Tensor dt = device_copy(targets), dc = poisoned<std::int64_t>(1);
    kcuda::count_equal(di.raw<std::int64_t>(), dt.raw<std::int32_t>(), dc.raw<std::int64_t>(), rows, gpu_stream());
    std::int64_t expected = 0;
    kcpu::count_equal(indices.data(), targets.data(), &expected, rows);
    CHECK(read_back<std::int64_t>(dc)[0] == expected);
  }
}

TEST_CASE("softmax, log-softmax and their backward match the CPU twins") {
  for (SoftmaxKind kind : {SoftmaxKind::softmax, SoftmaxKind::log_softmax})
    for (auto [rows, cols] :
         {std::pair<std::size_t, std::size_t>{1, 1}, {31, 10}, {1000, 33}, {65537, 10}, {2, 5000}}) {
      INFO("kind=" << int(kind) << " " << rows << "x" << cols);
      if (too_large_for_short_runs(rows * cols)) continue;
      const auto x = random_floats(rows * cols, rows * cols, -8.0f, 8.0f);
      const auto dy = random_floats(rows * cols, rows + cols);
      Tensor dx = device_copy(x, 1), dyv = poisoned<float>(rows * cols);
      kcuda::softmax_forward(kind, dx.raw<float>() + 1, dyv.raw<float>(), rows, cols, gpu_stream());
      std::vector<float> y(rows * cols);
      kcpu::softmax_forward(kind, x.data(), y.data(), rows, cols);
      // Row sums of cols terms: the bound grows with cols.
      const double rtol = kTranscRtol * (1 + std::log2(static_cast<double>(cols)));
      EMBER_REQUIRE_CLOSE(read_back<float>(dyv), y, 1e-6, rtol);
      Tensor ddy = device_copy(dy), dyh = device_copy(y), dgrad = poisoned<float>(rows * cols);
      kcuda::softmax_backward(kind, ddy.raw<float>(), dyh.raw<float>(), dgrad.raw<float>(), rows, cols,
                              WriteMode::overwrite, gpu_stream());
      std::vector<float> grad(rows * cols);
      kcpu::softmax_backward(kind, dy.data(), y.data(), grad.data(), rows, cols, WriteMode::overwrite);
      EMBER_REQUIRE_CLOSE(read_back<float>(dgrad), grad, 1e-5, rtol);
    }
}

TEST_CASE("softmax and cross-entropy on the GPU keep full precision for logits around 1e4") {
  // Probabilities as exp(x − lse) with a float lse near 1e4 would be off by up to 5e-4 relative
  // (half an ulp of 1e4); from the row's maximum and sum they match the CPU twin (which follows a
  // double reference, test_cpu_kernels) within the tolerances used at ordinary logits.
  const std::size_t rows = 300, cols = 10;
  auto x = random_floats(rows * cols, 10000, -8.0f, 8.0f);
  for (float& v : x) v += 1e4f;
  std::vector<std::int32_t> t(rows);
  for (std::size_t r = 0; r < rows; ++r) t[r] = static_cast<std::int32_t>((r * 3) % cols);
  Tensor dx = device_copy(x), dt = device_copy(t);
  const double rtol = kTranscRtol * (1 + std::log2(static_cast<double>(cols)));
  for (SoftmaxKind kind : {SoftmaxKind::softmax, SoftmaxKind::log_softmax}) {
    Tensor dy = poisoned<float>(rows * cols);
    kcuda::softmax_forward(kind, dx.raw<float>(), dy.raw<float>(), rows, cols, gpu_stream());
    std::vector<float> y(rows * cols);
    kcpu::softmax_forward(kind, x.data(), y.data(), rows, cols);
    EMBER_REQUIRE_CLOSE(read_back<float>(dy), y, 1e-6, rtol);
  }
  const float row_scale = 1.0f / static_cast<float>(rows);
  Tensor dgrad = poisoned<float>(rows * cols), drow = poisoned<float>(rows), dbatch = poisoned<float>(1);
  Tensor counter = ember::zeros({1}, {.dtype = ember::DType::i32, .device = kGpu});
  kcuda::cross_entropy_fused(dx.raw<float>(), dt.raw<std::int32_t>(), dgrad.raw<float>(), drow.raw<float>(),
                             dbatch.raw<float>(), nullptr, rows, cols, row_scale, nullptr,
                             reinterpret_cast<unsigned*>(counter.raw<std::int32_t>()), gpu_stream());
  std::vector<float> grad(rows * cols), row_loss(rows);
  float batch = 0;
  kcpu::cross_entropy_fused(x.data(), t.data(), grad.data(), row_loss.data(), &batch, static_cast<float*>(nullptr),
                            rows, cols, row_scale, nullptr);
  EMBER_REQUIRE_CLOSE(read_back<float>(dgrad), grad, 1e-7, 1e-5);
  EMBER_REQUIRE_CLOSE(read_back<float>(drow), row_loss, 1e-5, 1e-5);
  Tensor dloss = poisoned<float>(rows), dmax = poisoned<float>(rows), dsum = poisoned<float>(rows);
  kcuda::cross_entropy_forward(dx.raw<float>(), dt.raw<std::int32_t>(), dloss.raw<float>(), dmax.raw<float>(),
                               dsum.raw<float>(), rows, cols, nullptr, gpu_stream());
  const std::vector<float> upstream{1.0f};
  Tensor dup = device_copy(upstream), dgrad2 = poisoned<float>(rows * cols);
  kcuda::cross_entropy_backward(dx.raw<float>(), dt.raw<std::int32_t>(), dmax.raw<float>(), dsum.raw<float>(),
                                dup.raw<float>(), row_scale, dgrad2.raw<float>(), rows, cols, WriteMode::overwrite,
                                gpu_stream());
  EMBER_REQUIRE_CLOSE(read_back<float>(dgrad2), grad, 1e-7, 1e-5);
  EMBER_REQUIRE_CLOSE(read_back<float>(dloss), row_loss, 1e-5, 1e-5);
}

TEMPLATE_TEST_CASE("cross-entropy forward and backward match the CPU twin", "", std::int32_t, std::int64_t) {
  using Target = TestType;
  for (auto [rows, cols] : {std::pair<std::size_t, std::size_t>{1, 1}, {31, 10}, {1000, 33}, {65537, 10}}) {
    INFO(rows << "x" << cols);
    if (too_large_for_short_runs(rows * cols)) continue;
    const auto x = random_floats(rows * cols, rows, -6.0f, 6.0f);
    std::vector<Target> t(rows);
    for (std::size_t r = 0; r < rows; ++r) t[r] = static_cast<Target>((r * 13 + 1) % cols);
    Tensor dx = device_copy(x, 1), dt = device_copy(t), dloss = poisoned<float>(rows);
    Tensor dmax = poisoned<float>(rows), dsum = poisoned<float>(rows);
    DeviceErrorRecord* record = ember::cuda::device_error_record(kGpu);
    kcuda::cross_entropy_forward(dx.raw<float>() + 1, dt.raw<Target>(), dloss.raw<float>(), dmax.raw<float>(),
                                 dsum.raw<float>(), rows, cols, record, gpu_stream());
    std::vector<float> loss(rows), row_max(rows), row_sum(rows);
    kcpu::cross_entropy_forward(x.data(), t.data(), loss.data(), row_max.data(), row_sum.data(), rows, cols, nullptr);
    EMBER_REQUIRE_CLOSE(read_back<float>(dloss), loss, 1e-5, 1e-5);
    EMBER_REQUIRE_CLOSE(read_back<float>(dmax), row_max, 0.0, 0.0);
    EMBER_REQUIRE_CLOSE(read_back<float>(dsum), row_sum, 1e-6, 1e-5);
    ember::cuda::check_device_errors(kGpu);  // nothing raised
    const std::vector<float> upstream{2.0f};
    Tensor dup = device_copy(upstream), dgrad = poisoned<float>(rows * cols);
    kcuda::cross_entropy_backward(dx.raw<float>() + 1, dt.raw<Target>(), dmax.raw<float>(), dsum.raw<float>(),
                                  dup.raw<float>(), 1.0f / rows, dgrad.raw<float>(), rows, cols, WriteMode::overwrite,
                                  gpu_stream());
    std::vector<float> grad(rows * cols);
    kcpu::cross_entropy_backward(x.data(), t.data(), row_max.data(), row_sum.data(), upstream.data(), 1.0f / rows,
                                 grad.data(), rows, cols, WriteMode::overwrite);
    EMBER_REQUIRE_CLOSE(read_back<float>(dgrad), grad, 1e-7, 1e-5);
  }
}

TEMPLATE_TEST_CASE("fused cross-entropy matches the CPU twin, is deterministic, and resets its counter", "",
                   std::int32_t, std::int64_t) {
  using Target = TestType;
  for (const auto& shape : {std::pair<std::size_t, std::size_t>{1, 1}, {31, 10}, {128, 10}, {1000, 33}, {65537, 10}}) {
    const std::size_t rows = shape.first, cols = shape.second;  // (a lambda below captures them)
    INFO(rows << "x" << cols);
    if (too_large_for_short_runs(rows * cols)) continue;
    const auto x = random_floats(rows * cols, rows + 7, -6.0f, 6.0f);
    std::vector<Target> t(rows);
    for (std::size_t r = 0; r < rows; ++r) t[r] = static_cast<Target>((r * 13 + 1) % cols);
    const float row_scale = 1.0f / static_cast<float>(rows);
    Tensor dx = device_copy(x, 1), dt = device_copy(t), dgrad = poisoned<float>(rows * cols);
    Tensor drow = poisoned<float>(rows), dbatch = poisoned<float>(1), dsum = device_copy(std::vector<float>{3.0f});
    Tensor counter = ember::zeros({1}, {.dtype = ember::DType::i32, .device = kGpu});
    DeviceErrorRecord* record = ember::cuda::device_error_record(kGpu);
    auto launch = [&] {
      kcuda::cross_entropy_fused(dx.raw<float>() + 1, dt.raw<Target>(), dgrad.raw<float>(), drow.raw<float>(),
                                 dbatch.raw<float>(), dsum.raw<float>(), rows, cols, row_scale, record,
                                 reinterpret_cast<unsigned*>(counter.raw<std::int32_t>()), gpu_stream());
    };
    launch();
    std::vector<float> grad(rows * cols), row_loss(rows);
    float batch = 0, sum = 3.0f;
    kcpu::cross_entropy_fused(x.data(), t.data(), grad.data(), row_loss.data(), &batch, &sum, rows, cols, row_scale,
                              nullptr);
    EMBER_REQUIRE_CLOSE(read_back<float>(drow), row_loss, 1e-5, 1e-5);
    EMBER_REQUIRE_CLOSE(read_back<float>(dgrad), grad, 1e-7, 1e-5);
    // Σ of `rows` losses in another order: rounding grows with log2(rows).
    EMBER_REQUIRE_CLOSE(read_back<float>(dbatch), std::vector<float>{batch}, 1e-6, 1e-5);
    EMBER_REQUIRE_CLOSE(read_back<float>(dsum), std::vector<float>{sum}, 1e-6, 1e-5);
    ember::cuda::check_device_errors(kGpu);
    REQUIRE(read_back<std::int32_t>(counter)[0] == 0);  // ready for the next launch
    const float first = read_back<float>(dbatch)[0];
    for (int i = 0; i < 3; ++i) launch();
    REQUIRE(read_back<float>(dbatch)[0] == first);  // bit-identical: the order of the sum is fixed
    REQUIRE(read_back<std::int32_t>(counter)[0] == 0);
  }
}

TEST_CASE("fused cross-entropy raises a bad target at the next synchronization") {
  const std::vector<float> x{1, 2, 3, 4, 5, 6};
  const std::vector<std::int64_t> t{1, 9};
  Tensor dx = device_copy(x), dt = device_copy(t), dgrad = poisoned<float>(6), drow = poisoned<float>(2);
  Tensor counter = ember::zeros({1}, {.dtype = ember::DType::i32, .device = kGpu});
  kcuda::cross_entropy_fused(dx.raw<float>(), dt.raw<std::int64_t>(), dgrad.raw<float>(), drow.raw<float>(), nullptr,
                             nullptr, 2, 3, 0.5f, ember::cuda::device_error_record(kGpu),
                             reinterpret_cast<unsigned*>(counter.raw<std::int32_t>()), gpu_stream());
  REQUIRE_THROWS_WITH(ember::synchronize(kGpu), Catch::Contains("target 9 at row 1"));
  REQUIRE(read_back<float>(dgrad)[4] == 0.0f);
}

TEST_CASE("cuBLAS GEMM matches the CPU GEMM within K·eps·sum|a||b|, every transpose combination, padded rows") {
  for (auto [m, n, k] : {std::tuple<std::size_t, std::size_t, std::size_t>{1, 1, 1},
                         {3, 5, 7},
                         {128, 10, 784},
                         {31, 65, 1000},
                         {257, 129, 33},
                         {4, 4, 0}})
    for (Transpose ta : {Transpose::no, Transpose::yes})
      for (Transpose tb : {Transpose::no, Transpose::yes})
        for (const std::size_t pad : {std::size_t{0}, std::size_t{3}}) {  // leading dimensions past the row
          INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << int(ta) << " tb=" << int(tb) << " pad=" << pad);
          const std::size_t lda = (ta == Transpose::no ? k : m) + pad, ldb = (tb == Transpose::no ? n : k) + pad,
                            ldc = n + pad;
          const std::size_t a_rows = ta == Transpose::no ? m : k, b_rows = tb == Transpose::no ? k : n;
          const auto a = random_floats(a_rows * lda, m + k), b = random_floats(b_rows * ldb, n + k),
                     c0 = random_floats(m * ldc, m * n);
          Tensor da = device_copy(a), db = device_copy(b), dc = device_copy(c0);
          ember::kernels::cuda::gemm(ta, tb, m, n, k, 1.0f, da.raw<float>(), lda, db.raw<float>(), ldb, 0.5f,
                                     dc.raw<float>(), ldc, gpu_stream());
          std::vector<float> expected = c0;
          kcpu::gemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.5f, expected.data(), ldc);
          const auto got = read_back<float>(dc);
          for (std::size_t i = 0; i < m; ++i) {
            for (std::size_t j = 0; j < n; ++j) {
              double abs_dot = 0;
              for (std::size_t p = 0; p < k; ++p) {
                const float av = ta == Transpose::no ? a[i * lda + p] : a[p * lda + i];
                const float bv = tb == Transpose::no ? b[p * ldb + j] : b[j * ldb + p];
                abs_dot += std::abs(av * bv);
              }
              const std::size_t at = i * ldc + j;
              const double bound = 2.0 * (static_cast<double>(k) + 2) * kEps * (abs_dot + 0.5 * std::abs(c0[at]));
              INFO("C[" << i << "," << j << "]: got " << got[at] << ", expected " << expected[at]);
              REQUIRE(std::abs(static_cast<double>(got[at]) - expected[at]) <= bound + 1e-30);
            }
            for (std::size_t j = n; j < ldc; ++j) REQUIRE(got[i * ldc + j] == c0[i * ldc + j]);  // padding untouched
          }
        }
}

TEST_CASE("fused bias+ReLU forward and backward, and the bias add, match the CPU twins") {
  for (auto shape : {std::pair<std::size_t, std::size_t>{1, 1},
                     {128, 32},
                     {1000, 33},
                     {6000, 10},  // few long columns: rows split into chunks across blocks
                     {65537, 10},
                     {7, 4099},
                     {0, 5}}) {
    const std::size_t rows = shape.first, cols = shape.second;  // (a lambda below captures them)
    INFO(rows << "x" << cols);
    if (too_large_for_short_runs(rows * cols)) continue;
    const auto y0 = random_floats(rows * cols, rows), bias = random_floats(cols, cols);
    const auto dy = random_floats(rows * cols, rows + 1);
    Tensor dyv = device_copy(y0), db = device_copy(bias);
    kcuda::bias_relu_forward(dyv.raw<float>(), db.raw<float>(), rows, cols, gpu_stream());
    std::vector<float> y = y0;
    kcpu::bias_relu_forward(y.data(), bias.data(), rows, cols);
    EMBER_REQUIRE_CLOSE(read_back<float>(dyv), y, kArithAtol, kArithRtol);
    Tensor plain = device_copy(y0);
    kcuda::bias_forward(plain.raw<float>(), db.raw<float>(), rows, cols, gpu_stream());
    std::vector<float> biased = y0;
    kcpu::bias_forward(biased.data(), bias.data(), rows, cols);
    EMBER_REQUIRE_CLOSE(read_back<float>(plain), biased, 0.0, 0.0);  // one addition each: exact on both
    Tensor ddy = device_copy(dy), dyh = device_copy(y), ddx = poisoned<float>(rows * cols), ddb = poisoned<float>(cols);
    const std::size_t ws = sum_workspace_size(1, rows, cols);
    Tensor workspace = ws ? poisoned<float>(ws) : Tensor();
    const auto backward = [&] {
      kcuda::bias_relu_backward(ddy.raw<float>(), dyh.raw<float>(), ddx.raw<float>(), ddb.raw<float>(), rows, cols,
                                ws ? workspace.raw<float>() : nullptr, gpu_stream());
      return read_back<float>(ddb);
    };
    const std::vector<float> got = backward();
    std::vector<float> dx(rows * cols), dbias(cols);
    kcpu::bias_relu_backward(dy.data(), y.data(), dx.data(), dbias.data(), rows, cols);
    EMBER_REQUIRE_CLOSE(read_back<float>(ddx), dx, 0.0, 0.0);
    // The CPU adds each column top to bottom, the GPU in row phases and chunks: a float sum of
    // `rows` terms in another order, within (rows + 2)·eps·Σ|terms|.
    for (std::size_t c = 0; c < cols; ++c) {
      double abs_sum = 0;
      for (std::size_t r = 0; r < rows; ++r) abs_sum += std::abs(dx[r * cols + c]);
      const double bound = (static_cast<double>(rows) + 2) * kEps * abs_sum;
      INFO("column " << c << ": got " << got[c] << ", expected " << dbias[c] << ", bound " << bound);
      REQUIRE(std::abs(static_cast<double>(got[c]) - dbias[c]) <= bound);
    }
    // Deterministic: the same bits again.
    const std::vector<float> again = backward();
    REQUIRE(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("degenerate shapes: the CUDA wrappers write what the CPU twins write") {
  // Each output is poisoned first, so an output the CUDA side skips shows.
  SECTION("fused cross-entropy over no rows writes the batch loss and adds nothing to the sum") {
    Tensor dbatch = poisoned<float>(1), dsum = device_copy(std::vector<float>{3.0f});
    Tensor counter = ember::zeros({1}, {.dtype = ember::DType::i32, .device = kGpu});
    kcuda::cross_entropy_fused<std::int32_t>(nullptr, nullptr, nullptr, nullptr, dbatch.raw<float>(), dsum.raw<float>(),
                                             0, 10, 1.0f, ember::cuda::device_error_record(kGpu),
                                             reinterpret_cast<unsigned*>(counter.raw<std::int32_t>()), gpu_stream());
    float batch = std::nanf(""), sum = 3.0f;
    kcpu::cross_entropy_fused<float, std::int32_t>(nullptr, nullptr, nullptr, nullptr, &batch, &sum, 0, 10, 1.0f,
                                                   nullptr);
    CHECK(read_back<float>(dbatch) == std::vector<float>{batch});
    CHECK(read_back<float>(dsum) == std::vector<float>{sum});
    CHECK(read_back<std::int32_t>(counter)[0] == 0);
  }
  SECTION("batch norm of an empty batch: NaN statistics, running ones untouched, zero parameter gradients") {
    const std::size_t c = 3, hw = 4;
    const std::vector<float> ones(c, 1.0f), zeros_c(c, 0.0f), running_mean{0.5f, -1.0f, 2.0f}, running_var{1, 2, 3};
    const std::vector<float> sentinel(c, 7.0f);  // not NaN: the statistics are NaN when written
    Tensor g = device_copy(ones), b = device_copy(zeros_c), rm = device_copy(running_mean),
           rv = device_copy(running_var);
    Tensor mean = device_copy(sentinel), invstd = device_copy(sentinel);
    kcuda::batch_norm_forward_train(nullptr, g.raw<float>(), b.raw<float>(), nullptr, mean.raw<float>(),
                                    invstd.raw<float>(), rm.raw<float>(), rv.raw<float>(), 0, c, hw, 0.1f, 1e-5f,
                                    gpu_stream());
    std::vector<float> cpu_mean = sentinel, cpu_invstd = sentinel, cpu_rm = running_mean, cpu_rv = running_var;
    kcpu::batch_norm_forward_train<float>(nullptr, ones.data(), zeros_c.data(), nullptr, cpu_mean.data(),
                                          cpu_invstd.data(), cpu_rm.data(), cpu_rv.data(), 0, c, hw, 0.1f, 1e-5f);
    for (const auto& stats : {read_back<float>(mean), read_back<float>(invstd), cpu_mean, cpu_invstd})
      for (float v : stats) CHECK(std::isnan(v));
    CHECK(read_back<float>(rm) == running_mean);
    CHECK(read_back<float>(rv) == running_var);
    CHECK(cpu_rm == running_mean);
    CHECK(cpu_rv == running_var);
    Tensor dgamma = poisoned<float>(c), dbeta = poisoned<float>(c);
    kcuda::batch_norm_backward(nullptr, nullptr, g.raw<float>(), mean.raw<float>(), invstd.raw<float>(), nullptr,
                               dgamma.raw<float>(), dbeta.raw<float>(), 0, c, hw, gpu_stream());
    std::vector<float> cpu_dgamma(c, std::nanf("")), cpu_dbeta(c, std::nanf(""));
    kcpu::batch_norm_backward<float>(nullptr, nullptr, ones.data(), cpu_mean.data(), cpu_invstd.data(), nullptr,
                                     cpu_dgamma.data(), cpu_dbeta.data(), 0, c, hw);
    CHECK(read_back<float>(dgamma) == cpu_dgamma);
    CHECK(read_back<float>(dbeta) == cpu_dbeta);
    CHECK(cpu_dgamma == zeros_c);
  }
  SECTION("an optimizer step over tensors without elements still advances their step counts") {
    for (bool fused : {true, false}) {
      INFO("step counts advanced by the update itself: " << fused);
      std::vector<float> steps{2.0f, 0.0f};
      Tensor dsteps = device_copy(steps), lr = device_copy(std::vector<float>{0.1f});
      Tensor counter = ember::zeros({1}, {.dtype = ember::DType::i32, .device = kGpu});
      std::vector<ParamSlot> slots(2);
      for (std::size_t i = 0; i < 2; ++i) slots[i].step = dsteps.raw<float>() + i;  // n = 0: no element touched
      std::vector<std::uint8_t> bytes(sizeof(ParamSlot) * slots.size());
      std::memcpy(bytes.data(), slots.data(), bytes.size());
      Tensor dslots = device_copy(bytes);
      const kcuda::DeviceSlots device_slots{static_cast<const ParamSlot*>(dslots.raw_bytes()), slots.data(), 2};
      if (!fused) kcuda::advance_steps(device_slots, gpu_stream());
      kcuda::sgd_step(device_slots, 0, SgdConfig{}, lr.raw<float>(),
                      fused ? reinterpret_cast<unsigned*>(counter.raw<std::int32_t>()) : nullptr, gpu_stream());
      std::vector<ParamSlot> host_slots(2);
      for (std::size_t i = 0; i < 2; ++i) host_slots[i].step = steps.data() + i;
      const float host_lr = 0.1f;
      kcpu::advance_steps(host_slots.data(), 2);
      kcpu::sgd_step(host_slots.data(), 2, SgdConfig{}, &host_lr);
      CHECK(read_back<float>(dsteps) == steps);
      CHECK(steps == std::vector<float>{3.0f, 1.0f});
    }
  }
  SECTION("gathering images of no pixels still writes their labels") {
    const std::vector<std::int32_t> labels{4, 8, 15}, index{2, 0};
    Tensor dlabels = device_copy(labels), dindex = device_copy(index), dy = poisoned<std::int32_t>(2);
    kcuda::gather_batch(nullptr, dlabels.raw<std::int32_t>(), dindex.raw<std::int32_t>(), nullptr,
                        dy.raw<std::int32_t>(), 2, 0, 0.0f, 1.0f, gpu_stream());
    std::vector<std::int32_t> y(2, -1);
    kcpu::gather_batch(nullptr, labels.data(), index.data(), nullptr, y.data(), 2, 0, 0.0f, 1.0f);
    CHECK(read_back<std::int32_t>(dy) == y);
    CHECK(y == std::vector<std::int32_t>{15, 4});
  }
}
