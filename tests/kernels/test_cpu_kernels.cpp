// The CPU kernels against independent references: naive loops and hand-computed values. The
// CUDA kernels are compared with these CPU twins in tests/cuda/.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/half.h"
#include "kernels/bias_activation.h"
#include "kernels/conv.h"
#include "kernels/cpu_features.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/kernel_name.h"
#include "kernels/layer_norm.h"
#include "kernels/layout.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "support/helpers.h"

using namespace ember::kernels;
using ember::testing::random_doubles;
using ember::testing::random_floats;

namespace {

// Row-major reference: C = alpha·op(A)·op(B) + beta·C, in long double.
template <class T>
std::vector<T> naive_gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha,
                          const std::vector<T>& a, const std::vector<T>& b, T beta, std::vector<T> c) {
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      long double acc = 0;
      for (std::size_t p = 0; p < k; ++p) {
        const T av = ta == Transpose::no ? a[i * k + p] : a[p * m + i];
        const T bv = tb == Transpose::no ? b[p * n + j] : b[j * k + p];
        acc += static_cast<long double>(av) * bv;
      }
      c[i * n + j] = static_cast<T>(alpha * acc + (beta == T(0) ? 0 : beta * c[i * n + j]));
    }
  return c;
}

}  // namespace

TEMPLATE_TEST_CASE("GEMM matches a naive triple loop for every transpose combination and odd shapes", "", float,
                   double) {
  using T = TestType;
  const T eps = std::numeric_limits<T>::epsilon();
  for (auto [m, n, k] : {std::tuple<std::size_t, std::size_t, std::size_t>{1, 1, 1},
                         {3, 5, 7},
                         {17, 1, 33},
                         {64, 31, 129},
                         {2, 300, 3},
                         {5, 4, 0}}) {
    for (Transpose ta : {Transpose::no, Transpose::yes})
      for (Transpose tb : {Transpose::no, Transpose::yes})
        for (bool builtin : {false, true}) {
          INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << int(ta) << " tb=" << int(tb)
                    << " builtin=" << builtin);
          std::vector<T> a(m * k), b(k * n), c0(m * n);
          std::mt19937_64 rng(m * 1000 + n * 10 + k);
          std::uniform_real_distribution<double> dist(-1, 1);
          for (T& v : a) v = static_cast<T>(dist(rng));
          for (T& v : b) v = static_cast<T>(dist(rng));
          for (T& v : c0) v = static_cast<T>(dist(rng));
          const std::size_t lda = ta == Transpose::no ? k : m, ldb = tb == Transpose::no ? n : k;
          for (T beta : {T(0), T(0.5)}) {
            std::vector<T> c = c0;
            if (beta == T(0)) std::fill(c.begin(), c.end(), std::numeric_limits<T>::quiet_NaN());  // must not be read
            auto gemm_fn = builtin ? &cpu::gemm_builtin<T> : &cpu::gemm<T>;
            gemm_fn(ta, tb, m, n, k, T(1.5), a.data(), lda, b.data(), ldb, beta, c.data(), n);
            const auto expected = naive_gemm(ta, tb, m, n, k, T(1.5), a, b, beta, c0);
            // Rounding of a length-k dot product is bounded by k·ε·Σ|a·b|; with |a|, |b| ≤ 1 and
            // alpha = 1.5 that is at most 1.5·k²·ε. Twice that (plus ε for beta·C) is the bound.
            const double atol = 3.0 * static_cast<double>(k * k + 1) * eps;
            EMBER_REQUIRE_CLOSE(c, expected, atol, 0.0);
          }
        }
  }
}

