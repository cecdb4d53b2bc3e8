// The GPU in bf16 and f16: ember's 16-bit kernels against their f32 twins on the widened values,
// rounded once; cuDNN's 16-bit convolutions against the CPU's f32 convolution of the same values;
// cuBLASLt's epilogue GEMMs with 16-bit operands; and the TF32 switch reaching cuBLAS, cuBLASLt
// and cuDNN.
//
// Tolerances. A 16-bit kernel computes in f32 and rounds once, so it gives the bits of its f32
// twin rounded — exactly where the f32 formula is exact on both devices (ReLU, negation, abs,
// clamp, affine up to nvcc's fused multiply-add), and within one 16-bit ulp where the devices' f32
// results differ in their last bits (expf, tanhf; a sum in another order): the two may then round
// to neighbouring 16-bit values. A 16-bit convolution output is an f32 sum of K exact products,
// in cuDNN's order and the CPU's: they differ by at most K·2⁻²⁴·Σ|x·w| ≤ 2⁻¹⁶·Σ|x·w| for K ≤ 256,
// before each rounds once. How wide tensor cores accumulate is NVIDIA's to choose (the software GPU
// sums in f32); a GPU that sums narrower than f32 would exceed this bound, and the test says so.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/ops/fused.h"
#include "core/ops/ops.h"
#include "cuda/cuda_helpers.h"
#include "kernels/bias_activation.h"
#include "kernels/conv.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/gemm_epilogue.h"
#include "kernels/reduce.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::testing;
namespace kcuda = ember::kernels::cuda;
namespace kcpu = ember::kernels::cpu;

namespace {

template <class T>
std::vector<T> rounded(const std::vector<float>& values) {
  std::vector<T> out;
  for (float v : values) out.push_back(T(v));
  return out;
}
template <class T>
std::vector<float> widened(const std::vector<T>& values) {
  return std::vector<float>(values.begin(), values.end());
}

// The distance from v to the next 16-bit value away from zero: one ulp of T at v.
template <class T>
float ulp_at(float v) {
  T t(std::fabs(v));
  T next = T::from_bits(static_cast<std::uint16_t>(t.bits + 1));
  return static_cast<float>(next) - static_cast<float>(t);
}

// got equals want, or (where `one_ulp`) lies one 16-bit step from it; NaN matches NaN.
template <class T>
void require_rounded_once(const std::vector<T>& got, const std::vector<float>& want_f32, bool one_ulp) {
  REQUIRE(got.size() == want_f32.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const T want(want_f32[i]);
    INFO("element " << i << ": got " << static_cast<float>(got[i]) << ", the twin rounds to "
                    << static_cast<float>(want) << " (f32 " << want_f32[i] << ")");
    if (std::isnan(static_cast<float>(want))) {
      CHECK(std::isnan(static_cast<float>(got[i])));
    } else if (one_ulp) {
      CHECK(std::fabs(static_cast<float>(got[i]) - static_cast<float>(want)) <= ulp_at<T>(want_f32[i]));
    } else {
      CHECK(got[i].bits == want.bits);
    }
  }
}

std::vector<std::size_t> sizes_16_bit() {
  std::vector<std::size_t> sizes;
  for (std::size_t n : test_sizes())
    if (n < 1000000) sizes.push_back(n);  // the f32 kernels' test has the largest size
  return sizes;
}

}  // namespace

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

