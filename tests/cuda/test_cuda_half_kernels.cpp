// ember's 16-bit CUDA kernels against their f32 twins on the widened values, rounded once: unary
// and binary maps, activation gradients, the channel bias, max pooling, dropout, the sums and the
// bias-ReLU backward.
//
// A 16-bit kernel computes in f32 and rounds once, so it gives the bits of its f32 twin rounded —
// exactly where the f32 formula is exact on both devices (ReLU, negation, abs, clamp, the four
// arithmetic operations, affine up to nvcc's fused multiply-add), and within one 16-bit ulp where
// the devices' f32 results differ in their last bits (expf, tanhf; a sum in another order): the
// two may then round to neighbouring 16-bit values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/cuda_helpers.h"
#include "cuda/half_helpers.h"
#include "kernels/bias_activation.h"
#include "kernels/conv.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::testing;
namespace kcuda = ember::kernels::cuda;
namespace kcpu = ember::kernels::cpu;

TEMPLATE_TEST_CASE("16-bit unary kernels are their f32 twins rounded once", "[half]", bfloat16, float16) {
  using T = TestType;
  for (UnaryOp op : {UnaryOp::relu, UnaryOp::neg, UnaryOp::abs, UnaryOp::affine, UnaryOp::leaky_relu, UnaryOp::clamp,
                     UnaryOp::exp, UnaryOp::tanh, UnaryOp::sigmoid})
    for (std::size_t n : sizes_16_bit()) {
      INFO("op " << int(op) << ", n = " << n);
      const std::vector<T> x = rounded<T>(random_floats(n, n + 11, -3.0f, 3.0f));
      const OpArgs<float> args{op == UnaryOp::clamp ? -0.5f : 0.75f, op == UnaryOp::clamp ? 0.5f : -0.25f};
      Tensor dx = device_copy(x, 1), dy = device_copy(std::vector<T>(n, T(std::nanf(""))));
      kcuda::unary(op, dx.raw<T>() + 1, dy.raw<T>(), n, args, gpu_stream());
      const std::vector<float> wide = widened(x);
      std::vector<float> expected(n);
      kcpu::unary<float>(op, wide.data(), expected.data(), n, args);
      const bool transcendental = op == UnaryOp::exp || op == UnaryOp::tanh || op == UnaryOp::sigmoid;
      const bool fma = op == UnaryOp::affine;  // x·a + b: nvcc may fuse it, GCC does not
      require_rounded_once(dy.to_vector<T>(), expected, transcendental || fma);
    }
}

TEMPLATE_TEST_CASE("16-bit binary maps are their f32 twins rounded once", "[half]", bfloat16, float16) {
  using T = TestType;
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div})
    for (std::size_t n : sizes_16_bit()) {
      INFO("op " << int(op) << ", n = " << n);
      const std::vector<T> a = rounded<T>(random_floats(n, n + 81, -3.0f, 3.0f)),
                           b = rounded<T>(random_floats(n, n + 82, 0.5f, 2.0f));
      Tensor da = device_copy(a, 1), db = device_copy(b), dout = device_copy(std::vector<T>(n, T(std::nanf(""))));
      kcuda::binary(op, da.raw<T>() + 1, db.raw<T>(), dout.raw<T>(), n, gpu_stream());
      const std::vector<float> wide_a = widened(a), wide_b = widened(b);
      std::vector<float> expected(n);
      kcpu::binary<float>(op, wide_a.data(), wide_b.data(), expected.data(), n);
      require_rounded_once(dout.to_vector<T>(), expected, false);  // one f32 operation, rounded once: exact
    }
  // [rows, 1, cols] ∘ [k, 1] → [rows, k, cols].
  for (auto [rows, k, cols] : {std::tuple<long long, long long, long long>{1, 1, 1}, {3, 31, 7}, {65, 5, 300}}) {
    INFO("broadcast " << rows << "x" << k << "x" << cols);
    const std::size_t n = static_cast<std::size_t>(rows * k * cols);
    const std::vector<T> a = rounded<T>(random_floats(static_cast<std::size_t>(rows * cols), 83)),
                         b = rounded<T>(random_floats(static_cast<std::size_t>(k), 84));
    const BroadcastLayout layout = rows_k_cols_layout(rows, k, cols);
    Tensor da = device_copy(a), db = device_copy(b), dout = device_copy(std::vector<T>(n, T(std::nanf(""))));
    kcuda::binary_broadcast(BinaryOp::sub, da.raw<T>(), db.raw<T>(), dout.raw<T>(), layout, gpu_stream());
    const std::vector<float> wide_a = widened(a), wide_b = widened(b);
    std::vector<float> expected(n);
    kcpu::binary_broadcast<float>(BinaryOp::sub, wide_a.data(), wide_b.data(), expected.data(), layout);
    require_rounded_once(dout.to_vector<T>(), expected, false);
  }
}