TEST_CASE("softmax cross-entropy: hand-computed cases") {
  SECTION("all-equal logits give log(C) and a uniform softmax") {
    const std::vector<float> logits(2 * 4, 3.0f);
    const std::vector<std::int32_t> targets{0, 3};
    std::vector<float> loss(2), mx(2), sm(2), grad(8);
    DeviceErrorRecord err;
    cpu::cross_entropy_forward(logits.data(), targets.data(), loss.data(), mx.data(), sm.data(), 2, 4, &err);
    CHECK(err.code == 0);
    CHECK(loss[0] == Approx(std::log(4.0)).epsilon(1e-6));
    CHECK(loss[1] == Approx(std::log(4.0)).epsilon(1e-6));
    const float one = 1.0f;
    cpu::cross_entropy_backward(logits.data(), targets.data(), mx.data(), sm.data(), &one, 0.5f, grad.data(), 2, 4,
                                WriteMode::overwrite);
    // (softmax − onehot)/B = (0.25 − [c == t])/2
    CHECK(grad[0] == Approx(-0.375f));
    CHECK(grad[1] == Approx(0.125f));
    CHECK(grad[7] == Approx(-0.375f));
  }
  SECTION("large logits stay finite") {
    const std::vector<double> logits{1e4, 0.0, -1e4};
    const std::vector<std::int64_t> targets{0};
    std::vector<double> loss(1), mx(1), sm(1), grad(3);
    cpu::cross_entropy_forward(logits.data(), targets.data(), loss.data(), mx.data(), sm.data(), 1, 3, nullptr);
    CHECK(std::isfinite(loss[0]));
    CHECK(loss[0] == Approx(0.0).margin(1e-12));
    const std::vector<std::int64_t> other{1};
    cpu::cross_entropy_forward(logits.data(), other.data(), loss.data(), mx.data(), sm.data(), 1, 3, nullptr);
    CHECK(loss[0] == Approx(1e4));
    const double one = 1.0;
    cpu::cross_entropy_backward(logits.data(), other.data(), mx.data(), sm.data(), &one, 1.0, grad.data(), 1, 3,
                                WriteMode::overwrite);
    CHECK(grad[0] == Approx(1.0));
    CHECK(grad[1] == Approx(-1.0));
    CHECK(grad[2] == Approx(0.0).margin(1e-300));
    const std::vector<float> big{1e4f, 1e4f};
    std::vector<float> l(1), m1(1), s1(1);
    const std::vector<std::int32_t> t{1};
    cpu::cross_entropy_forward(big.data(), t.data(), l.data(), m1.data(), s1.data(), 1, 2, nullptr);
    CHECK(l[0] == Approx(std::log(2.0)));
  }
  SECTION("one class: zero loss and zero gradient") {
    const std::vector<float> logits{5.0f, -7.0f};
    const std::vector<std::int32_t> targets{0, 0};
    std::vector<float> loss(2), mx(2), sm(2), grad(2, 1.0f);
    cpu::cross_entropy_forward(logits.data(), targets.data(), loss.data(), mx.data(), sm.data(), 2, 1, nullptr);
    CHECK(loss == std::vector<float>{0.0f, 0.0f});
    const float one = 1.0f;
    cpu::cross_entropy_backward(logits.data(), targets.data(), mx.data(), sm.data(), &one, 0.5f, grad.data(), 2, 1,
                                WriteMode::overwrite);
    CHECK(grad == std::vector<float>{0.0f, 0.0f});
  }
  SECTION("a target out of range is recorded, never read") {
    const std::vector<float> logits{1, 2, 3, 4, 5, 6};
    const std::vector<std::int64_t> targets{1, 7};
    std::vector<float> loss(2), mx(2), sm(2);
    DeviceErrorRecord err;
    cpu::cross_entropy_forward(logits.data(), targets.data(), loss.data(), mx.data(), sm.data(), 2, 3, &err);
    CHECK(err.code == static_cast<int>(DeviceErrorCode::target_out_of_range));
    CHECK(err.value() == 7);
    CHECK(err.position() == 1);
    CHECK(err.bound == 3);
    CHECK(loss[1] == 0.0f);
  }
}

