// The CPU's bf16 GEMM (kernels/gemm_bf16.h, Note [bf16 GEMM paths]): the scalar path against an
// f64 reference, the AVX512-BF16 path against the scalar one bit for bit where the CPU has it, on
// shapes around the register blocks (8 rows, 16 and 32 columns, odd k) and the packing's 16×16 word
// transposes (k from 32), with padded strides (odd ones too); the product rounded to bf16 inside the
// GEMM against the f32 product's cast; and where the two differ: subnormals, which VDPBF16PS
// flushes and the scalar path keeps.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "kernels/gemm_bf16.h"
#include "support/helpers.h"

using namespace ember;
using namespace ember::kernels::cpu;
using ember::kernels::Transpose;

namespace {

std::vector<bfloat16> random_bf16(std::size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bfloat16> out(count);
  for (auto& v : out) v = bfloat16(normal(rng));
  return out;
}

bool has_avx512_bf16() {
  const auto paths = bf16_gemm_paths();
  return std::find(paths.begin(), paths.end(), Bf16GemmPath::avx512_bf16) != paths.end();
}

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

}  // namespace

TEST_CASE("bf16 GEMM: the scalar path against f64, the AVX512-BF16 path bit for bit against the scalar one") {
  std::mt19937 rng(11);
  const std::size_t sizes[] = {1, 2, 5, 6, 7, 13, 16, 17, 31, 32, 33, 70};
  for (Transpose tb : {Transpose::no, Transpose::yes})
    for (std::size_t m : {1, 5, 7, 8, 9, 17, 70})
      for (std::size_t n : sizes)
        for (std::size_t k : {1, 2, 3, 16, 33, 64, 100}) {
          INFO("m=" << m << " n=" << n << " k=" << k << " B transposed: " << (tb == Transpose::yes));
          const bool t = tb == Transpose::yes;
          const std::size_t lda = k + 3, ldb = (t ? k : n) + 5, ldc = n + 2;
          const auto a = random_bf16(m * lda, rng), b = random_bf16((t ? n : k) * ldb, rng);
          auto b_at = [&](std::size_t p, std::size_t j) { return t ? b[j * ldb + p] : b[p * ldb + j]; };
          for (bool accumulate : {false, true}) {
            std::vector<float> start(m * ldc);
            for (std::size_t i = 0; i < start.size(); ++i) start[i] = static_cast<float>(i % 7) - 3.0f;
            std::vector<float> scalar = start;
            gemm_bf16(tb, m, n, k, a.data(), lda, b.data(), ldb, scalar.data(), ldc, accumulate, Bf16GemmPath::scalar);
            for (std::size_t i = 0; i < m; ++i)
              for (std::size_t j = 0; j < n; ++j) {
                double exact = accumulate ? start[i * ldc + j] : 0.0, magnitude = std::fabs(exact);
                for (std::size_t p = 0; p < k; ++p) {
                  const double product = static_cast<double>(static_cast<float>(a[i * lda + p])) *
                                         static_cast<double>(static_cast<float>(b_at(p, j)));
                  exact += product;
                  magnitude += std::fabs(product);
                }
                // k + 1 roundings of at most half an f32 ulp of the running sum, bounded by Σ|terms|.
                REQUIRE(std::fabs(scalar[i * ldc + j] - exact) <= (k + 1) * std::ldexp(magnitude, -24));
              }
            // The padding between rows is left alone.
            for (std::size_t i = 0; i < m; ++i)
              for (std::size_t j = n; j < ldc; ++j) REQUIRE(scalar[i * ldc + j] == start[i * ldc + j]);
            // The product rounded to bf16 in the GEMM: the f32 product's cast, bit for bit, the
            // padding left alone.
            auto check_rounded = [&](Bf16GemmPath path) {
              if (accumulate) return;
              std::vector<bfloat16> rounded(m * ldc, bfloat16::from_bits(0x7777));
              gemm_bf16_rounded(tb, m, n, k, a.data(), lda, b.data(), ldb, rounded.data(), ldc, path);
              for (std::size_t i = 0; i < m; ++i)
                for (std::size_t j = 0; j < ldc; ++j)
                  REQUIRE(rounded[i * ldc + j].bits == (j < n ? bfloat16(scalar[i * ldc + j]).bits : 0x7777));
            };
            check_rounded(Bf16GemmPath::scalar);
            if (!has_avx512_bf16()) continue;
            std::vector<float> vector = start;
            gemm_bf16(tb, m, n, k, a.data(), lda, b.data(), ldb, vector.data(), ldc, accumulate,
                      Bf16GemmPath::avx512_bf16);
            REQUIRE(bits_of(vector) == bits_of(scalar));
            check_rounded(Bf16GemmPath::avx512_bf16);
          }
        }
  if (!has_avx512_bf16()) EMBER_SKIP_CASE("this CPU has no AVX512-BF16: the scalar path alone was checked");
}