TEMPLATE_TEST_CASE("16-bit activation gradients are their f32 twins rounded once", "[half]", bfloat16, float16) {
  using T = TestType;
  for (ActivationGrad op : {ActivationGrad::relu, ActivationGrad::leaky_relu, ActivationGrad::abs,
                            ActivationGrad::clamp, ActivationGrad::sigmoid, ActivationGrad::tanh})
    for (WriteMode mode : {WriteMode::overwrite, WriteMode::accumulate})
      for (std::size_t n : sizes_16_bit()) {
        INFO("op " << int(op) << ", mode " << int(mode) << ", n = " << n);
        const std::vector<T> dy = rounded<T>(random_floats(n, n + 21)), saved = rounded<T>(random_floats(n, n + 22));
        const std::vector<T> start = rounded<T>(random_floats(n, n + 23));
        const OpArgs<float> args{op == ActivationGrad::clamp ? -0.5f : 0.2f, 0.5f};
        Tensor ddy = device_copy(dy), dsaved = device_copy(saved, 1);
        Tensor ddx = device_copy(mode == WriteMode::overwrite ? std::vector<T>(n, T(std::nanf(""))) : start);
        kcuda::activation_grad(op, ddy.raw<T>(), dsaved.raw<T>() + 1, ddx.raw<T>(), n, mode, args, gpu_stream());
        const std::vector<float> wide_dy = widened(dy), wide_saved = widened(saved);
        std::vector<float> expected = widened(start);
        kcpu::activation_grad<float>(op, wide_dy.data(), wide_saved.data(), expected.data(), n, mode, args);
        // The products of sigmoid's and tanh's rules may be fused into FMAs by nvcc (not by GCC).
        const bool arithmetic = op == ActivationGrad::sigmoid || op == ActivationGrad::tanh;
        require_rounded_once(ddx.to_vector<T>(), expected, arithmetic || mode == WriteMode::accumulate);
      }
}

TEMPLATE_TEST_CASE("16-bit channel bias and its gradient match the CPU twins", "[half]", bfloat16, float16) {
  using T = TestType;
  for (auto [n, c, hw] :
       {std::tuple<std::size_t, std::size_t, std::size_t>{0, 3, 5}, {1, 1, 1}, {4, 7, 33}, {9, 64, 144}}) {
    INFO(n << "x" << c << "x" << hw);
    const std::vector<T> y = rounded<T>(random_floats(n * c * hw, 31)), bias = rounded<T>(random_floats(c, 32));
    Tensor dy = device_copy(y), dbias = device_copy(bias);
    kcuda::channel_bias_add(dy.raw<T>(), dbias.raw<T>(), n, c, hw, gpu_stream());
    std::vector<float> expected = widened(y);
    const std::vector<float> wide_bias = widened(bias);
    kcpu::channel_bias_add<float>(expected.data(), wide_bias.data(), n, c, hw);
    require_rounded_once(dy.to_vector<T>(), expected, false);  // one f32 addition, rounded once: exact

    Tensor grad = device_copy(std::vector<float>(c, std::nanf("")));
    const Tensor fresh = device_copy(y);
    kcuda::channel_bias_grad(fresh.raw<T>(), grad.raw<float>(), n, c, hw, gpu_stream());
    std::vector<float> want(c);
    kcpu::channel_bias_grad<T, float>(y.data(), want.data(), n, c, hw);
    // f32 sums of n·hw terms ≤ 1 in two orders: n·hw·2⁻²⁴ each way.
    EMBER_REQUIRE_CLOSE(grad.to_vector<float>(), want, static_cast<double>(n * hw) * 1.2e-7, 0);
  }
}

