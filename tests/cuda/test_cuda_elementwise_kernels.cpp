// The elementwise CUDA kernels (unary, binary and broadcast, activation gradients, fill, cast,
// normalize_u8) against their CPU twins on fresh random inputs: sizes 0, 1, 31, 1000, 65,537 and
// over 4 million, a misaligned offset, and outputs poisoned with NaN before the call; and the exact
// formulas bit for bit on special values. Tolerances: tests/cuda/twin_tolerances.h.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/cuda_helpers.h"
#include "cuda/twin_tolerances.h"
#include "kernels/elementwise.h"

using namespace ember::kernels;
using namespace ember::testing;
using ember::Tensor;
namespace kcuda = ember::kernels::cuda;
namespace kcpu = ember::kernels::cpu;

namespace {
// Every unary op with the arguments it is tested with: its list's ops (Note [op lists]) with none,
// and the ops that take arguments (pow twice: its square is a product, other powers powf).
std::vector<std::pair<UnaryOp, OpArgs<float>>> unary_cases() {
  std::vector<std::pair<UnaryOp, OpArgs<float>>> cases;
  for (UnaryOp op : OpList<UnaryOp>::all) {
    if (op == UnaryOp::pow) {
      cases.push_back({op, {2.0f, 0}});
      cases.push_back({op, {0.5f, 0}});
    } else {
      const OpArgs<float> args = op == UnaryOp::leaky_relu ? OpArgs<float>{0.01f, 0}
                                 : op == UnaryOp::affine   ? OpArgs<float>{-1.5f, 0.25f}
                                 : op == UnaryOp::clamp    ? OpArgs<float>{-1.0f, 2.5f}
                                                           : OpArgs<float>{};
      cases.push_back({op, args});
    }
  }
  return cases;
}

// The values where twins most easily part: ±0, ±∞, NaN, the smallest and largest denormals,
// the smallest normal, ±1, and large finite values.
std::vector<float> special_values() {
  const float inf = std::numeric_limits<float>::infinity(), denorm = std::numeric_limits<float>::denorm_min();
  return {0.0f,
          -0.0f,
          inf,
          -inf,
          std::numeric_limits<float>::quiet_NaN(),
          denorm,
          -denorm,
          std::numeric_limits<float>::min() - denorm,
          std::numeric_limits<float>::min(),
          1.0f,
          -1.0f,
          3e38f,
          -3e38f,
          2.5f,
          -2.5f};
}

// Bit for bit, NaN matching NaN whatever its payload.
void require_same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", the CPU twin gives " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else {
      std::uint32_t a = 0, b = 0;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want[i], 4);
      CHECK(a == b);
    }
  }
}
}  // namespace

TEST_CASE("unary kernels match the CPU twins") {
  for (auto [op, args] : unary_cases()) {
    const bool positive_only = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::pow || op == UnaryOp::rsqrt;
    // Formulas of IEEE arithmetic alone; the others call the C library's functions (an op not
    // named here gets their tolerance).
    const bool plain = op == UnaryOp::neg || op == UnaryOp::relu || op == UnaryOp::leaky_relu ||
                       op == UnaryOp::affine || op == UnaryOp::abs || op == UnaryOp::clamp;
    for (std::size_t n : test_sizes())
      for (std::size_t offset : {0, 1}) {
        INFO(op_name(op) << " n=" << n << " offset=" << offset);
        const auto x = random_floats(n, n + offset, positive_only ? 0.01f : -5.0f, 5.0f);
        Tensor dx = device_copy(x, offset);
        Tensor dy = poisoned<float>(n, offset);
        kcuda::unary(op, dx.raw<float>() + offset, dy.raw<float>() + offset, n, args, gpu_stream());
        std::vector<float> expected(n);
        kcpu::unary(op, x.data(), expected.data(), n, args);
        // gelu's 1 + erf(x/√2) cancels where x is very negative, so the two erf's last-bit
        // difference (each within an ulp: 2⁻²⁴ near −1) reaches the result whole, times ½|x|:
        // up to 5·2⁻²⁴ ≈ 3e-7 for |x| ≤ 5, over kTranscAtol (PyTorch's formula, and its bits).
        const double atol = plain ? kArithAtol : op == UnaryOp::gelu ? 5 * 0x1p-24 : kTranscAtol;
        EMBER_REQUIRE_CLOSE(read_back<float>(dy, offset), expected, atol, plain ? kArithRtol : kTranscRtol);
      }
  }
}

