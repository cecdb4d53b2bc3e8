// ember's f32 GEMM on AVX-512 (Note [f32 GEMM on AVX-512] in kernels/gemm.h): bit for bit against
// the note's loop written in plain C++, in all four transposes, on shapes around the register
// blocks (8 rows, 16 and 32 columns), the packing of B (transposed: 16×16 transposes from k = 16;
// as stored: from 4 blocks of rows where a chunk of B passes 16 KiB), the packing of A transposed, the column chunks (n
// past 224 at k = 784) and the blocks of k (3 at k = 784: sums kept in C at β = 0, else in scratch), with padded
// strides, α and β, and NaN in a C that β = 0 must not read; and the same bits from gemm() at 1,
// 2 and 3 threads. gemm_small's kernel (one thread, no dispatch) on the same cases.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "support/helpers.h"

using namespace ember;
using namespace ember::kernels::cpu;
using ember::kernels::Transpose;
using ember::testing::random_floats;

namespace {

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

struct Case {
  Transpose ta, tb;
  std::size_t m, n, k;
  float alpha, beta;
};

// The note's sums, one element at a time.
void documented_gemm(const Case& g, const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c,
                     std::size_t ldc) {
  for (std::size_t i = 0; i < g.m; ++i)
    for (std::size_t j = 0; j < g.n; ++j) {
      float s = 0.0f;
      for (std::size_t p = 0; p < g.k; ++p) {
        const float x = g.ta == Transpose::no ? a[i * lda + p] : a[p * lda + i];
        const float y = g.tb == Transpose::no ? b[p * ldb + j] : b[j * ldb + p];
        s = std::fma(x, y, s);
      }
      const float scaled = g.alpha * s;
      float& out = c[i * ldc + j];
      out = g.beta == 0.0f ? scaled : std::fma(g.beta, out, scaled);
    }
}

// Runs one case both ways from the same C (NaN where β = 0: never read) and compares every bit,
// the padding between rows included.
void check_case(const Case& g, std::uint64_t& seed) {
  const bool ta = g.ta == Transpose::yes, tb = g.tb == Transpose::yes;
  const std::size_t lda = (ta ? g.m : g.k) + 3, ldb = (tb ? g.k : g.n) + 5, ldc = g.n + 2;
  const auto a = random_floats((ta ? g.k : g.m) * lda, ++seed), b = random_floats((tb ? g.n : g.k) * ldb, ++seed);
  std::vector<float> start = random_floats(g.m * ldc, ++seed);
  if (g.beta == 0.0f)
    for (std::size_t i = 0; i < start.size(); i += 3) start[i] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> want = start, got = start;
  documented_gemm(g, a.data(), lda, b.data(), ldb, want.data(), ldc);
  gemm_f32_avx512(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta, got.data(), ldc);
  CHECK(bits_of(got) == bits_of(want));
  std::vector<float> small = start;  // gemm_small's kernel: the same tiles, one thread, A never packed
  gemm_f32_avx512_small(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta, small.data(), ldc);
  CHECK(bits_of(small) == bits_of(want));
}

}  // namespace

TEST_CASE("f32 GEMM on AVX-512: the note's sums bit for bit, every transpose, around every block edge") {
  if (!cpu_has_avx512f()) EMBER_SKIP_CASE("this CPU has no AVX512F: gemm() runs OpenBLAS, tested elsewhere");
  std::uint64_t seed = 21;
  for (Transpose ta : {Transpose::no, Transpose::yes})
    for (Transpose tb : {Transpose::no, Transpose::yes})
      for (std::size_t m : {1, 7, 8, 9, 17, 40})  // 40: 5 blocks of rows (B small: read in place)
        for (std::size_t n : {1, 15, 16, 17, 32, 33, 70})
          for (std::size_t k : {1, 15, 16, 33}) {
            const Case g{ta, tb, m, n, k, 1.0f, 0.0f};
            INFO("m=" << m << " n=" << n << " k=" << k << " A transposed: " << (ta == Transpose::yes)
                      << " B transposed: " << (tb == Transpose::yes));
            check_case(g, seed);
          }
  // α and β as the fused SGD step uses them (W ← W − lr·dzᵀ·a), and β alone.
  for (Transpose ta : {Transpose::no, Transpose::yes})
    for (Transpose tb : {Transpose::no, Transpose::yes})
      for (const auto& [alpha, beta] : {std::pair{-0.05f, 1.0f}, std::pair{1.5f, 0.5f}, std::pair{0.25f, 0.0f}}) {
        INFO("alpha=" << alpha << " beta=" << beta);
        check_case({ta, tb, 19, 45, 40, alpha, beta}, seed);
      }
  // Two column chunks (224 columns each at k = 784), whole 16×16 packing blocks, 3 blocks of k.
  check_case({Transpose::no, Transpose::yes, 20, 300, 784, 1.0f, 0.0f}, seed);
  check_case({Transpose::yes, Transpose::no, 20, 300, 784, 1.0f, 1.0f}, seed);
  check_case({Transpose::yes, Transpose::yes, 13, 70, 800, 1.5f, 0.5f}, seed);
  check_case({Transpose::no, Transpose::no, 13, 70, 800, -0.5f, 0.0f}, seed);
  // B as stored, packed (5 blocks of rows, 100 × 70 floats of B) and read in place (40 × 70).
  check_case({Transpose::no, Transpose::no, 40, 70, 100, 1.0f, 0.0f}, seed);
  check_case({Transpose::yes, Transpose::no, 40, 70, 40, 1.0f, 0.5f}, seed);
}