TEMPLATE_TEST_CASE("16-bit max pooling selects and sums as its f32 twin does", "[half]", bfloat16, float16) {
  using T = TestType;
  for (const PoolGeometry& g :
       {PoolGeometry{.n = 0, .c = 2, .h = 4, .w = 4}, PoolGeometry{.n = 2, .c = 3, .h = 8, .w = 8},
        PoolGeometry{.n = 2, .c = 4, .h = 17, .w = 15, .kernel = 3, .stride = 2},
        PoolGeometry{.n = 3, .c = 5, .h = 28, .w = 28}}) {
    INFO(g.n << "x" << g.c << "x" << g.h << "x" << g.w << ", kernel " << g.kernel << ", stride " << g.stride);
    const std::size_t in = g.n * g.c * g.h * g.w, out = g.n * g.c * g.oh() * g.ow();
    // Coarse values so that windows hold ties (the first of equal values wins), a NaN now and then,
    // and peaks on the even rows and columns, where overlapping windows (kernel 3, stride 2) meet:
    // an input that is the maximum of three or four windows sums three or four gradients.
    std::vector<float> values = random_floats(in, in + 41, -4.0f, 4.0f);
    for (std::size_t i = 0; i < in; ++i) {
      const std::size_t y = i / g.w % g.h, x = i % g.w;
      const bool peak = y % 2 == 0 && x % 2 == 0 && (y + x) % 6 == 0;
      values[i] = i % 37 == 5 ? std::nanf("") : peak ? 8.0f + static_cast<float>(i % 5) : std::round(values[i] * 4) / 4;
    }
    const std::vector<T> x = rounded<T>(values);
    Tensor dx_in = device_copy(x), dy_out = device_copy(std::vector<T>(out, T(std::nanf(""))));
    Tensor dargmax = device_copy(std::vector<std::int32_t>(out, -1));
    kcuda::max_pool2d_forward(dx_in.raw<T>(), dy_out.raw<T>(), dargmax.raw<std::int32_t>(), g, gpu_stream());
    const std::vector<float> wide = widened(x);
    std::vector<float> want(out);
    std::vector<std::int32_t> want_argmax(out);
    kcpu::max_pool2d_forward<float>(wide.data(), want.data(), want_argmax.data(), g);
    require_rounded_once(dy_out.to_vector<T>(), want, false);  // a selection: exact
    CHECK(dargmax.to_vector<std::int32_t>() == want_argmax);

    // Backward: each input sums its windows' gradients in f32 in the windows' order, as the CPU's
    // scatter adds them: the same f32 sum, rounded once.
    const std::vector<T> dy = rounded<T>(random_floats(out, out + 43));
    Tensor ddy = device_copy(dy), ddx = device_copy(std::vector<T>(in, T(std::nanf(""))));
    kcuda::max_pool2d_backward(ddy.raw<T>(), dargmax.raw<std::int32_t>(), ddx.raw<T>(), g, gpu_stream());
    const std::vector<float> wide_dy = widened(dy);
    std::vector<float> want_dx(in);
    kcpu::max_pool2d_backward<float>(wide_dy.data(), want_argmax.data(), want_dx.data(), g);
    require_rounded_once(ddx.to_vector<T>(), want_dx, false);
  }
}