TEST_CASE("softmax cross-entropy keeps full precision for logits around 1e4") {
  // A float log-sum-exp near 1e4 is off by up to half an ulp of 1e4 (5e-4), and exp(x − lse)
  // would carry that into every probability (Note [softmax from max and sum]). From the row's
  // maximum and sum, the float results match a double reference to float precision.
  const std::size_t rows = 16, cols = 10;
  const auto source = random_doubles(rows * cols, 99, -8.0, 8.0);
  std::vector<float> logits(rows * cols);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(1e4 + source[i]);
  std::vector<std::int32_t> targets(rows);
  for (std::size_t r = 0; r < rows; ++r) targets[r] = static_cast<std::int32_t>(r % cols);
  std::vector<float> loss(rows), mx(rows), sm(rows), grad(rows * cols), fused(rows * cols), row_loss(rows);
  const float one = 1.0f, scale = 1.0f / static_cast<float>(rows);
  cpu::cross_entropy_forward(logits.data(), targets.data(), loss.data(), mx.data(), sm.data(), rows, cols, nullptr);
  cpu::cross_entropy_backward(logits.data(), targets.data(), mx.data(), sm.data(), &one, scale, grad.data(), rows, cols,
                              WriteMode::overwrite);
  cpu::cross_entropy_fused<float, std::int32_t>(logits.data(), targets.data(), fused.data(), row_loss.data(), nullptr,
                                                nullptr, rows, cols, scale, nullptr);
  std::vector<double> want_loss(rows), want_grad(rows * cols);
  for (std::size_t r = 0; r < rows; ++r) {
    double max = -INFINITY, sum = 0;
    for (std::size_t c = 0; c < cols; ++c) max = std::max(max, static_cast<double>(logits[r * cols + c]));
    for (std::size_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(logits[r * cols + c]) - max);
    want_loss[r] = max + std::log(sum) - logits[r * cols + static_cast<std::size_t>(targets[r])];
    for (std::size_t c = 0; c < cols; ++c)
      want_grad[r * cols + c] = (std::exp(static_cast<double>(logits[r * cols + c]) - max) / sum -
                                 (c == static_cast<std::size_t>(targets[r]) ? 1.0 : 0.0)) /
                                static_cast<double>(rows);
  }
  // float probabilities: rtol of a few float roundings (exp, a sum of 10, a division).
  EMBER_REQUIRE_CLOSE(grad, want_grad, 1e-8, 1e-5);
  EMBER_REQUIRE_CLOSE(fused, want_grad, 1e-8, 1e-5);
  EMBER_REQUIRE_CLOSE(loss, want_loss, 1e-5, 1e-5);
  EMBER_REQUIRE_CLOSE(row_loss, want_loss, 1e-5, 1e-5);
}

TEMPLATE_TEST_CASE("fused cross-entropy matches the unfused forward and backward", "", float, double) {
  using T = TestType;
  for (auto [rows, cols] : {std::pair<std::size_t, std::size_t>{1, 1}, {7, 10}, {128, 10}, {33, 257}}) {
    INFO(rows << "x" << cols);
    std::vector<T> logits(rows * cols);
    const auto source = random_doubles(rows * cols, rows * 31 + cols, -8.0, 8.0);
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<T>(source[i]);
    std::vector<std::int64_t> targets(rows);
    for (std::size_t r = 0; r < rows; ++r) targets[r] = static_cast<std::int64_t>((r * 7 + 3) % cols);
    const T row_scale = T(1) / static_cast<T>(rows), one = 1;
    std::vector<T> loss(rows), mx(rows), sm(rows), grad(rows * cols);
    cpu::cross_entropy_forward(logits.data(), targets.data(), loss.data(), mx.data(), sm.data(), rows, cols, nullptr);
    cpu::cross_entropy_backward(logits.data(), targets.data(), mx.data(), sm.data(), &one, row_scale, grad.data(), rows,
                                cols, WriteMode::overwrite);
    std::vector<T> fused_grad(rows * cols, std::numeric_limits<T>::quiet_NaN()), row_loss(rows);
    T batch_loss = std::numeric_limits<T>::quiet_NaN(), loss_sum = 5;
    DeviceErrorRecord err;
    cpu::cross_entropy_fused(logits.data(), targets.data(), fused_grad.data(), row_loss.data(), &batch_loss, &loss_sum,
                             rows, cols, row_scale, &err);
    CHECK(err.code == 0);
    double total = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      CHECK(row_loss[r] == Approx(loss[r]).epsilon(1e-6));
      total += static_cast<double>(loss[r]);
    }
    // The same formulas; the unfused backward inverts the row sum as stored (rounded to T), the
    // fused one the sum itself: they may differ by a rounding.
    for (std::size_t i = 0; i < grad.size(); ++i)
      CHECK(static_cast<double>(fused_grad[i]) == Approx(static_cast<double>(grad[i])).margin(4e-7 * row_scale));
    CHECK(static_cast<double>(batch_loss) == Approx(total / static_cast<double>(rows)).epsilon(1e-6));
    CHECK(static_cast<double>(loss_sum) == Approx(5.0 + total).epsilon(1e-6));
  }
}

