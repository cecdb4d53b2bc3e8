// The elementwise-shaped families: one f32 input (or two), one output, n elements.
#include "apps/bench/case.h"
#include "kernels/elementwise.h"
#include "kernels/layout.h"
#include "kernels/reduce.h"

namespace ember::apps::bench {
namespace {

using kernels::ActivationGrad;
using kernels::BinaryOp;
using kernels::OpArgs;
using kernels::UnaryOp;
using kernels::WriteMode;

// One input set: n elements, also read as [rows, 64] for broadcasting and the strided copy.
struct Flat {
  std::size_t n = 0, rows = 0, cols = 64;
  // [rows, 64] + [64], and the expand of a row of 64 to [rows, 64] behind sum's and mean's backward.
  kernels::BroadcastLayout layout, rows_of_bias;
  Tensor x, y;                  // y in [0, 1): the second operand, and pow's base
  Tensor pixels, pred, target;  // uint8 pixels; i64 predictions and i32 targets for the accuracy
  Tensor out, ints, count;      // outputs: f32, i32, one i64
  std::vector<Tensor*> per_set() { return {&x, &y, &pixels, &pred, &target, &out, &ints, &count}; }
};

Flat host_set(std::size_t n) {
  Flat s;
  s.n = n;
  s.rows = std::max<std::size_t>(1, n / s.cols);
  s.layout.ndim = 2;
  s.layout.out_shape[0] = static_cast<long long>(s.rows);
  s.layout.out_shape[1] = static_cast<long long>(s.cols);
  s.layout.a_stride[0] = static_cast<long long>(s.cols);
  s.layout.a_stride[1] = 1;
  s.layout.b_stride[0] = 0;
  s.layout.b_stride[1] = 1;
  s.rows_of_bias = s.layout;
  s.rows_of_bias.a_stride[0] = 0;
  const Shape shape{static_cast<std::int64_t>(n)};
  s.x = from_vector(random_vector(n, n), shape);
  s.y = from_vector(random_vector(n, n + 1, 0.0f, 1.0f), shape);
  std::vector<std::uint8_t> pixels(n);
  std::vector<std::int64_t> pred(n);
  std::vector<std::int32_t> target(n);
  for (std::size_t i = 0; i < n; ++i) {
    pixels[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 13);
    pred[i] = static_cast<std::int64_t>(i % 10);
    target[i] = static_cast<std::int32_t>((i * 7) % 10);
  }
  s.pixels = from_vector(pixels, shape);
  s.pred = from_vector(pred, shape);
  s.target = from_vector(target, shape);
  s.out = zeros(shape);
  s.ints = zeros(shape, {.dtype = DType::i32});
  s.count = zeros({1}, {.dtype = DType::i64});
  return s;
}

// out = op(in).
auto unary(UnaryOp op, OpArgs<float> args = {}, Tensor Flat::*in = &Flat::x) {
  return [=](Device d, const Flat& s) { EMBER_BENCH_CALL(d, unary, op, f32(s.*in), f32(s.out), s.n, args); };
}

// out = the activation's derivative at y applied to the gradient x.
auto activation_grad(ActivationGrad op, OpArgs<float> args = {}) {
  return [=](Device d, const Flat& s) {
    EMBER_BENCH_CALL(d, activation_grad, op, f32(s.x), f32(s.y), f32(s.out), s.n, WriteMode::overwrite, args);
  };
}

}  // namespace

void add_elementwise(std::vector<Case>& cases, const Arena& arena, std::size_t n) {
  const Flat host = host_set(n);
  const double e = static_cast<double>(n), grid = static_cast<double>(host.rows * host.cols);
  const OpArgs<float> slope{0.01f, 0.0f};
  // Transcendentals may differ by a few ulp between CUDA's and glibc's math (see
  // tests/cuda/twin_tolerances.h); plain arithmetic by one rounding.
  const std::vector<Entry<Flat>> table{
      {"relu_forward", 8 * e, &Flat::out, 1e-6, 0.0, unary(UnaryOp::relu)},
      {"exp", 8 * e, &Flat::out, 1e-6, 2e-6, unary(UnaryOp::exp)},
      {"tanh", 8 * e, &Flat::out, 1e-6, 2e-6, unary(UnaryOp::tanh)},
      {"affine", 8 * e, &Flat::out, 1e-6, 1e-6, unary(UnaryOp::affine, {1.5f, -0.5f})},
      {"binary_add", 12 * e, &Flat::out, 1e-6, 1e-6,
       [](Device d, const Flat& s) {
         EMBER_BENCH_CALL(d, binary, BinaryOp::add, f32(s.x), f32(s.y), f32(s.out), s.n);
       }},
      {"relu_backward", 12 * e, &Flat::out, 1e-6, 0.0, activation_grad(ActivationGrad::relu)},
      {"leaky_relu_forward", 8 * e, &Flat::out, 1e-6, 1e-6, unary(UnaryOp::leaky_relu, slope)},
      {"leaky_relu_backward", 12 * e, &Flat::out, 1e-6, 1e-6, activation_grad(ActivationGrad::leaky_relu, slope)},
      {"tanh_backward", 12 * e, &Flat::out, 1e-6, 1e-6, activation_grad(ActivationGrad::tanh)},
      {"pow_scalar", 8 * e, &Flat::out, 1e-6, 2e-6, unary(UnaryOp::pow, {1.5f, 0.0f}, &Flat::y)},
      // Broadcasting, over the first rows·64 elements (the tail is not written).
      {"binary_broadcast_add", 8 * grid, &Flat::out, 1e-6, 1e-6,
       [](Device d, const Flat& s) {
         EMBER_BENCH_CALL(d, binary_broadcast, BinaryOp::add, f32(s.x), f32(s.y), f32(s.out), s.layout);
       }},
      {"expand", 4 * grid, &Flat::out, 1e-6, 0.0,
       [](Device d, const Flat& s) { EMBER_BENCH_CALL(d, expand, f32(s.y), f32(s.out), s.rows_of_bias, 1.0f); }},
      // The strided block copy behind cat: the left half of each row of [rows, 64] into [rows, 32].
      {"copy_2d", 4 * grid, &Flat::out, 1e-6, 0.0,
       [](Device d, const Flat& s) {
         EMBER_BENCH_CALL(d, copy_2d, f32(s.x), s.cols, f32(s.out), s.cols / 2, s.rows, s.cols / 2);
       }},
      {"fill", 4 * e, &Flat::out, 1e-6, 0.0,
       [](Device d, const Flat& s) { EMBER_BENCH_CALL(d, fill, f32(s.out), 0.25f, s.n); }},
      // A dtype conversion, and the accuracy count over i64 predictions and i32 targets.
      {"cast_f32_i32", 8 * e, &Flat::ints, 0.0, 0.0,
       [](Device d, const Flat& s) { EMBER_BENCH_CALL(d, cast, f32(s.x), s.ints.raw<std::int32_t>(), s.n); }},
      {"count_equal", 12 * e, &Flat::count, 0.0, 0.0,
       [](Device d, const Flat& s) {
         EMBER_BENCH_CALL(d, count_equal, s.pred.raw<std::int64_t>(), s.target.raw<std::int32_t>(),
                          s.count.raw<std::int64_t>(), s.n);
       }},
      // uint8 pixels → f32, the data pipeline's normalization.
      {"normalize_u8", 5 * e, &Flat::out, 1e-6, 1e-6,
       [](Device d, const Flat& s) {
         EMBER_BENCH_CALL(d, normalize_u8, s.pixels.raw<std::uint8_t>(), f32(s.out), s.n, 0.1307f, 0.3081f);
       }},
  };
  add_table(cases, arena, host, arena.rotations(12 * n), "n=" + std::to_string(n), table);
}

// A deliberately wrong version (it forgets the ReLU), so that a test can see the tool refuse it.
void add_broken(std::vector<Case>& cases, const Arena& arena) {
  const std::size_t n = 4096;
  const auto xh = random_vector(n, 99);
  auto x = std::make_shared<Tensor>(from_vector(xh, {static_cast<std::int64_t>(n)}).to(arena.device()));
  auto out = std::make_shared<Tensor>(empty({static_cast<std::int64_t>(n)}, {.device = arena.device()}));
  std::vector<float> want(n);
  kernels::cpu::unary(kernels::UnaryOp::relu, xh.data(), want.data(), n);
  auto run = [=](int) { out->copy_(*x); };
  cases.push_back({"relu_forward", "v0-broken (self-test)", false, arena.device(), "n=4096", 8.0 * n, 0, 1, run,
                   checker(run, *out, want, 0.0, 0.0)});
}

}  // namespace ember::apps::bench
