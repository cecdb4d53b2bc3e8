// bfloat16 and float16 (base/half.h): the conversions from f32 against a reference built
// another way — every finite value of the 16-bit format as a double, the nearest one found by
// search, ties to the even significand — on every 16-bit pattern, on f32 patterns around every
// rounding boundary and on random ones; then tensors of them: casts, printing, safetensors, the
// refusal of ops, and a differentiable cast.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include "core/io/serialize.h"
#include "core/ops/ops.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

namespace {

float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A 16-bit format described by its field widths: every finite non-negative value with its bits,
// in increasing order, computed from the definition (sign, biased exponent, significand).
struct Format {
  int exponent_bits, mantissa_bits;
  std::vector<std::pair<double, std::uint16_t>> values;

  Format(int e, int m) : exponent_bits(e), mantissa_bits(m) {
    const int bias = (1 << (e - 1)) - 1;
    for (std::uint32_t exponent = 0; exponent < (1u << e) - 1; ++exponent)
      for (std::uint32_t mantissa = 0; mantissa < (1u << m); ++mantissa) {
        const double significand = (exponent == 0 ? 0.0 : 1.0) + std::ldexp(mantissa, -m);
        const double value = std::ldexp(significand, (exponent == 0 ? 1 : static_cast<int>(exponent)) - bias);
        values.emplace_back(value, static_cast<std::uint16_t>((exponent << m) | mantissa));
      }
  }
  std::uint16_t infinity() const { return static_cast<std::uint16_t>(((1u << exponent_bits) - 1) << mantissa_bits); }

