// Op semantics on the CPU: values, broadcasting and its gradient shapes, and the errors for
// mismatched dtypes and shapes.
#include <catch2/catch.hpp>

#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

TEST_CASE("elementwise values") {
  const Tensor a = from_vector<float>({1, 4, 9}, {3});
  const Tensor b = from_vector<float>({2, 2, 3}, {3});
  CHECK((a + b).to_vector<float>() == std::vector<float>{3, 6, 12});
  CHECK((a - b).to_vector<float>() == std::vector<float>{-1, 2, 6});
  CHECK((a * b).to_vector<float>() == std::vector<float>{2, 8, 27});
  CHECK((a / b).to_vector<float>() == std::vector<float>{0.5f, 2, 3});
  CHECK(sqrt(a).to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(pow(b, 3.0).to_vector<float>() == std::vector<float>{8, 8, 27});
  CHECK((-a).to_vector<float>() == std::vector<float>{-1, -4, -9});
  CHECK((2.0 * a + 1.0).to_vector<float>() == std::vector<float>{3, 9, 19});
  CHECK((1.0 - a).to_vector<float>() == std::vector<float>{0, -3, -8});
  CHECK((a / 2.0).to_vector<float>() == std::vector<float>{0.5f, 2, 4.5f});
  CHECK(relu(from_vector<float>({-1, 0, 2}, {3})).to_vector<float>() == std::vector<float>{0, 0, 2});
  CHECK(sigmoid(zeros({1})).item<float>() == 0.5f);
  CHECK(tanh(zeros({1})).item<float>() == 0.0f);
  CHECK(exp(zeros({1})).item<float>() == 1.0f);
  CHECK(log(ones({1})).item<float>() == 0.0f);
}

TEST_CASE("broadcasting follows NumPy's rules and gradients are reduced to each input's shape") {
  Tensor a = arange(6, {.dtype = DType::f64}).reshape({2, 1, 3}).set_requires_grad();
  Tensor b = from_vector<double>({10, 20, 30, 40}, {4, 1}).set_requires_grad();
  Tensor c = a + b;
  CHECK(c.shape() == Shape{2, 4, 3});
  CHECK(c.at<double>({1, 2, 0}) == 3 + 30);
  sum(c).backward();
  CHECK(a.grad().shape() == Shape{2, 1, 3});
  CHECK(a.grad().to_vector<double>() == std::vector<double>(6, 4.0));
  CHECK(b.grad().shape() == Shape{4, 1});
  CHECK(b.grad().to_vector<double>() == std::vector<double>(4, 6.0));
  Tensor bias = zeros({3}, {.dtype = DType::f64, .requires_grad = true});
  sum(arange(6, {.dtype = DType::f64}).reshape({2, 3}) * 0.0 + bias).backward();
  CHECK(bias.grad().to_vector<double>() == std::vector<double>{2, 2, 2});
  CHECK_THAT(message_of<ShapeError>([] {
               zeros({2, 3}) + zeros({4});
             }),
             Contains("add: shapes [2, 3] and [4] cannot be broadcast together (dim -1: 3 vs 4)"));
}

TEST_CASE("dtype and shape mismatches name both sides") {
  CHECK_THAT(message_of<DTypeError>([] { zeros({2}) + zeros({2}, {.dtype = DType::f64}); }),
             Contains("add: expected 'other' to have dtype f32 (like 'input'), but it has dtype f64"));
  CHECK_THAT(message_of<ShapeError>([] {
               matmul(zeros({2, 3}), zeros({4, 5}));
             }),
             Contains("matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)"));
  CHECK_THAT(message_of<DTypeError>([] { relu(zeros({2}, {.dtype = DType::i32})); }),
             Contains("must be a floating-point tensor"));
  CHECK_THAT(message_of<ShapeError>([] {
               linear(zeros({2, 3}), zeros({4, 5}));
             }),
             Contains("linear: 'input' of shape [2, 3] does not match 'weight' of shape [4, 5]"));
  CHECK_THAT(message_of<ShapeError>([] {
               cross_entropy(zeros({2, 3}), zeros({3}, {.dtype = DType::i64}));
             }),
             Contains("'target' must have shape [2]"));
  CHECK_THAT(message_of<DTypeError>([] {
               cross_entropy(zeros({2, 3}), zeros({2}));
             }),
             Contains("'target' must have dtype i64 or i32, but it has dtype f32"));
}

TEST_CASE("matmul, linear and transpose") {
  const Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  CHECK(matmul(a, b).to_vector<float>() == std::vector<float>{4, 5, 10, 11});
  CHECK(transpose(a).shape() == Shape{3, 2});
  CHECK(transpose(a).to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  const Tensor w = from_vector<float>({1, 1, 1, 0, 1, 0}, {2, 3});  // [out=2, in=3]
  const Tensor bias = from_vector<float>({100, 200}, {2});
  CHECK(linear(a, w, bias).to_vector<float>() == std::vector<float>{106, 202, 115, 205});
  CHECK(linear(a, w).to_vector<float>() == std::vector<float>{6, 2, 15, 5});
  CHECK(linear(a.reshape({2, 1, 3}), w, bias).shape() == Shape{2, 1, 2});
}

TEST_CASE("reductions, cat and slice") {
  const Tensor x = arange(24).reshape({2, 3, 4});
  CHECK(sum(x).item<float>() == 276.0f);
  CHECK(sum(x).dim() == 0);
  CHECK(mean(x).item<float>() == 11.5f);
  CHECK(sum(x, {1}).shape() == Shape{2, 4});
  CHECK(sum(x, {0, 2}).to_vector<float>() == std::vector<float>{60, 92, 124});
  CHECK(sum(x, {-1}, true).shape() == Shape{2, 3, 1});
  CHECK(mean(x, {0}).at<float>({0, 0}) == 6.0f);
  CHECK_THROWS_AS(sum(x, {3}), IndexError);
  CHECK_THROWS_AS(sum(x, {1, 1}), ValueError);
  const Tensor a = arange(4).reshape({2, 2});
  const Tensor b = arange(2).reshape({2, 1}) + 10.0;
  CHECK(cat({a, b}, 1).to_vector<float>() == std::vector<float>{0, 1, 10, 2, 3, 11});
  CHECK(cat({a, a}, 0).shape() == Shape{4, 2});
  CHECK_THAT(message_of<ShapeError>([&] { cat({a, b}, 0); }), Contains("tensors[1] has shape [2, 1]"));
  CHECK(slice(x, 2, 1, 2).shape() == Shape{2, 3, 2});
  CHECK(slice(x, 2, 1, 2).at<float>({1, 2, 0}) == 21.0f);
  CHECK(argmax(from_vector<float>({1, 5, 2, 9, 0, 3}, {2, 3})).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{1, 0});
  CHECK(max(from_vector<float>({1, 5, 2, 9, 0, 3}, {2, 3})).to_vector<float>() == std::vector<float>{5, 9});
  CHECK(
      accuracy(from_vector<float>({1, 5, 2, 9, 0, 3}, {2, 3}), from_vector<std::int32_t>({1, 2}, {2})).item<float>() ==
      0.5f);
}

TEST_CASE("cross_entropy: mean of the per-row losses, and bad targets name the op and value") {
  const Tensor logits = from_vector<float>({0, 0, 0, 0, 10, 0}, {2, 3});
  const Tensor target = from_vector<std::int64_t>({2, 1}, {2});
  const double row1 = std::log(1 + 2 * std::exp(-10.0));
  CHECK(cross_entropy(logits, target).item<double>() == Approx((std::log(3.0) + row1) / 2).epsilon(1e-6));
  CHECK(cross_entropy(logits, target.to(DType::i32)).item<double>() ==
        Approx((std::log(3.0) + row1) / 2).epsilon(1e-6));
  const std::string message = message_of<IndexError>([&] {
    cross_entropy(logits, from_vector<std::int64_t>({2, 3}, {2}));
  });
  CHECK_THAT(message, Contains("cross_entropy: target 3 at row 1 is out of range [0, 3)"));
  CHECK_THROWS_AS(cross_entropy(logits, from_vector<std::int64_t>({-1, 0}, {2})), IndexError);
  // A value beyond what the device-side record keeps exactly is named as a bound.
  CHECK_THAT(message_of<IndexError>([&] {
               cross_entropy(logits, from_vector<std::int64_t>({1, 50000000000LL}, {2}));
             }),
             Contains("target at least 8388607 at row 1"));
  const Tensor sm = softmax(logits);
  // Ten float exponentials and their float quotients sum to 1 within a few ulp, not exactly.
  for (float row_sum : sum(sm, {1}).to_vector<float>()) CHECK(row_sum == Approx(1.0f).epsilon(1e-6));
  CHECK(log_softmax(logits).at<float>({0, 0}) == Approx(-std::log(3.0)));
  // Over another dim: the same as over the last dim of the transposed input.
  EMBER_REQUIRE_CLOSE(softmax(logits, 0).to_vector<float>(), transpose(softmax(transpose(logits))).to_vector<float>(),
                      0.0, 0.0);
  CHECK_THROWS_AS(softmax(logits, 2), IndexError);
}

TEST_CASE("normalize_u8 maps pixels to (x/255 - mean)/std") {
  const Tensor pixels = from_vector<std::uint8_t>({0, 255, 51}, {3});
  const auto plain = normalize_u8(pixels).to_vector<float>();
  CHECK(plain[0] == 0.0f);
  CHECK(plain[1] == Approx(1.0).epsilon(1e-6));
  CHECK(plain[2] == Approx(0.2).epsilon(1e-6));
  const auto n = normalize_u8(pixels, 0.1307f, 0.3081f).to_vector<float>();
  CHECK(n[1] == Approx((1 - 0.1307) / 0.3081).epsilon(1e-6));
  CHECK_THROWS_AS(normalize_u8(zeros({3})), DTypeError);
}

TEST_CASE("the ops a PyTorch user reaches for: erf, rsqrt, abs, clamp, maximum, minimum, where, comparisons") {
  const Tensor x = from_vector<float>({-2.0f, -0.0f, 0.5f, 3.0f}, {4});
  CHECK(erf(x).to_vector<float>()[2] == Approx(0.5204999f));
  CHECK(rsqrt(from_vector<float>({4.0f}, {1})).item<float>() == 0.5f);
  const auto absolute = abs(x).to_vector<float>();
  CHECK(absolute == std::vector<float>{2.0f, 0.0f, 0.5f, 3.0f});
  CHECK_FALSE(std::signbit(absolute[1]));  // |−0| is +0
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto clamped = clamp(from_vector<float>({-5.0f, 0.2f, 9.0f, nan}, {4}), -1.0, 1.0).to_vector<float>();
  CHECK(clamped[0] == -1.0f);
  CHECK(clamped[1] == 0.2f);
  CHECK(clamped[2] == 1.0f);
  CHECK(std::isnan(clamped[3]));
  CHECK_THROWS_AS(clamp(x, 1.0, -1.0), ValueError);
  const Tensor a = from_vector<float>({1.0f, 5.0f, nan, 2.0f}, {4}),
               b = from_vector<float>({3.0f, 4.0f, 0.0f, 2.0f}, {4});
  const auto hi = maximum(a, b).to_vector<float>(), lo = minimum(a, b).to_vector<float>();
  CHECK(hi[0] == 3.0f);
  CHECK(hi[1] == 5.0f);
  CHECK(std::isnan(hi[2]));  // NaN propagates, as in PyTorch
  CHECK(lo[0] == 1.0f);
  CHECK(std::isnan(lo[2]));
  // A tie splits the gradient.
  const Tensor p = from_vector<float>({2.0f}, {1}).set_requires_grad(),
               q = from_vector<float>({2.0f}, {1}).set_requires_grad();
  sum(maximum(p, q)).backward();
  CHECK(p.grad().item<float>() == 0.5f);
  CHECK(q.grad().item<float>() == 0.5f);
  CHECK(gt(a, b).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 1, 0, 0});
  CHECK(ge(a, b).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 1, 0, 1});
  CHECK(ne(a, b).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{1, 1, 1, 0});  // NaN != anything
  CHECK(lt(x, 0.0).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{1, 0, 0, 0});
  // where: u8 or any condition (nonzero: true), broadcast.
  const Tensor chosen = where(gt(a, b), a, from_vector<float>({-1.0f}, {1}));
  CHECK(chosen.to_vector<float>() == std::vector<float>{-1.0f, 5.0f, -1.0f, -1.0f});
  const Tensor float_cond = from_vector<float>({0.0f, 0.3f, -2.0f, 0.0f}, {4});
  CHECK(where(float_cond, b, a).to_vector<float>()[0] == 1.0f);
  CHECK(where(float_cond, b, a).to_vector<float>()[1] == 4.0f);
}