TEST_CASE("f32 GEMM on AVX-512: gemm() gives the same bits at 1, 2 and 3 threads, and the note's") {
  if (!cpu_has_avx512f()) EMBER_SKIP_CASE("this CPU has no AVX512F: gemm() runs OpenBLAS, tested elsewhere");
  // The wide MLP's forward: many tiles, cut into parts. A weight gradient (A transposed, packed by
  // each thread for the blocks of rows of its own tiles, which may start and end inside a chunk),
  // in blocks of k, with β = 1.
  for (const Case& g : {Case{Transpose::no, Transpose::yes, 128, 512, 784, 1.0f, 0.0f},
                        Case{Transpose::yes, Transpose::no, 200, 300, 1000, 1.0f, 1.0f}}) {
    const std::size_t lda = g.ta == Transpose::yes ? g.m : g.k, ldb = g.tb == Transpose::yes ? g.k : g.n;
    const auto a = random_floats(g.m * g.k, 31), b = random_floats(g.n * g.k, 32), c = random_floats(g.m * g.n, 33);
    std::vector<float> want = c;
    documented_gemm(g, a.data(), lda, b.data(), ldb, want.data(), g.n);
    for (int threads : {1, 2, 3}) {
      INFO("m=" << g.m << " threads=" << threads);
      set_compute_threads(threads);
      std::vector<float> got = c;
      gemm<float>(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta, got.data(), g.n);
      CHECK(bits_of(got) == bits_of(want));
    }
  }
  set_compute_threads(1);
}

TEST_CASE("gemm_bias: the bits of gemm() with β = 1 over the bias's rows, in f32 and f64") {
  // On AVX512F the f32 bias is added as the sums are stored; f64 (and f32 elsewhere) fill C first.
  const auto check = [](auto zero) {
    using T = decltype(zero);
    for (const Case& g : {Case{Transpose::no, Transpose::yes, 37, 70, 40, 1.0f, 1.0f},
                          Case{Transpose::no, Transpose::yes, 9, 33, 800, 1.0f, 1.0f},
                          Case{Transpose::yes, Transpose::no, 20, 300, 784, 1.0f, 1.0f}}) {
      INFO("m=" << g.m << " n=" << g.n << " k=" << g.k << " bytes " << sizeof(T));
      const std::size_t lda = g.ta == Transpose::yes ? g.m : g.k, ldb = g.tb == Transpose::yes ? g.k : g.n;
      const auto widen = [](const std::vector<float>& v) { return std::vector<T>(v.begin(), v.end()); };
      const auto a = widen(random_floats(g.m * g.k, 41)), b = widen(random_floats(g.n * g.k, 42));
      const auto bias = widen(random_floats(g.n, 43));
      std::vector<T> want(g.m * g.n), got(g.m * g.n, std::numeric_limits<T>::quiet_NaN());
      for (std::size_t i = 0; i < g.m; ++i) std::copy(bias.begin(), bias.end(), want.begin() + i * g.n);
      gemm<T>(g.ta, g.tb, g.m, g.n, g.k, T(1), a.data(), lda, b.data(), ldb, T(1), want.data(), g.n);
      gemm_bias<T>(g.ta, g.tb, g.m, g.n, g.k, a.data(), lda, b.data(), ldb, bias.data(), got.data(), g.n);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0);
    }
  };
  check(0.0f);
  check(0.0);
}