TEST_CASE("the record keeps the lowest position of the first kind of error, with that position's value") {
  DeviceErrorRecord record;
  raise_error_on_host(&record, DeviceErrorCode::target_out_of_range, OpTag::cross_entropy, 40, 12, 10);
  raise_error_on_host(&record, DeviceErrorCode::target_out_of_range, OpTag::cross_entropy, 7, -3, 10);
  raise_error_on_host(&record, DeviceErrorCode::target_out_of_range, OpTag::cross_entropy, 900, 11, 10);
  raise_error_on_host(&record, DeviceErrorCode::non_finite, OpTag::loss_check, 0, 0, 0);  // another kind: later
  CHECK(record.code == static_cast<int>(DeviceErrorCode::target_out_of_range));
  CHECK(record.position() == 7);
  CHECK(record.value() == -3);
  CHECK(record.value_clamped() == 0);
  CHECK(record.bound == 10);
  // Values beyond 24 bits keep their position and say which way they were clamped.
  DeviceErrorRecord big;
  raise_error_on_host(&big, DeviceErrorCode::target_out_of_range, OpTag::cross_entropy, 3, 10000000000LL, 10);
  CHECK(big.position() == 3);
  CHECK(big.value_clamped() == 1);
  CHECK(big.value() == (1LL << 23) - 1);
  DeviceErrorRecord low;
  raise_error_on_host(&low, DeviceErrorCode::target_out_of_range, OpTag::cross_entropy, 2, -10000000000LL, 10);
  CHECK(low.value_clamped() == -1);
  CHECK(low.value() == -(1LL << 23));
  for (long long v : {-8388607LL, -1LL, 0LL, 8388606LL}) {
    DeviceErrorRecord exact;
    raise_error_on_host(&exact, DeviceErrorCode::target_out_of_range, OpTag::cross_entropy, 1, v, 10);
    CHECK(exact.value() == v);
    CHECK(exact.value_clamped() == 0);
  }
}

TEST_CASE("fused cross-entropy: a bad target zeroes its row and is recorded; a non-finite loss is flagged") {
  const std::vector<float> logits{1, 2, 3, 4, 5, 6};
  std::vector<float> grad(6, 1.0f), row_loss(2);
  float batch_loss = 0, loss_sum = 0;
  SECTION("target out of range") {
    const std::vector<std::int32_t> targets{2, -1};
    DeviceErrorRecord err;
    cpu::cross_entropy_fused(logits.data(), targets.data(), grad.data(), row_loss.data(), &batch_loss, &loss_sum, 2, 3,
                             0.5f, &err);
    CHECK(err.code == static_cast<int>(DeviceErrorCode::target_out_of_range));
    CHECK(err.value() == -1);
    CHECK(err.position() == 1);
    CHECK(row_loss[1] == 0.0f);
    CHECK(grad[3] == 0.0f);
    CHECK(grad[4] == 0.0f);
    CHECK(grad[5] == 0.0f);
    CHECK(std::isfinite(batch_loss));
  }
  SECTION("a NaN logit makes the loss non-finite") {
    std::vector<float> bad = logits;
    bad[4] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<std::int32_t> targets{0, 1};
    DeviceErrorRecord err;
    cpu::cross_entropy_fused(bad.data(), targets.data(), grad.data(), row_loss.data(), &batch_loss, &loss_sum, 2, 3,
                             0.5f, &err);
    CHECK(err.code == static_cast<int>(DeviceErrorCode::non_finite));
    CHECK(err.op == static_cast<int>(OpTag::loss_check));
  }
}

TEST_CASE("softmax and log-softmax rows sum to one and match the definition") {
  const auto x = random_doubles(3 * 5, 7, -4, 4);
  std::vector<double> y(15), ly(15);
  cpu::softmax_forward(SoftmaxKind::softmax, x.data(), y.data(), 3, 5);
  cpu::softmax_forward(SoftmaxKind::log_softmax, x.data(), ly.data(), 3, 5);
  for (int r = 0; r < 3; ++r) {
    double total = 0, denom = 0;
    for (int c = 0; c < 5; ++c) denom += std::exp(x[r * 5 + c]);
    for (int c = 0; c < 5; ++c) {
      total += y[r * 5 + c];
      CHECK(y[r * 5 + c] == Approx(std::exp(x[r * 5 + c]) / denom));
      CHECK(ly[r * 5 + c] == Approx(x[r * 5 + c] - std::log(denom)));
    }
    CHECK(total == Approx(1.0));
  }
}