TEST_CASE("exact formulas agree with their CPU twins bit for bit on special values") {
  // Note [one formula per op]: where IEEE arithmetic makes a formula exact, one formula gives one
  // result on both backends — −0 included (it once came out +0 from one LeakyReLU twin only).
  const std::vector<float> x = special_values();
  const std::size_t n = x.size();
  std::vector<float> y = x;
  std::reverse(y.begin(), y.end());
  Tensor dx = device_copy(x), dy = device_copy(y);
  for (auto [op, args] : {std::pair{UnaryOp::neg, OpArgs<float>{}},
                          {UnaryOp::relu, OpArgs<float>{}},
                          {UnaryOp::leaky_relu, OpArgs<float>{0.01f, 0}},
                          {UnaryOp::sqrt, OpArgs<float>{}},
                          {UnaryOp::abs, OpArgs<float>{}},
                          {UnaryOp::clamp, OpArgs<float>{-1.0f, 2.5f}}}) {
    INFO(op_name(op));
    Tensor out = poisoned<float>(n);
    kcuda::unary(op, dx.raw<float>(), out.raw<float>(), n, args, gpu_stream());
    std::vector<float> want(n);
    kcpu::unary(op, x.data(), want.data(), n, args);
    require_same_bits(read_back<float>(out), want);
  }
  for (BinaryOp op : OpList<BinaryOp>::all) {  // all exact
    INFO(op_name(op));
    Tensor out = poisoned<float>(n);
    kcuda::binary(op, dx.raw<float>(), dy.raw<float>(), out.raw<float>(), n, gpu_stream());
    std::vector<float> want(n);
    kcpu::binary(op, x.data(), y.data(), want.data(), n);
    require_same_bits(read_back<float>(out), want);
  }
  for (ActivationGrad op : {ActivationGrad::relu, ActivationGrad::leaky_relu, ActivationGrad::abs}) {
    INFO(op_name(op));
    Tensor out = poisoned<float>(n);
    kcuda::activation_grad(op, dy.raw<float>(), dx.raw<float>(), out.raw<float>(), n, WriteMode::overwrite, {0.01f, 0},
                           gpu_stream());
    std::vector<float> want(n);
    kcpu::activation_grad(op, y.data(), x.data(), want.data(), n, WriteMode::overwrite, {0.01f, 0});
    require_same_bits(read_back<float>(out), want);
  }
  // select (where) is exact: the chosen value itself.
  std::vector<std::uint8_t> cond(n);
  for (std::size_t i = 0; i < n; ++i) cond[i] = static_cast<std::uint8_t>(i % 3 == 0);
  Tensor dcond = device_copy(cond), picked = poisoned<float>(n);
  kcuda::select(dcond.raw<std::uint8_t>(), dx.raw<float>(), dy.raw<float>(), picked.raw<float>(), n, gpu_stream());
  std::vector<float> want_picked(n);
  kcpu::select(cond.data(), x.data(), y.data(), want_picked.data(), n);
  require_same_bits(read_back<float>(picked), want_picked);
  // Float to integer: NaN to 0, out of range saturating, the same on both (kernels::cast_formula).
  Tensor ints = ember::empty({static_cast<std::int64_t>(n)}, {.dtype = ember::DType::i32, .device = kGpu});
  Tensor bytes = ember::empty({static_cast<std::int64_t>(n)}, {.dtype = ember::DType::u8, .device = kGpu});
  kcuda::cast<float, std::int32_t>(dx.raw<float>(), ints.raw<std::int32_t>(), n, gpu_stream());
  kcuda::cast<float, std::uint8_t>(dx.raw<float>(), bytes.raw<std::uint8_t>(), n, gpu_stream());
  std::vector<std::int32_t> want_ints(n);
  std::vector<std::uint8_t> want_bytes(n);
  kcpu::cast<float, std::int32_t>(x.data(), want_ints.data(), n);
  kcpu::cast<float, std::uint8_t>(x.data(), want_bytes.data(), n);
  CHECK(ints.to_vector<std::int32_t>() == want_ints);
  CHECK(bytes.to_vector<std::uint8_t>() == want_bytes);
}

TEST_CASE("binary kernels, same shape and broadcast, match the CPU twins") {
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::maximum, BinaryOp::minimum,
                      BinaryOp::maximum_share, BinaryOp::gt, BinaryOp::eq})
    for (std::size_t n : test_sizes()) {
      INFO(op_name(op) << " n=" << n);
      const auto a = random_floats(n, n + 1), b = random_floats(n, n + 2, 0.5f, 2.0f);
      Tensor da = device_copy(a, 1), db = device_copy(b), dout = poisoned<float>(n);
      kcuda::binary(op, da.raw<float>() + 1, db.raw<float>(), dout.raw<float>(), n, gpu_stream());
      std::vector<float> expected(n);
      kcpu::binary(op, a.data(), b.data(), expected.data(), n);
      EMBER_REQUIRE_CLOSE(read_back<float>(dout), expected, kArithAtol, kArithRtol);
    }
  // [rows, 1, cols] ∘ [k, 1] → [rows, k, cols], with sizes that are not multiples of anything.
  for (auto [rows, k, cols] : {std::tuple<long long, long long, long long>{1, 1, 1}, {3, 31, 7}, {257, 5, 1000}}) {
    const std::size_t n = static_cast<std::size_t>(rows * k * cols);
    INFO("broadcast " << rows << "x" << k << "x" << cols);
    const auto a = random_floats(static_cast<std::size_t>(rows * cols), 11),
               b = random_floats(static_cast<std::size_t>(k), 12);
    const BroadcastLayout layout = rows_k_cols_layout(rows, k, cols);
    Tensor da = device_copy(a), db = device_copy(b), dout = poisoned<float>(n), dexp = poisoned<float>(n);
    kcuda::binary_broadcast(BinaryOp::mul, da.raw<float>(), db.raw<float>(), dout.raw<float>(), layout, gpu_stream());
    kcuda::expand(da.raw<float>(), dexp.raw<float>(), layout, 0.5f, gpu_stream());
    std::vector<float> expected(n), expanded(n);
    kcpu::binary_broadcast(BinaryOp::mul, a.data(), b.data(), expected.data(), layout);
    kcpu::expand(a.data(), expanded.data(), layout, 0.5f);
    EMBER_REQUIRE_CLOSE(read_back<float>(dout), expected, kArithAtol, kArithRtol);
    EMBER_REQUIRE_CLOSE(read_back<float>(dexp), expanded, 0.0, 0.0);
  }
}