TEMPLATE_TEST_CASE("16-bit dropout drops the f32 twin's elements and rounds once", "[half]", bfloat16, float16) {
  using T = TestType;
  for (const float p : {0.0f, 0.25f, 0.5f, 1.0f})
    for (std::size_t n : sizes_16_bit()) {
      INFO("p = " << p << ", n = " << n);
      const std::vector<T> x = rounded<T>(random_floats(n, n + 51, -3.0f, 3.0f));
      Tensor dx = device_copy(x), dy = device_copy(std::vector<T>(n, T(std::nanf(""))));
      Tensor dmask = device_copy(std::vector<std::uint8_t>(n, 7));
      kcuda::dropout_forward(dx.raw<T>(), dy.raw<T>(), dmask.raw<std::uint8_t>(), n, p, 1234, 99, gpu_stream());
      const std::vector<float> wide = widened(x);
      std::vector<float> want(n);
      std::vector<std::uint8_t> want_mask(n);
      kcpu::dropout_forward<float>(wide.data(), want.data(), want_mask.data(), n, p, 1234, 99);
      CHECK(dmask.to_vector<std::uint8_t>() == want_mask);
      // x/(1 − p) as x·scale in f32, rounded once: the twin's bits (a product, no fused addition).
      require_rounded_once(dy.to_vector<T>(), want, false);

      Tensor grad = device_copy(std::vector<T>(n, T(std::nanf(""))));
      kcuda::dropout_backward(dx.raw<T>(), dmask.raw<std::uint8_t>(), grad.raw<T>(), n, p, gpu_stream());
      std::vector<float> want_grad(n);
      kcpu::dropout_backward<float>(wide.data(), want_mask.data(), want_grad.data(), n, p);
      require_rounded_once(grad.to_vector<T>(), want_grad, false);
    }
}

TEMPLATE_TEST_CASE("16-bit sums are the f32 kernel's sums of the widened values, rounded once", "[half]", bfloat16,
                   float16) {
  using T = TestType;
  // [outer, reduce, inner]: rows (inner 1) short and long enough to be split in chunks, columns
  // (inner > 1) few and long enough to be split, and the bias gradient's [1, B, N].
  for (auto [outer, reduce, inner] : {std::tuple<std::size_t, std::size_t, std::size_t>{3, 0, 1},
                                      {5, 77, 1},
                                      {2, 40000, 1},
                                      {4, 33, 9},
                                      {1, 5000, 40},
                                      {1, 128, 512}}) {
    INFO(outer << "x" << reduce << "x" << inner);
    const std::size_t n = outer * reduce * inner, outs = outer * inner;
    const std::vector<T> x = rounded<T>(random_floats(n, n + 61, -2.0f, 2.0f));
    const std::size_t ws = sum_workspace_size(outer, reduce, inner);
    Tensor dx = device_copy(x), workspace = device_copy(std::vector<float>(std::max<std::size_t>(ws, 1), 0.0f));
    Tensor wide_x = device_copy(widened(x));
    Tensor want = device_copy(std::vector<float>(outs, std::nanf("")));
    const float scale = 1.0f / 3.0f;  // a mean's scale: applied to the f32 sum, before the rounding
    kcuda::sum(wide_x.raw<float>(), want.raw<float>(), outer, reduce, inner, scale, workspace.raw<float>(),
               gpu_stream());
    Tensor rounded_sum = device_copy(std::vector<T>(outs, T(std::nanf(""))));
    kcuda::sum(dx.raw<T>(), rounded_sum.raw<T>(), outer, reduce, inner, scale, workspace.raw<float>(), gpu_stream());
    require_rounded_once(rounded_sum.to_vector<T>(), want.to_vector<float>(), false);
    Tensor f32_sum = device_copy(std::vector<float>(outs, std::nanf("")));
    kcuda::sum(dx.raw<T>(), f32_sum.raw<float>(), outer, reduce, inner, scale, workspace.raw<float>(), gpu_stream());
    CHECK(f32_sum.to_vector<float>() == want.to_vector<float>());
  }
}