TEST_CASE("sum over [outer, reduce, inner] and the bias-gradient layout") {
  // x[o, r, i] = o·100 + r·10 + i
  std::vector<double> x;
  for (int o = 0; o < 2; ++o)
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 4; ++i) x.push_back(o * 100 + r * 10 + i);
  std::vector<double> out(8);
  cpu::sum(x.data(), out.data(), 2, 3, 4, 1.0);
  CHECK(out == std::vector<double>{30, 33, 36, 39, 330, 333, 336, 339});
  std::vector<double> all(1);
  cpu::sum(x.data(), all.data(), 1, x.size(), 1, 1.0 / x.size());
  CHECK(all[0] == Approx((30 + 33 + 36 + 39 + 330 + 333 + 336 + 339) / 24.0));
  std::vector<float> none(3, 9.0f);
  cpu::sum<float>(nullptr, none.data(), 3, 0, 1, 1.0f);
  CHECK(none == std::vector<float>{0, 0, 0});
  // Deterministic: the same input gives bit-identical output.
  const auto big = random_floats(100003, 3);
  float s1 = 0, s2 = 0;
  cpu::sum(big.data(), &s1, 1, big.size(), 1, 1.0f);
  cpu::sum(big.data(), &s2, 1, big.size(), 1, 1.0f);
  CHECK(std::memcmp(&s1, &s2, sizeof(float)) == 0);
}

TEST_CASE("column sums: each column added row by row in double, on AVX-512 lanes too, bit for bit") {
  // On an AVX512F CPU the f32 column sums run 8 columns a register (64 a pass over the rows), the
  // last columns by the plain loop: every width around those edges.
  for (const std::size_t inner : {1, 7, 8, 9, 63, 64, 65, 130, 200})
    for (const std::size_t reduce : {1, 5, 3000}) {
      INFO("inner=" << inner << " reduce=" << reduce);
      const std::size_t outer = 2;
      const auto x = random_floats(outer * reduce * inner, inner * 7 + reduce);
      std::vector<float> got(outer * inner), want(outer * inner);
      cpu::sum(x.data(), got.data(), outer, reduce, inner, 0.5f);
      for (std::size_t o = 0; o < outer; ++o)
        for (std::size_t i = 0; i < inner; ++i) {
          double acc = 0;
          for (std::size_t r = 0; r < reduce; ++r) acc += x[(o * reduce + r) * inner + i];
          want[o * inner + i] = static_cast<float>(acc * 0.5);
        }
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("max and argmax: first occurrence wins, NaN is largest") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{1, 3, 3, 2, -5, -4, -4, -9, 0, nan, 7, nan};
  std::vector<float> values(3);
  std::vector<std::int64_t> idx(3);
  cpu::max_last_dim(x.data(), values.data(), idx.data(), 3, 4);
  CHECK(idx == std::vector<std::int64_t>{1, 1, 1});
  CHECK(values[0] == 3.0f);
  CHECK(values[1] == -4.0f);
  CHECK(std::isnan(values[2]));
  std::int64_t count = -1;
  const std::vector<std::int64_t> pred{1, 2, 3, 4};
  const std::vector<std::int32_t> target{1, 0, 3, 4};
  cpu::count_equal(pred.data(), target.data(), &count, 4);
  CHECK(count == 3);
}

TEST_CASE("elementwise kernels: broadcasting walk, activations' gradients, casts, normalization") {
  // a [2, 1, 3] ∘ b [4, 1] → [2, 4, 3]
  std::vector<float> a{1, 2, 3, 4, 5, 6}, b{10, 20, 30, 40}, out(24);
  BroadcastLayout layout;
  layout.ndim = 3;
  const long long shape[3] = {2, 4, 3}, sa[3] = {3, 0, 1}, sb[3] = {0, 1, 0};
  for (int d = 0; d < 3; ++d) {
    layout.out_shape[d] = shape[d];
    layout.a_stride[d] = sa[d];
    layout.b_stride[d] = sb[d];
  }
  cpu::binary_broadcast(BinaryOp::add, a.data(), b.data(), out.data(), layout);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) CHECK(out[(i * 4 + j) * 3 + k] == a[i * 3 + k] + b[j]);
  std::vector<float> expanded(24);
  cpu::expand(a.data(), expanded.data(), layout, 2.0f);
  CHECK(expanded[(1 * 4 + 2) * 3 + 1] == 2.0f * a[1 * 3 + 1]);

  const std::vector<double> y{-1, 0, 0.25, 0.5}, dy{1, 2, 3, 4};
  std::vector<double> dx(4, 100.0);
  cpu::activation_grad(ActivationGrad::relu, dy.data(), y.data(), dx.data(), 4, WriteMode::overwrite);
  CHECK(dx == std::vector<double>{0, 0, 3, 4});
  cpu::activation_grad(ActivationGrad::sigmoid, dy.data(), y.data(), dx.data(), 4, WriteMode::accumulate);
  CHECK(dx[2] == Approx(3 + 3 * 0.25 * 0.75));
  cpu::activation_grad(ActivationGrad::tanh, dy.data(), y.data(), dx.data(), 4, WriteMode::overwrite);
  CHECK(dx[3] == Approx(4 * (1 - 0.25)));

  const std::vector<std::uint8_t> pixels{0, 51, 255};
  std::vector<float> norm(3);
  cpu::normalize_u8(pixels.data(), norm.data(), 3, 0.1307f, 0.3081f);
  for (int i = 0; i < 3; ++i) CHECK(norm[i] == Approx((pixels[i] / 255.0 - 0.1307) / 0.3081).epsilon(1e-6));
  std::vector<std::int32_t> ints(3);
  const std::vector<float> fl{-1.5f, 2.9f, 7.0f};
  cpu::cast(fl.data(), ints.data(), 3);
  CHECK(ints == std::vector<std::int32_t>{-1, 2, 7});
}