TEST_CASE("activation gradients match the CPU twins, overwriting and accumulating") {
  for (ActivationGrad op : OpList<ActivationGrad>::all)
    for (WriteMode mode : {WriteMode::overwrite, WriteMode::accumulate})
      for (std::size_t n : test_sizes()) {
        INFO(op_name(op) << " mode=" << int(mode) << " n=" << n);
        const auto dy = random_floats(n, n + 3), y = random_floats(n, n + 4), start = random_floats(n, n + 5);
        Tensor ddy = device_copy(dy), dyv = device_copy(y, 1);
        Tensor ddx = mode == WriteMode::overwrite ? poisoned<float>(n) : device_copy(start);
        const OpArgs<float> slope{op == ActivationGrad::clamp ? -0.5f : 0.2f, 0.5f};  // clamp: bounds [−½, ½]
        kcuda::activation_grad(op, ddy.raw<float>(), dyv.raw<float>() + 1, ddx.raw<float>(), n, mode, slope,
                               gpu_stream());
        std::vector<float> expected = start;
        kcpu::activation_grad(op, dy.data(), y.data(), expected.data(), n, mode, slope);
        // Those of IEEE arithmetic alone on the saved value; the others call expf (erf's e^(−x²),
        // softplus's), and CUDA's expf is not glibc's (an op not named here is taken as one of them).
        const bool transcendental =
            !(op == ActivationGrad::relu || op == ActivationGrad::sigmoid || op == ActivationGrad::tanh ||
              op == ActivationGrad::leaky_relu || op == ActivationGrad::rsqrt || op == ActivationGrad::abs ||
              op == ActivationGrad::clamp);
        // Accumulating adds the gradient to values in [−1, 1): where the two nearly cancel, the
        // gradient's last-bit difference between expf's is an f32 ulp of the operand (2⁻²⁴ below 1)
        // against a small result — an H200 showed 1.19e-7 there, over kTranscAtol's 1e-7.
        const double atol = (transcendental ? kTranscAtol : kArithAtol) +
                            (transcendental && mode == WriteMode::accumulate ? 0x1p-23 : 0.0);
        EMBER_REQUIRE_CLOSE(read_back<float>(ddx), expected, atol, transcendental ? kTranscRtol : kArithRtol);
      }
}

TEST_CASE("fill, cast and normalize_u8 match the CPU twins") {
  for (std::size_t n : test_sizes()) {
    INFO("n=" << n);
    Tensor f = poisoned<float>(n);
    kcuda::fill(f.raw<float>(), 2.5f, n, gpu_stream());
    CHECK(read_back<float>(f) == std::vector<float>(n, 2.5f));
    const auto x = random_floats(n, n, -300.0f, 300.0f);
    Tensor dx = device_copy(x, 1);
    Tensor di = poisoned<std::int32_t>(n);
    kcuda::cast(dx.raw<float>() + 1, di.raw<std::int32_t>(), n, gpu_stream());
    std::vector<std::int32_t> expected_i(n);
    kcpu::cast(x.data(), expected_i.data(), n);
    CHECK(read_back<std::int32_t>(di) == expected_i);
    std::vector<std::uint8_t> pixels(n);
    for (std::size_t i = 0; i < n; ++i) pixels[i] = static_cast<std::uint8_t>((i * 37 + n) % 256);
    Tensor dp = device_copy(pixels, 3), dn = poisoned<float>(n);
    kcuda::normalize_u8(dp.raw<std::uint8_t>() + 3, dn.raw<float>(), n, 0.1307f, 0.3081f, gpu_stream());
    std::vector<float> expected(n);
    kcpu::normalize_u8(pixels.data(), expected.data(), n, 0.1307f, 0.3081f);
    EMBER_REQUIRE_CLOSE(read_back<float>(dn), expected, kArithAtol, kArithRtol);
  }
}