TEST_CASE("small bf16 GEMM: op(A) and op(B) either way, the bits of gemm_bf16 on A as stored, on every path") {
  std::mt19937 rng(12);
  for (Transpose ta : {Transpose::no, Transpose::yes})
    for (Transpose tb : {Transpose::no, Transpose::yes})
      for (std::size_t m : {1, 7, 9, 50, 70})
        for (std::size_t n : {1, 16, 17, 32, 50, 64})
          for (std::size_t k : {1, 3, 16, 50, 64}) {
            INFO("m=" << m << " n=" << n << " k=" << k << " A transposed: " << (ta == Transpose::yes)
                      << " B transposed: " << (tb == Transpose::yes));
            const bool t = ta == Transpose::yes;
            const std::size_t lda = (t ? m : k) + 3, ldb = (tb == Transpose::yes ? k : n) + 5, ldc = n + 2;
            const auto a = random_bf16((t ? k : m) * lda, rng),
                       b = random_bf16((tb == Transpose::yes ? n : k) * ldb, rng);
            // op(A) written out as stored [m, k], for gemm_bf16.
            std::vector<bfloat16> a_rows(m * k);
            for (std::size_t i = 0; i < m; ++i)
              for (std::size_t p = 0; p < k; ++p) a_rows[i * k + p] = t ? a[p * lda + i] : a[i * lda + p];
            for (bool accumulate : {false, true}) {
              std::vector<float> start(m * ldc);
              for (std::size_t i = 0; i < start.size(); ++i) start[i] = static_cast<float>(i % 5) - 2.0f;
              std::vector<float> want = start;
              gemm_bf16(tb, m, n, k, a_rows.data(), k, b.data(), ldb, want.data(), ldc, accumulate,
                        Bf16GemmPath::scalar);
              for (const Bf16GemmPath path : bf16_gemm_paths()) {
                INFO("path " << bf16_gemm_path_name(path) << (accumulate ? ", accumulating" : ""));
                std::vector<float> got = start;
                gemm_bf16_small(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, got.data(), ldc, accumulate, path);
                REQUIRE(bits_of(got) == bits_of(want));  // the padding between rows too
              }
            }
          }
  if (!has_avx512_bf16()) EMBER_SKIP_CASE("this CPU has no AVX512-BF16: the scalar path alone was checked");
}

TEST_CASE(
    "bf16 GEMM: VDPBF16PS treats subnormal inputs as zero and flushes subnormal results; the scalar path keeps them") {
  if (!has_avx512_bf16()) EMBER_SKIP_CASE("this CPU has no AVX512-BF16");
  auto run = [](bfloat16 a, bfloat16 b, Bf16GemmPath path) {
    float c = 0;
    gemm_bf16(Transpose::no, 1, 1, 1, &a, 1, &b, 1, &c, 1, false, path);
    return c;
  };
  // A subnormal input (2^-133) times 2^100: a normal product, 2^-33.
  const bfloat16 tiny = bfloat16::from_bits(0x0001), big(std::ldexp(1.0f, 100));
  CHECK(run(tiny, big, Bf16GemmPath::scalar) == std::ldexp(1.0f, -33));
  CHECK(run(tiny, big, Bf16GemmPath::avx512_bf16) == 0.0f);
  // Normal inputs whose product is subnormal in f32: 2^-70 · 2^-70 = 2^-140.
  const bfloat16 small(std::ldexp(1.0f, -70));
  CHECK(run(small, small, Bf16GemmPath::scalar) == std::ldexp(1.0f, -140));
  CHECK(run(small, small, Bf16GemmPath::avx512_bf16) == 0.0f);
}

TEST_CASE("bf16 GEMM rounded to bf16: NaN, infinities and ties as the cast rounds them, on every path") {
  // Row 0 of A (ones) against B's columns: a NaN input, ∞ − ∞ (NaN), ∞, −∞, a
  // tie below and above an even upper half, and a sum that overflows bf16 to ∞.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> a_values{1.0f, 1.0f};
  const std::vector<std::pair<float, float>> columns{
      {std::nanf(""), 0.0f},     {inf, -inf}, {inf, 1.0f}, {-inf, 1.0f}, {1.0f, 0x1p-8f}, {1.0f, 0x1.8p-7f},
      {0x1.fep127f, 0x1.fep127f}};
  const std::size_t n = columns.size(), k = 2;
  std::vector<bfloat16> a{bfloat16(a_values[0]), bfloat16(a_values[1])}, b(k * n);
  for (std::size_t j = 0; j < n; ++j) {
    b[j] = bfloat16(columns[j].first);
    b[n + j] = bfloat16(columns[j].second);
  }
  for (Bf16GemmPath path : bf16_gemm_paths()) {
    INFO("path " << bf16_gemm_path_name(path));
    std::vector<float> sums(n);
    gemm_bf16(Transpose::no, 1, n, k, a.data(), k, b.data(), n, sums.data(), n, false, path);
    std::vector<bfloat16> rounded(n);
    gemm_bf16_rounded(Transpose::no, 1, n, k, a.data(), k, b.data(), n, rounded.data(), n, path);
    for (std::size_t j = 0; j < n; ++j) {
      INFO("column " << j << ": f32 sum " << sums[j]);
      CHECK(rounded[j].bits == bfloat16(sums[j]).bits);
    }
    CHECK(rounded[0].bits == 0x7fc0);  // NaN, quiet and positive, as the cast writes it
    CHECK(rounded[1].bits == 0x7fc0);
    CHECK(rounded[2].bits == 0x7f80);
    CHECK(rounded[3].bits == 0xff80);
    CHECK(rounded[6].bits == 0x7f80);
  }
}

TEST_CASE("bf16 GEMM: empty shapes, and a path this CPU lacks is refused") {
  std::vector<float> c{5.0f, 5.0f};
  const bfloat16 one(1.0f);
  gemm_bf16(Transpose::no, 1, 2, 0, &one, 1, &one, 2, c.data(), 2, false);
  CHECK(c == std::vector<float>{0.0f, 0.0f});
  c = {5.0f, 5.0f};
  gemm_bf16(Transpose::no, 1, 2, 0, &one, 1, &one, 2, c.data(), 2, true);
  CHECK(c == std::vector<float>{5.0f, 5.0f});
  CHECK(bf16_gemm_paths().front() == Bf16GemmPath::scalar);
  if (!has_avx512_bf16())
    CHECK_THROWS_AS(gemm_bf16(Transpose::no, 1, 1, 1, &one, 1, &one, 1, c.data(), 1, false, Bf16GemmPath::avx512_bf16),
                    DeviceError);
}