TEST_CASE("layout kernels: transpose and strided block copy") {
  std::vector<std::int32_t> x(2 * 3 * 4), y(24);
  for (int i = 0; i < 24; ++i) x[i] = i;
  cpu::transpose_last2(x.data(), y.data(), 2, 3, 4);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) CHECK(y[b * 12 + j * 3 + i] == x[b * 12 + i * 4 + j]);
  std::vector<float> src{1, 2, 3, 4, 5, 6}, dst(10, 0.0f);
  cpu::copy_2d(src.data(), 3, dst.data() + 1, 5, 2, 2);
  CHECK(dst == std::vector<float>{0, 1, 2, 0, 0, 0, 4, 5, 0, 0});
}

TEST_CASE("float to integer casts: truncation, NaN to 0, saturation (defined where C++ leaves it undefined)") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{2.7f, -2.7f, 0.0f,   -0.0f, std::nanf(""), 1e10f,         -1e10f,
                             inf,  -inf,  300.0f, -5.0f, 255.5f,        2147483520.0f, -2147483648.0f};
  std::vector<std::int32_t> i32(x.size());
  std::vector<std::int64_t> i64(x.size());
  std::vector<std::uint8_t> u8(x.size());
  cpu::cast<float, std::int32_t>(x.data(), i32.data(), x.size());
  cpu::cast<float, std::int64_t>(x.data(), i64.data(), x.size());
  cpu::cast<float, std::uint8_t>(x.data(), u8.data(), x.size());
  const std::int32_t max32 = std::numeric_limits<std::int32_t>::max(), min32 = std::numeric_limits<std::int32_t>::min();
  const std::int64_t max64 = std::numeric_limits<std::int64_t>::max(), min64 = std::numeric_limits<std::int64_t>::min();
  CHECK(i32 == std::vector<std::int32_t>{2, -2, 0, 0, 0, max32, min32, max32, min32, 300, -5, 255, 2147483520, min32});
  CHECK(i64 == std::vector<std::int64_t>{2, -2, 0, 0, 0, 10000000000LL, -10000000000LL, max64, min64, 300, -5, 255,
                                         2147483520LL, -2147483648LL});
  CHECK(u8 == std::vector<std::uint8_t>{2, 0, 0, 0, 0, 255, 0, 255, 0, 255, 0, 255, 255, 0});
  // The same rule for a scalar fill (Tensor::fill_ converts with it too).
  CHECK(cast_formula<double, std::uint8_t>(-1.0) == 0);
  CHECK(cast_formula<double, std::int32_t>(std::nan("")) == 0);
}

namespace {
template <class F>
void templated_kernel(const float*, F) {}
struct Op {};
}  // namespace

TEST_CASE("a launch names its kernel from the kernel itself") {
  // Note [launching kernels]: launch<kernel>() reports function_name<kernel>(), never a hand-written
  // string; template arguments included, so map_kernel<Neg> and map_kernel<Exp> differ.
  // (The compiler spells the name as the template argument was written, qualified or not.)
  const std::string plain(function_name<&cpu::normalize_u8>());
  CHECK_THAT(plain, Catch::Matchers::EndsWith("cpu::normalize_u8"));
  const std::string templated(function_name<templated_kernel<Op>>());
  CHECK_THAT(templated, Catch::Matchers::Contains("templated_kernel"));
#if !defined(__clang__)  // clang (14) spells a function template's specialization without its arguments
  CHECK_THAT(templated, Catch::Matchers::Contains("Op"));
#endif
}

