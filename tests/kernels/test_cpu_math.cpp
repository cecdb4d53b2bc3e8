// The CPU's vectorized transcendentals (exp_avx512.h's two, erf_avx512.h) against libm, and the
// elementwise ops that run on them (Note [formulas on lanes]) against their f64 formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/erf_avx512.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu_features.h"
#include "kernels/elementwise.h"
#include "support/helpers.h"

using namespace ember::kernels;
using ember::testing::random_floats;

namespace {

// The distance in ulps between two floats of one sign: their bit patterns order as their values.
long long ulps(float a, float b) {
  std::int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<long long>(ia) - ib);
}

// Whether the AVX-512 function `name` runs here; a warning where it does not.
bool has_avx512(const char* name) {
  if (ember::kernels::cpu::cpu_has_avx512f()) return true;
  WARN("this CPU (or EMBER_NO_AVX512) has no AVX-512: " << name << " is not used here");
  return false;
}

}  // namespace

// exp_avx512 on 16 floats, from memory to memory (the intrinsics need a function compiled for AVX-512).
__attribute__((target("avx512f"))) void exp16(const float* in, float* out) {
  _mm512_storeu_ps(out, ember::kernels::cpu::exp_avx512(_mm512_loadu_ps(in)));
}

TEST_CASE("exp_avx512: within 2 ulp of std::exp over f32's range; 0 at −∞, +∞ above, NaN kept") {
  if (!has_avx512("exp_avx512")) return;
  long long worst = 0;
  float in[16], out[16];
  // Every 97th float from −110 to 89, through the denormal results and up to overflow.
  for (float x = -110.0f; x < 89.0f;) {
    for (float& v : in) {
      v = x;
      x = std::nextafter(x, 100.0f);
      for (int skip = 0; skip < 96 && x < 89.0f; ++skip) x = std::nextafter(x, 100.0f);
    }
    exp16(in, out);
    for (int i = 0; i < 16; ++i) {
      const float want = std::exp(in[i]);
      if (std::isinf(want)) {
        CHECK(std::isinf(out[i]));
        continue;
      }
      worst = std::max(worst, ulps(out[i], want));
    }
  }
  INFO("worst " << worst << " ulp");
  CHECK(worst <= 2);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float edges[16] = {-inf,  -1000.0f, -120.0f, -104.0f, 0.0f,   -0.0f,  1.0f,  88.0f,
                           89.0f, inf,      nan,     -1e-30f, 1e-30f, -87.0f, 10.0f, -10.0f};
  exp16(edges, out);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 0.0f);
  CHECK(out[2] == 0.0f);
  CHECK(out[3] == 0.0f);  // below the smallest denormal, as std::exp
  CHECK(out[4] == 1.0f);
  CHECK(out[5] == 1.0f);
  CHECK(std::isinf(out[8]));
  CHECK(std::isinf(out[9]));
  CHECK(std::isnan(out[10]));
  CHECK(out[11] == 1.0f);
  CHECK(out[12] == 1.0f);
}

// exp2_avx512 likewise.
__attribute__((target("avx512f"))) void exp2_16(const float* in, float* out) {
  _mm512_storeu_ps(out, ember::kernels::cpu::exp2_avx512(_mm512_loadu_ps(in)));
}

TEST_CASE("exp2_avx512: within 2 ulp of std::exp2 over f32's range; 0 at −∞, +∞ above, NaN kept") {
  if (!has_avx512("exp2_avx512")) return;
  long long worst = 0;
  float worst_at = 0, in[16], out[16];
  // Every 89th float from −160 to 129: the denormal results (below −126), both sides of every
  // integer (|f| = 1/2, where n rounds), and overflow.
  for (float x = -160.0f; x < 129.0f;) {
    for (float& v : in) {
      v = x;
      for (int skip = 0; skip < 89 && x < 129.0f; ++skip) x = std::nextafter(x, 200.0f);
    }
    exp2_16(in, out);
    for (int i = 0; i < 16; ++i) {
      const float want = static_cast<float>(std::exp2(static_cast<double>(in[i])));
      if (std::isinf(want)) {
        CHECK(std::isinf(out[i]));
        continue;
      }
      if (ulps(out[i], want) > worst) worst = ulps(out[i], want), worst_at = in[i];
    }
  }
  INFO("worst " << worst << " ulp, at " << worst_at);
  CHECK(worst <= 2);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float edges[16] = {-inf,   -1000.0f, -200.0f, -150.0f, 0.0f, -0.0f, 1.0f,  -1.0f,
                           128.0f, inf,      nan,     -1e-30f, 0.5f, -0.5f, 10.0f, -149.0f};
  exp2_16(edges, out);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 0.0f);
  CHECK(out[2] == 0.0f);
  CHECK(out[3] == 0.0f);  // half the smallest denormal rounds to even: 0, as std::exp2
  CHECK(out[4] == 1.0f);
  CHECK(out[5] == 1.0f);
  CHECK(out[6] == 2.0f);
  CHECK(out[7] == 0.5f);
  CHECK(std::isinf(out[8]));
  CHECK(std::isinf(out[9]));
  CHECK(std::isnan(out[10]));
  CHECK(out[11] == 1.0f);
  CHECK(out[14] == 1024.0f);
  CHECK(out[15] == std::exp2(-149.0f));  // the smallest denormal
}