TEMPLATE_TEST_CASE("cuDNN convolutions in bf16 and f16 round the f32 sums once", "[half][cudnn]", bfloat16, float16) {
  using T = TestType;
  const DType dtype = dtype_of<T>;
  // The CNN's two convolutions (batch cut for the software GPU), a strided one and a 5×5 padded one.
  for (auto [n, c, h, k, kernel, stride, pad] : {std::tuple{4, 1, 28, 32, 3, 1, 0}, std::tuple{2, 32, 26, 64, 3, 1, 0},
                                                 std::tuple{3, 8, 13, 16, 3, 2, 1}, std::tuple{1, 3, 7, 5, 5, 1, 2}}) {
    INFO(n << "x" << c << "x" << h << "x" << h << " → " << k << ", kernel " << kernel << ", stride " << stride
           << ", pad " << pad);
    const Tensor x = uniform({n, c, h, h}, -1, 1).to(dtype), w = uniform({k, c, kernel, kernel}, -1, 1).to(dtype);
    const Tensor b = uniform({k}, -1, 1).to(dtype);
    // The reference: the CPU's f32 convolution of the same values, and Σ|x·w| for the bound.
    const Tensor xf = x.to(DType::f32), wf = w.to(DType::f32), bf = b.to(DType::f32);
    const Tensor reference = fused::conv2d_relu(xf, wf, bf, stride, pad);
    const Tensor magnitudes = conv2d(abs(xf), abs(wf), abs(bf), stride, pad);
    const std::vector<float> magnitude = magnitudes.to_vector<float>();
    const Tensor got = fused::conv2d_relu(x.to(kGpu), w.to(kGpu), b.to(kGpu), stride, pad);
    REQUIRE(got.dtype() == dtype);
    const std::vector<T> values = got.to_vector<T>();
    const std::vector<float> want = reference.to_vector<float>();
    REQUIRE(values.size() == want.size());
    std::size_t outside = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float bound = ulp_at<T>(want[i]) + magnitude[i] * 0x1p-16f;
      if (std::fabs(static_cast<float>(values[i]) - want[i]) > bound) ++outside;
    }
    CHECK(outside == 0);

    // The backward: input and weight gradients in T, the bias gradient summed in f32, against the
    // f32 gradients of the same values rounded once (one 16-bit ulp, or the sums' order bound).
    const Tensor upstream = uniform(reference.shape(), -1, 1).to(dtype);
    Tensor gx = x.to(kGpu).set_requires_grad(), gw = w.to(kGpu).set_requires_grad(),
           gb = b.to(kGpu).set_requires_grad();
    sum(fused::conv2d_relu(gx, gw, gb, stride, pad) * upstream.to(kGpu)).backward();
    Tensor rx = xf.detach().set_requires_grad(), rw = wf.detach().set_requires_grad(),
           rb = bf.detach().set_requires_grad();
    sum(fused::conv2d_relu(rx, rw, rb, stride, pad) * upstream.to(DType::f32)).backward();
    for (auto [device_grad, cpu_grad] :
         {std::pair{gx.grad(), rx.grad()}, std::pair{gw.grad(), rw.grad()}, std::pair{gb.grad(), rb.grad()}}) {
      REQUIRE(device_grad.dtype() == dtype);
      const Tensor got_wide = device_grad.to(DType::f32), want_wide = cpu_grad;
      const std::vector<float> got_grad = got_wide.to_vector<float>(), want_grad = want_wide.to_vector<float>();
      float scale = 0.0f;
      for (float v : want_grad) scale = std::max(scale, std::fabs(v));
      for (std::size_t i = 0; i < got_grad.size(); ++i) {
        INFO("gradient element " << i);
        CHECK(std::fabs(got_grad[i] - want_grad[i]) <= ulp_at<T>(want_grad[i]) + scale * 0x1p-12f);
      }
    }
  }
}

TEST_CASE("allow_tf32 reaches cuBLAS, cuBLASLt and cuDNN, and is off by default", "[cudnn]") {
  // 1 + 2⁻²⁰ has no TF32 value of its own (10 mantissa bits): its product with 1 is itself in f32
  // and 1 in TF32. A GPU may still take a non-TF32 kernel when allowed; the software GPU always
  // rounds, so there the switch's effect is required.
  REQUIRE_FALSE(ember::cuda::allow_tf32());
  const float fine = 1.0f + 0x1p-20f;
  const auto products = [&] {
    Tensor a = full({4, 4}, fine).to(kGpu), one = full({4, 4}, 1.0f).to(kGpu), c = zeros({4, 4}).to(kGpu);
    kcuda::gemm(Transpose::no, Transpose::no, 4, 4, 1, 1.0f, a.raw<float>(), 4, one.raw<float>(), 4, 0.0f,
                c.raw<float>(), 4, gpu_stream());
    Tensor bias = zeros({4}).to(kGpu), d = zeros({4, 4}).to(kGpu);
    EpilogueGemm lt{GemmEpilogue::bias,
                    Transpose::no,
                    Transpose::no,
                    4,
                    4,
                    1,
                    a.raw<float>(),
                    4,
                    one.raw<float>(),
                    4,
                    d.raw<float>(),
                    4,
                    bias.raw<float>(),
                    nullptr};
    const bool lt_runs = kcuda::gemm_epilogue_supported(lt);
    if (lt_runs) kcuda::gemm_epilogue(lt, gpu_stream());
    const Tensor y = conv2d(full({1, 1, 4, 4}, fine).to(kGpu), full({1, 1, 1, 1}, 1.0f).to(kGpu));
    return std::tuple{c.to_vector<float>()[5], lt_runs ? d.to_vector<float>()[5] : fine, y.to_vector<float>()[5]};
  };
  const auto [sgemm, lt, cudnn] = products();
  CHECK(sgemm == fine);
  CHECK(lt == fine);
  CHECK(cudnn == fine);
  ember::cuda::set_allow_tf32(true);
  const auto [sgemm32, lt32, cudnn32] = products();
  ember::cuda::set_allow_tf32(false);
  for (float v : {sgemm32, lt32, cudnn32}) {
    INFO("with TF32 allowed: " << v);
    CHECK((v == 1.0f || v == fine));
    if (running_on_software_gpu()) CHECK(v == 1.0f);
  }
  const auto [sgemm_after, lt_after, cudnn_after] = products();  // the plans made under TF32 are not reused
  CHECK(sgemm_after == fine);
  CHECK(lt_after == fine);
  CHECK(cudnn_after == fine);
}