TEST_CASE("im2col and col2im against their definition: f32, and bf16 (whose rows AVX-512 copies whole)") {
  // Rows from 3 to 70 output columns (AVX-512 moves 32 bf16 or 16 f32 values a register, the last
  // ones past each segment), padding, stride 2 and a 1×1 kernel.
  const ConvGeometry geometries[] = {
      {.n = 1, .c = 2, .h = 5, .w = 5, .k = 1, .kh = 3, .kw = 3, .stride = 1, .pad = 0},
      {.n = 1, .c = 3, .h = 9, .w = 26, .k = 1, .kh = 3, .kw = 3, .stride = 1, .pad = 0},
      {.n = 1, .c = 2, .h = 6, .w = 40, .k = 1, .kh = 3, .kw = 2, .stride = 1, .pad = 1},
      {.n = 1, .c = 1, .h = 4, .w = 72, .k = 1, .kh = 3, .kw = 3, .stride = 1, .pad = 0},
      {.n = 1, .c = 2, .h = 7, .w = 35, .k = 1, .kh = 3, .kw = 3, .stride = 2, .pad = 1},
      {.n = 1, .c = 3, .h = 3, .w = 17, .k = 1, .kh = 1, .kw = 1, .stride = 1, .pad = 0},
  };
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const auto& g : geometries) {
    INFO("c=" << g.c << " h=" << g.h << " w=" << g.w << " kernel " << g.kh << "×" << g.kw << " stride " << g.stride
              << " pad " << g.pad);
    const std::size_t oh = g.oh(), ow = g.ow(), image_size = g.c * g.h * g.w;
    const std::size_t columns_size = g.c * g.kh * g.kw * oh * ow;
    // What column entry (ci, ky, kx, y, x) reads: the pixel's index, or none in the padding.
    auto source = [&](std::size_t ci, std::size_t ky, std::size_t kx, std::size_t y, std::size_t x) -> long long {
      const long long iy = static_cast<long long>(y * g.stride + ky) - static_cast<long long>(g.pad);
      const long long ix = static_cast<long long>(x * g.stride + kx) - static_cast<long long>(g.pad);
      if (iy < 0 || ix < 0 || iy >= static_cast<long long>(g.h) || ix >= static_cast<long long>(g.w)) return -1;
      return static_cast<long long>(ci * g.h * g.w) + iy * static_cast<long long>(g.w) + ix;
    };
    std::vector<float> image(image_size), columns(columns_size);
    for (auto& v : image) v = uniform(rng);
    for (auto& v : columns) v = uniform(rng);
    std::vector<ember::bfloat16> image_bf16(image_size);
    for (std::size_t i = 0; i < image_size; ++i) image_bf16[i] = ember::bfloat16(image[i]);

    std::vector<float> cols(columns_size, 7.0f), added(image_size, 0.0f), expected_added(image_size, 0.0f);
    std::vector<ember::bfloat16> cols_bf16(columns_size, ember::bfloat16(7.0f));
    cpu::im2col(image.data(), cols.data(), g);
    cpu::im2col(image_bf16.data(), cols_bf16.data(), g);
    cpu::col2im(columns.data(), added.data(), g);
    std::size_t e = 0;
    for (std::size_t ci = 0; ci < g.c; ++ci)
      for (std::size_t ky = 0; ky < g.kh; ++ky)
        for (std::size_t kx = 0; kx < g.kw; ++kx)
          for (std::size_t y = 0; y < oh; ++y)
            for (std::size_t x = 0; x < ow; ++x, ++e) {
              const long long from = source(ci, ky, kx, y, x);
              REQUIRE(cols[e] == (from < 0 ? 0.0f : image[static_cast<std::size_t>(from)]));
              REQUIRE(cols_bf16[e].bits == (from < 0 ? 0 : image_bf16[static_cast<std::size_t>(from)].bits));
              if (from >= 0) expected_added[static_cast<std::size_t>(from)] += columns[e];
            }
    // col2im adds in the same order as this walk, so the sums agree bit for bit.
    for (std::size_t i = 0; i < image_size; ++i) REQUIRE(added[i] == expected_added[i]);
  }
}