// erf_avx512 on 16 floats, from memory to memory.
__attribute__((target("avx512f"))) void erf16(const float* in, float* out) {
  _mm512_storeu_ps(out, ember::kernels::cpu::erf_avx512(_mm512_loadu_ps(in)));
}

TEST_CASE("erf_avx512: within 1 ulp of the correctly rounded erf, odd, ±1 at ±∞, NaN kept") {
  if (!has_avx512("erf_avx512")) return;
  long long worst = 0;
  float worst_at = 0, in[16], out[16], negated[16], out_negated[16];
  // Every 61st float from 0 to 4.5 (erf rounds to 1 from 3.92 on): denormals, both pieces and
  // their boundary 0.921875; erf(−x) = −erf(x) bit for bit.
  std::uint32_t bits = 0;
  const float last = 4.5f;
  std::uint32_t last_bits;
  std::memcpy(&last_bits, &last, 4);
  while (bits < last_bits) {
    for (int i = 0; i < 16; ++i, bits += 61) {
      std::memcpy(&in[i], &bits, 4);
      negated[i] = -in[i];
    }
    erf16(in, out);
    erf16(negated, out_negated);
    for (int i = 0; i < 16; ++i) {
      // std::erf in f64, rounded once: the correctly rounded f32 but for a double rounding.
      const float want = static_cast<float>(std::erf(static_cast<double>(in[i])));
      if (ulps(out[i], want) > worst) worst = ulps(out[i], want), worst_at = in[i];
      REQUIRE(out_negated[i] == -out[i]);
    }
  }
  INFO("worst " << worst << " ulp, at " << worst_at);
  CHECK(worst <= 1);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float edges[16] = {0.0f,  -0.0f,  inf,    -inf,    nan,  0.921875f, 3.9f,  4.0f,
                           1e30f, -1e30f, 1e-40f, -1e-45f, 0.5f, -2.0f,     10.0f, -0.921875f};
  erf16(edges, out);
  CHECK((out[0] == 0.0f && !std::signbit(out[0])));
  CHECK((out[1] == 0.0f && std::signbit(out[1])));
  CHECK(out[2] == 1.0f);
  CHECK(out[3] == -1.0f);
  CHECK(std::isnan(out[4]));
  CHECK(out[7] == 1.0f);
  CHECK(out[8] == 1.0f);
  CHECK(out[9] == -1.0f);
  CHECK(out[14] == 1.0f);
  CHECK(out[15] == -out[5]);
}

TEST_CASE("erf and gelu on the CPU: their f64 values within f32's rounding, at every length") {
  // Where the CPU has AVX-512 these run on 16 lanes (Note [formulas on lanes]) with a masked last
  // group: lengths around 16 and its multiples, and one long enough for several threads' pieces.
  for (const std::size_t n : {1u, 15u, 16u, 17u, 33u, 1000u, 70001u}) {
    INFO("n = " << n);
    const auto x = random_floats(n, n, -6.0f, 6.0f), dy = random_floats(n, n + 1);
    std::vector<double> x64(x.begin(), x.end()), dy64(dy.begin(), dy.end());
    for (const UnaryOp op : {UnaryOp::erf, UnaryOp::gelu}) {
      INFO(op_name(op));
      std::vector<float> y(n);
      std::vector<double> want(n);
      cpu::unary<float>(op, x.data(), y.data(), n, {});
      cpu::unary<double>(op, x64.data(), want.data(), n, {});
      for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == Approx(want[i]).margin(2e-7).epsilon(1e-6));
    }
    for (const ActivationGrad op : {ActivationGrad::erf, ActivationGrad::gelu})
      for (const WriteMode mode : {WriteMode::overwrite, WriteMode::accumulate}) {
        INFO(op_name(op) << (mode == WriteMode::accumulate ? ", accumulating" : ""));
        std::vector<float> dx(n, 0.5f);
        std::vector<double> want(n, 0.5);
        cpu::activation_grad<float>(op, dy.data(), x.data(), dx.data(), n, mode, {});
        cpu::activation_grad<double>(op, dy64.data(), x64.data(), want.data(), n, mode, {});
        for (std::size_t i = 0; i < n; ++i) REQUIRE(dx[i] == Approx(want[i]).margin(2e-7).epsilon(1e-6));
      }
  }
}