  // Round to nearest, ties to even; past the largest finite value by half an ulp or more: ∞.
  std::uint16_t round(float f) const {
    const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double x = std::fabs(static_cast<double>(f));
    const auto& [largest, largest_bits] = values.back();
    const double ulp = largest - values[values.size() - 2].first;
    if (x >= largest + ulp / 2) return sign | infinity();  // largest's significand is odd: the tie goes up
    if (x > largest) return sign | largest_bits;           // less than half an ulp past it
    const auto above = std::lower_bound(values.begin(), values.end(), std::make_pair(x, std::uint16_t{0}));
    if (above->first == x) return sign | above->second;
    const auto below = above - 1;
    const double up = above->first - x, down = x - below->first;
    if (up < down) return sign | above->second;
    if (down < up) return sign | below->second;
    return sign | ((above->second & 1) ? below->second : above->second);
  }
};

const Format& bf16_format() {
  static const Format f(8, 7);
  return f;
}
const Format& f16_format() {
  static const Format f(5, 10);
  return f;
}

// The f32 patterns that test a rounding: each 16-bit value's neighbours and midpoints, in f32.
std::vector<float> boundary_floats(const Format& format) {
  std::vector<float> out;
  for (std::size_t i = 0; i + 1 < format.values.size(); ++i) {
    const double a = format.values[i].first, b = format.values[i + 1].first, mid = (a + b) / 2;
    const float m = static_cast<float>(mid);
    if (static_cast<double>(m) != mid) continue;  // below f32's range
    for (float f : {m, std::nextafter(m, 0.0f), std::nextafter(m, 1e30f), static_cast<float>(a)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("f32 → bfloat16 rounds to nearest even, keeps subnormals, and makes NaN quiet before rounding") {
  const Format& format = bf16_format();
  for (float f : boundary_floats(format)) {
    INFO("f32 bits " << std::hex << bits_of(f));
    REQUIRE(half_bits::bf16_from_f32(f) == format.round(f));
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const float f = float_of(rng());
    if (std::isnan(f)) continue;
    REQUIRE(half_bits::bf16_from_f32(f) == format.round(f));
  }
  // Every bfloat16 is an f32: widening then narrowing gives the bits back (NaNs become the quiet one).
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float wide = half_bits::f32_from_bf16(static_cast<std::uint16_t>(h));
    REQUIRE(bits_of(wide) == h << 16);
    REQUIRE(half_bits::bf16_from_f32(wide) == (std::isnan(wide) ? 0x7fc0 : h));
  }
  // A NaN whose payload sits in the dropped bits would round to ∞ if rounded as a number.
  CHECK(half_bits::bf16_from_f32(float_of(0x7f800001)) == 0x7fc0);
  CHECK(half_bits::bf16_from_f32(float_of(0xffffffff)) == 0x7fc0);
  // f32's subnormals are bfloat16's, rounded: the smallest bfloat16 subnormal, and below it.
  CHECK(half_bits::bf16_from_f32(float_of(0x00010000)) == 0x0001);
  CHECK(half_bits::bf16_from_f32(float_of(0x00008001)) == 0x0001);
  CHECK(half_bits::bf16_from_f32(float_of(0x00008000)) == 0x0000);  // the tie, to even
}

TEST_CASE("f32 → float16 rounds to nearest even, down to its subnormals, and overflows to infinity at 65520") {
  const Format& format = f16_format();
  for (float f : boundary_floats(format)) {
    INFO("f32 bits " << std::hex << bits_of(f));
    REQUIRE(half_bits::f16_from_f32(f) == format.round(f));
  }
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> exponent(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    // Random bits cover f16's narrow range poorly: random magnitudes around it, random signs.
    const float f = std::exp2(exponent(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    REQUIRE(half_bits::f16_from_f32(f) == format.round(f));
  }
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float wide = half_bits::f32_from_f16(static_cast<std::uint16_t>(h));
    if (std::isnan(wide)) {
      REQUIRE(half_bits::f16_from_f32(wide) == ((h & 0x8000) | 0x7e00));
      continue;
    }
    REQUIRE(half_bits::f16_from_f32(wide) == h);
    // Widening is exact: the reference's value with the sign.
    const double magnitude = (h & 0x7fff) == 0x7c00 ? INFINITY : format.values[h & 0x7fff].first;
    REQUIRE(static_cast<double>(wide) == ((h & 0x8000) ? -magnitude : magnitude));
  }
  CHECK(half_bits::f16_from_f32(65504.0f) == 0x7bff);
  CHECK(half_bits::f16_from_f32(65519.996f) == 0x7bff);
  CHECK(half_bits::f16_from_f32(65520.0f) == 0x7c00);
  CHECK(half_bits::f16_from_f32(std::ldexp(1.0f, -24)) == 0x0001);  // the smallest subnormal, kept
  CHECK(half_bits::f16_from_f32(std::ldexp(1.0f, -25)) == 0x0000);  // half of it: the tie, to even (0)
  CHECK(half_bits::f16_from_f32(-std::ldexp(1.5f, -25)) == 0x8001);
  CHECK(half_bits::f16_from_f32(float_of(0xff800001)) == 0xfe00);  // a NaN keeps its sign
}

TEST_CASE("bf16 and f16 tensors: casts, printing, safetensors, and ops in them") {
  const Tensor x = from_vector<float>({1.0f, -2.5f, 3.14159f, 1e-3f, 65536.0f, 0.0f}, {2, 3});
  const Tensor b = x.to(DType::bf16), h = x.to(DType::f16);
  CHECK((b.dtype() == DType::bf16 && h.dtype() == DType::f16 && b.shape() == x.shape()));
  CHECK(b.to(DType::f32).to_vector<float>() == std::vector<float>{1.0f, -2.5f, 3.140625f, 0.00099945068f, 65536.0f, 0});
  CHECK(h.to(DType::f32).to_vector<float>() == std::vector<float>{1.0f, -2.5f, 3.140625f, 0.0010004044f, INFINITY, 0});
  // Between the two, through f32; to integers, as from f32 (∞ saturates).
  CHECK(b.to(DType::f16).to(DType::f32).to_vector<float>()[2] == 3.140625f);
  CHECK(h.to(DType::i32).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, -2, 3, 0, INT32_MAX, 0});
  CHECK(from_vector<std::int64_t>({7, -300}, {2}).to(DType::bf16).to_vector<float>() == std::vector<float>{7, -300});
  CHECK(b.reshape({6}).to_vector<float>()[4] == 65536.0f);  // to_vector and item convert as .to does
  CHECK(h.reshape({6}).to_vector<float>()[4] == INFINITY);
  std::ostringstream printed;
  printed << b;
  CHECK_THAT(printed.str(), Contains("3.14062") && Contains("dtype=bf16"));

  // Saved as safetensors' BF16 and F16, read back bit for bit.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ember_half_" + std::to_string(::getpid()) + ".safetensors")).string();
  save_safetensors(path, {{"b", b}, {"h", h}}, {});
  const StateDict back = load_safetensors(path).tensors;
  std::filesystem::remove(path);
  const Tensor* b2 = find_tensor(back, "b");
  const Tensor* h2 = find_tensor(back, "h");
  REQUIRE((b2 && h2));
  CHECK((b2->dtype() == DType::bf16 && h2->dtype() == DType::f16));
  CHECK(b2->to(DType::f32).to_vector<float>() == b.to(DType::f32).to_vector<float>());
  CHECK(h2->to(DType::f32).to_vector<float>() == h.to(DType::f32).to_vector<float>());

  // Ops take them, computing in f32 and rounding once (Note [half precision]); their operands share
  // one dtype: a mix is refused by name, with the fix.
  CHECK(relu(b).dtype() == DType::bf16);
  CHECK(relu(b).to_vector<float>() == relu(x).to(DType::bf16).to_vector<float>());
  CHECK(add(h, h).to_vector<float>() == add(h.to(DType::f32), h.to(DType::f32)).to(DType::f16).to_vector<float>());
  CHECK_THAT(message_of<DTypeError>([&] { add(b, x); }),
             Contains("add") && Contains("bf16") && Contains(".to(DType::"));
}

TEST_CASE("a cast between floating dtypes is differentiable: the gradient comes back in the source's dtype") {
  const Tensor w = from_vector<float>({0.5f, -1.25f, 3.0f}, {3}).set_requires_grad();
  const Tensor as_bf16 = w.to(DType::bf16);
  CHECK(as_bf16.requires_grad());
  const Tensor back = as_bf16.to(DType::f32);
  sum(mul(back, from_vector<float>({2.0f, 3.0f, 4.0f}, {3}))).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2.0f, 3.0f, 4.0f});
  const Tensor in_f16 = from_vector<float>({1.0f}, {1}).to(DType::f16).set_requires_grad();
  CHECK(in_f16.requires_grad());  // half tensors may be leaves that require gradients, as in PyTorch
}