TEMPLATE_TEST_CASE("the 16-bit bias-ReLU backward masks exactly and rounds the f32 bias gradient once", "[half]",
                   bfloat16, float16) {
  using T = TestType;
  for (auto [rows, cols] : {std::pair<std::size_t, std::size_t>{0, 8}, {7, 5}, {64, 128}, {4096, 10}}) {
    INFO(rows << "x" << cols);
    const std::vector<T> dy = rounded<T>(random_floats(rows * cols, rows + 71)),
                         y = rounded<T>(random_floats(rows * cols, rows + 72));
    const std::size_t ws = sum_workspace_size(1, rows, cols);
    Tensor workspace = device_copy(std::vector<float>(std::max<std::size_t>(ws, 1), 0.0f));
    Tensor ddy = device_copy(dy), dyy = device_copy(y), ddx = device_copy(std::vector<T>(rows * cols, T(0.5f)));
    Tensor dbias = device_copy(std::vector<T>(cols, T(std::nanf(""))));
    kcuda::bias_relu_backward(ddy.raw<T>(), dyy.raw<T>(), ddx.raw<T>(), dbias.raw<T>(), rows, cols,
                              workspace.raw<float>(), gpu_stream());
    Tensor wide_dy = device_copy(widened(dy)), wide_y = device_copy(widened(y));
    Tensor want_dx = device_copy(std::vector<float>(rows * cols, 0.5f)),
           want_db = device_copy(std::vector<float>(cols));
    kcuda::bias_relu_backward(wide_dy.raw<float>(), wide_y.raw<float>(), want_dx.raw<float>(), want_db.raw<float>(),
                              rows, cols, workspace.raw<float>(), gpu_stream());
    require_rounded_once(ddx.to_vector<T>(), want_dx.to_vector<float>(), false);
    require_rounded_once(dbias.to_vector<T>(), want_db.to_vector<float>(), false);
  }
}

TEMPLATE_TEST_CASE("a cast list casts each of its tensors as cast() does, in one launch", "[half]", bfloat16, float16) {
  using T = TestType;
  // Sizes of every kind in one list — empty, one, a GEMM operand's, a bias's — and a full list.
  for (const std::vector<std::size_t>& sizes :
       {std::vector<std::size_t>{0, 1, 25088, 32, 4097}, std::vector<std::size_t>(CastList::kMax, 333)}) {
    INFO(sizes.size() << " entries");
    std::vector<Tensor> from, to, want;
    CastList list;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      from.push_back(device_copy(random_floats(sizes[i], 91 + i, -70000.0f, 70000.0f)));
      to.push_back(device_copy(std::vector<T>(sizes[i], T(std::nanf("")))));
      want.push_back(device_copy(std::vector<T>(sizes[i], T(std::nanf("")))));
      list.add(from.back().raw<float>(), to.back().raw<T>(), sizes[i]);
      kcuda::cast(from.back().raw<float>(), want.back().raw<T>(), sizes[i], gpu_stream());
    }
    const std::uint64_t before = kcuda::launches_issued();
    kcuda::cast_list(list, dtype_of<T>, gpu_stream());
    CHECK(kcuda::launches_issued() - before == 1);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      INFO("entry " << i << " of " << sizes[i] << " elements");
      const std::vector<T> got = to[i].to_vector<T>(), expected = want[i].to_vector<T>();
      REQUIRE(got.size() == expected.size());
      for (std::size_t e = 0; e < got.size(); ++e) REQUIRE(got[e].bits == expected[e].bits);
      std::vector<T> cpu(sizes[i]);
      CastList one;
      const std::vector<float> values = from[i].to_vector<float>();
      one.add(values.data(), cpu.data(), sizes[i]);
      kcpu::cast_list(one, dtype_of<T>);
      for (std::size_t e = 0; e < got.size(); ++e) REQUIRE(got[e].bits == cpu[e].bits);
    }
  }
}