TEST_CASE("var, std, permute, unsqueeze, broadcast_to, and PyTorch's spellings of reductions") {
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(var(x).item<float>() == Approx(3.5f));  // unbiased, as torch.var
  CHECK(var(x, {0, 1}, 0).item<float>() == Approx(35.0f / 12.0f));
  CHECK(var(x, 1).to_vector<float>() == std::vector<float>{1.0f, 1.0f});
  CHECK(ember::std(x, 0, 0).to_vector<float>() == std::vector<float>{1.5f, 1.5f, 1.5f});
  CHECK(mean(x, -1, true).shape() == Shape{2, 1});
  CHECK(sum(x, 0).to_vector<float>() == std::vector<float>{5, 7, 9});
  CHECK(unsqueeze(x, 0).shape() == Shape{1, 2, 3});
  CHECK(unsqueeze(x, -1).shape() == Shape{2, 3, 1});
  const Tensor cube = arange(24).to(DType::f32).reshape({2, 3, 4});
  const Tensor p = permute(cube, {2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.at<float>({3, 1, 2}) == cube.at<float>({1, 2, 3}));
  CHECK_THROWS_AS(permute(cube, {0, 0, 1}), ValueError);
  const Tensor b = broadcast_to(from_vector<float>({1, 2, 3}, {3}), {2, 3});
  CHECK(b.to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3});
  CHECK_THROWS_AS(broadcast_to(x, {3, 3}), ShapeError);
}