TEST_CASE("bias+ReLU backward in bf16: the f32 kernel's bits on widened copies, dx in place or not") {
  // 700 columns: whole 256-column chunks of the bf16 kernel's sums and a part of one; zeros in y
  // (masked) and in dy; the sums rounded once.
  const std::size_t rows = 37, cols = 700, n = rows * cols;
  const auto dy_f = random_floats(n, 41), y_f = random_floats(n, 42);
  std::vector<ember::bfloat16> dy(n), y(n);
  for (std::size_t i = 0; i < n; ++i) {
    dy[i] = ember::bfloat16(i % 11 == 0 ? 0.0f : dy_f[i]);
    y[i] = ember::bfloat16(i % 13 == 0 ? 0.0f : y_f[i]);
  }
  std::vector<float> wide_dy(n), wide_y(n), want_dx(n), want_db(cols);
  for (std::size_t i = 0; i < n; ++i) {
    wide_dy[i] = static_cast<float>(dy[i]);
    wide_y[i] = static_cast<float>(y[i]);
  }
  cpu::bias_relu_backward(wide_dy.data(), wide_y.data(), want_dx.data(), want_db.data(), rows, cols);
  for (bool in_place : {false, true}) {
    INFO("dx in place of dy: " << in_place);
    std::vector<ember::bfloat16> dx = in_place ? dy : std::vector<ember::bfloat16>(n), db(cols);
    cpu::bias_relu_backward((in_place ? dx : dy).data(), y.data(), dx.data(), db.data(), rows, cols);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(dx[i].bits == ember::bfloat16(want_dx[i]).bits);
    for (std::size_t c = 0; c < cols; ++c) REQUIRE(db[c].bits == ember::bfloat16(want_db[c]).bits);
  }
}

TEST_CASE("layer norm: the note's sums, bit for bit, rows one by one") {
  // Note [layer norm's sums] written out for one row: eight f64 lanes, their total in order, then
  // the tail; each element's terms in f32 from the saved statistics. On AVX-512 lanes or not
  // (kernels_no_avx512): the same bits. Widths around the lanes.
  const auto sum_of = [](std::size_t width, const auto& term) {
    double lane[8] = {}, total = 0;
    std::size_t e = 0;
    for (; e + 8 <= width; e += 8)
      for (std::size_t j = 0; j < 8; ++j) lane[j] += term(e + j);
    for (const double v : lane) total += v;
    for (; e < width; ++e) total += term(e);
    return total;
  };
  for (const std::size_t width : {1, 7, 8, 13, 64}) {
    INFO("width=" << width);
    const std::size_t rows = 7, n = rows * width;
    const auto x = random_floats(n, 70), dy = random_floats(n, 71), gamma = random_floats(width, 72),
               beta = random_floats(width, 73);
    std::vector<float> y(n), mean(rows), invstd(rows), dx(n), dy_xhat(n);
    cpu::layer_norm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(), rows, width,
                            1e-6);
    cpu::layer_norm_backward(dy.data(), x.data(), gamma.data(), mean.data(), invstd.data(), dx.data(), dy_xhat.data(),
                             rows, width);
    std::vector<float> want_y(n), want_mean(rows), want_invstd(rows), want_dx(n), want_dy_xhat(n);
    const double m = static_cast<double>(width);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * width;
      const double mu = sum_of(width, [&](std::size_t e) { return static_cast<double>(xr[e]); }) / m;
      const double squares = sum_of(width, [&](std::size_t e) { return (xr[e] - mu) * (xr[e] - mu); });
      want_mean[r] = static_cast<float>(mu);
      want_invstd[r] = static_cast<float>(1.0 / std::sqrt(squares / m + 1e-6));
      const float saved_mu = want_mean[r], saved_inv = want_invstd[r];
      for (std::size_t e = 0; e < width; ++e)
        want_y[r * width + e] = (xr[e] - saved_mu) * saved_inv * gamma[e] + beta[e];
      const auto g = [&](std::size_t e) { return dy[r * width + e] * gamma[e]; };
      const auto xhat = [&](std::size_t e) { return (xr[e] - saved_mu) * saved_inv; };
      const auto sum_g = static_cast<float>(sum_of(width, [&](std::size_t e) { return double{g(e)}; }));
      const auto sum_g_xhat = static_cast<float>(sum_of(width, [&](std::size_t e) { return double{g(e) * xhat(e)}; }));
      const auto mf = static_cast<float>(width);
      for (std::size_t e = 0; e < width; ++e) {
        want_dx[r * width + e] = 1.0f * saved_inv / mf * (mf * g(e) - sum_g - xhat(e) * sum_g_xhat);
        want_dy_xhat[r * width + e] = dy[r * width + e] * xhat(e);
      }
    }
    const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    CHECK(same(y, want_y));
    CHECK(same(mean, want_mean));
    CHECK(same(invstd, want_invstd));
    CHECK(same(dx, want_dx));
    CHECK(same(dy_xhat, want_dy_xhat));
  }
}