TEMPLATE_TEST_CASE("cuBLASLt's epilogues in bf16 and f16 round the f32 sums once", "[half]", bfloat16, float16) {
  // The fused MLP step's three epilogue GEMMs at its first layer's shape, 16-bit operands: the
  // forward (bias, ReLU and its mask), the masked input gradient with the bias gradient, and the
  // weight gradient with BGRADB into f32.
  using T = TestType;
  const DType dtype = dtype_of<T>;
  const std::size_t rows = small_test_sizes() ? 32 : 128, in = 784, out = small_test_sizes() ? 64 : 512;
  const auto values = [&](std::size_t n, std::uint64_t seed) { return rounded<T>(random_floats(n, seed)); };
  const std::vector<T> a = values(rows * in, 51), w = values(out * in, 52), bias = values(out, 53),
                       g = values(rows * out, 54);
  const std::vector<float> a32 = widened(a), w32 = widened(w), bias32 = widened(bias), g32 = widened(g);
  std::vector<float> abs_a, abs_w;
  for (float v : a32) abs_a.push_back(std::fabs(v));
  for (float v : w32) abs_w.push_back(std::fabs(v));
  // z = a·wᵀ + bias on the CPU in f32, and Σ|a·w| for the bound.
  std::vector<float> z(rows * out), magnitude(rows * out);
  kcpu::gemm(Transpose::no, Transpose::yes, rows, out, in, 1.0f, a32.data(), in, w32.data(), in, 0.0f, z.data(), out);
  kcpu::gemm(Transpose::no, Transpose::yes, rows, out, in, 1.0f, abs_a.data(), in, abs_w.data(), in, 0.0f,
             magnitude.data(), out);
  const auto within = [&](float got, float want, float terms) {
    return std::fabs(got - want) <= ulp_at<T>(want) + terms * 0x1p-16f;
  };

  Tensor da = device_copy(a), dw = device_copy(w), dbias = device_copy(bias),
         dh = device_copy(std::vector<T>(rows * out));
  Tensor mask = zeros({static_cast<std::int64_t>(relu_mask_bytes(rows, out))}, {.dtype = DType::u8}).to(kGpu);
  EpilogueGemm forward{GemmEpilogue::relu_aux_bias,
                       Transpose::no,
                       Transpose::yes,
                       rows,
                       out,
                       in,
                       da.raw<T>(),
                       in,
                       dw.raw<T>(),
                       in,
                       dh.raw<T>(),
                       out,
                       dbias.raw<T>(),
                       mask.raw_bytes(),
                       dtype,
                       dtype};
  REQUIRE(kcuda::gemm_epilogue_supported(forward));
  kcuda::gemm_epilogue(forward, gpu_stream());
  const std::vector<T> h = dh.to_vector<T>();
  std::size_t outside = 0;
  for (std::size_t i = 0; i < rows * out; ++i) {
    const float want = std::max(0.0f, z[i] + bias32[i % out]);
    if (!within(static_cast<float>(h[i]), want, magnitude[i] + std::fabs(bias32[i % out]))) ++outside;
  }
  CHECK(outside == 0);

  // The masked input gradient: g [rows, out] times a square [out, out] matrix (w's first `out`
  // columns), masked by the forward's ReLU bits, and its column sums (the bias gradient) in T.
  std::vector<float> square(out * out), abs_square(out * out), dz(rows * out), dz_magnitude(rows * out);
  for (std::size_t i = 0; i < out * out; ++i) {
    square[i] = w32[(i / out) * in + i % out];
    abs_square[i] = std::fabs(square[i]);
  }
  std::vector<float> abs_g;
  for (float v : g32) abs_g.push_back(std::fabs(v));
  kcpu::gemm(Transpose::no, Transpose::no, rows, out, out, 1.0f, g32.data(), out, square.data(), out, 0.0f, dz.data(),
             out);
  kcpu::gemm(Transpose::no, Transpose::no, rows, out, out, 1.0f, abs_g.data(), out, abs_square.data(), out, 0.0f,
             dz_magnitude.data(), out);
  Tensor dg = device_copy(g), dsquare = device_copy(rounded<T>(square)), ddz = device_copy(std::vector<T>(rows * out));
  Tensor dbias_grad = device_copy(std::vector<T>(out));
  EpilogueGemm backward{GemmEpilogue::drelu_bgrad,
                        Transpose::no,
                        Transpose::no,
                        rows,
                        out,
                        out,
                        dg.raw<T>(),
                        out,
                        dsquare.raw<T>(),
                        out,
                        ddz.raw<T>(),
                        out,
                        dbias_grad.raw<T>(),
                        mask.raw_bytes(),
                        dtype,
                        dtype};
  REQUIRE(kcuda::gemm_epilogue_supported(backward));
  kcuda::gemm_epilogue(backward, gpu_stream());
  const std::vector<T> got_dz = ddz.to_vector<T>(), got_db = dbias_grad.to_vector<T>();
  std::vector<float> db(out, 0.0f), db_magnitude(out, 0.0f);
  outside = 0;
  for (std::size_t i = 0; i < rows * out; ++i) {
    const bool active = static_cast<float>(h[i]) > 0.0f;
    const float want = active ? dz[i] : 0.0f;
    if (!within(static_cast<float>(got_dz[i]), want, dz_magnitude[i])) ++outside;
    db[i % out] += want;
    db_magnitude[i % out] += active ? dz_magnitude[i] : 0.0f;
  }
  CHECK(outside == 0);
  outside = 0;
  for (std::size_t j = 0; j < out; ++j)
    if (!within(static_cast<float>(got_db[j]), db[j], db_magnitude[j] + std::fabs(db[j]))) ++outside;
  CHECK(outside == 0);

  // dW = dzᵀ·a into f32 and db = Σ_rows dz (BGRADB over op(A) = dzᵀ), in f32: D's type.
  Tensor dgrad_w = zeros({static_cast<std::int64_t>(out * in)}).to(kGpu),
         dgrad_b = zeros({static_cast<std::int64_t>(out)}).to(kGpu);
  EpilogueGemm weight{GemmEpilogue::bgrad_a,
                      Transpose::yes,
                      Transpose::no,
                      out,
                      in,
                      rows,
                      dg.raw<T>(),
                      out,
                      da.raw<T>(),
                      in,
                      dgrad_w.raw<float>(),
                      in,
                      dgrad_b.raw<float>(),
                      nullptr,
                      dtype,
                      DType::f32};
  REQUIRE(kcuda::gemm_epilogue_supported(weight));
  kcuda::gemm_epilogue(weight, gpu_stream());
  std::vector<float> want_w(out * in), want_w_magnitude(out * in);
  kcpu::gemm(Transpose::yes, Transpose::no, out, in, rows, 1.0f, g32.data(), out, a32.data(), in, 0.0f, want_w.data(),
             in);
  kcpu::gemm(Transpose::yes, Transpose::no, out, in, rows, 1.0f, abs_g.data(), out, abs_a.data(), in, 0.0f,
             want_w_magnitude.data(), in);
  const std::vector<float> got_w = dgrad_w.to_vector<float>(), got_b = dgrad_b.to_vector<float>();
  outside = 0;
  for (std::size_t i = 0; i < out * in; ++i)
    if (std::fabs(got_w[i] - want_w[i]) > want_w_magnitude[i] * 0x1p-16f) ++outside;  // f32: no 16-bit rounding
  CHECK(outside == 0);
  for (std::size_t j = 0; j < out; ++j) {
    float want = 0.0f, terms = 0.0f;
    for (std::size_t r = 0; r < rows; ++r) {
      want += g32[r * out + j];
      terms += std::fabs(g32[r * out + j]);
    }
    CHECK(std::fabs(got_b[j] - want) <= terms * 0x1p-16f);
  }
}
