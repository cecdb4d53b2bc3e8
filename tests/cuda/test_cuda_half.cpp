// The GPU's libraries in bf16 and f16: cuDNN's 16-bit convolutions against the CPU's f32
// convolution of the same values; cuBLASLt's epilogue GEMMs with 16-bit operands; and the TF32
// switch reaching cuBLAS, cuBLASLt and cuDNN (ember's own 16-bit kernels: test_cuda_half_kernels.cpp).
//
// Tolerances. A 16-bit convolution output is an f32 sum of K exact products, in cuDNN's order and
// the CPU's: they differ by at most K·2⁻²⁴·Σ|x·w| ≤ 2⁻¹⁶·Σ|x·w| for K ≤ 256, before each rounds
// once. How wide tensor cores accumulate is NVIDIA's to choose (the software GPU sums in f32); a
// GPU that sums narrower than f32 would exceed this bound, and the test says so.
//
// cuBLASLt's 16-bit epilogues run on tensor cores whose f32 accumulator may truncate rather than
// round: up to one f32 ulp of the running sum per addition, K·2⁻²³·Σ|a·b| in all. An H200
// (cuBLAS 13.0) left 9 of 65,536 bf16 masked input gradients (K = 512) outside 2⁻¹⁶·Σ|a·b| in two
// runs and none in three earlier ones (docs/results/gpu-check-2026-12-04-69069d2.md): which
// algorithm the heuristic picks decides it. Those checks allow max(2⁻¹⁶, K·2⁻²³)·Σ|a·b| and print
// how many elements needed more than 2⁻¹⁶.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/ops/fused.h"
#include "core/ops/ops.h"
#include "cuda/cuda_helpers.h"
#include "cuda/half_helpers.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/gemm_epilogue.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::testing;
namespace kcuda = ember::kernels::cuda;
namespace kcpu = ember::kernels::cpu;

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
    // The reference goes through the device's own ReLU mask: an output within rounding of 0 may be
    // positive on one device and not on the other, which moves whole terms of the gradients (an
    // H200 showed gradients 0.3 apart for that reason alone).
    Tensor rx = xf.detach().set_requires_grad(), rw = wf.detach().set_requires_grad(),
           rb = bf.detach().set_requires_grad();
    const Tensor device_mask = gt(got.to(DType::f32).cpu(), 0.0).to(DType::f32);
    sum(conv2d(rx, rw, rb, stride, pad) * device_mask * upstream.to(DType::f32)).backward();
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
  // One 16-bit ulp plus the accumulation bound of the file comment for a sum of `k` products;
  // `beyond_nearest` counts the elements that needed more than round-to-nearest's 2⁻¹⁶.
  std::size_t beyond_nearest = 0;
  const auto within_sum_of = [&](std::size_t k) {
    const float accumulation = std::max(0x1p-16f, static_cast<float>(k) * 0x1p-23f);
    return [&beyond_nearest, accumulation](float got, float want, float terms, float ulp) {
      const float error = std::fabs(got - want);
      if (error > ulp + terms * 0x1p-16f) ++beyond_nearest;
      return error <= ulp + terms * accumulation;
    };
  };
  const auto within = [&, forward_sum = within_sum_of(in)](float got, float want, float terms) {
    return forward_sum(got, want, terms, ulp_at<T>(want));
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
  const auto within_dz = within_sum_of(out);
  for (std::size_t i = 0; i < rows * out; ++i) {
    const bool active = static_cast<float>(h[i]) > 0.0f;
    const float want = active ? dz[i] : 0.0f;
    if (!within_dz(static_cast<float>(got_dz[i]), want, dz_magnitude[i], ulp_at<T>(want))) ++outside;
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
  const auto within_w = within_sum_of(rows);
  for (std::size_t i = 0; i < out * in; ++i)
    if (!within_w(got_w[i], want_w[i], want_w_magnitude[i], 0.0f)) ++outside;  // f32: no 16-bit rounding
  CHECK(outside == 0);
  std::printf("cuBLASLt epilogues in %s: %zu elements beyond round-to-nearest accumulation's 2^-16 bound\n",
              std::string(dtype_name(dtype)).c_str(), beyond_nearest);
  for (std::size_t j = 0; j < out; ++j) {
    float want = 0.0f, terms = 0.0f;
    for (std::size_t r = 0; r < rows; ++r) {
      want += g32[r * out + j];
      terms += std::fabs(g32[r * out + j]);
    }
    CHECK(std::fabs(got_b[j] - want) <= terms * 0x1p-16f);
  }
}
