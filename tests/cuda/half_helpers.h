// Helpers of the GPU's 16-bit tests: values rounded to a 16-bit type and widened back, one ulp of
// it, the check that a result is its f32 twin rounded once, and the sizes they run at.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "base/half.h"
#include "cuda/cuda_helpers.h"

namespace ember::testing {

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

inline std::vector<std::size_t> sizes_16_bit() {
  std::vector<std::size_t> sizes;
  for (std::size_t n : test_sizes())
    if (n < 1000000) sizes.push_back(n);  // the f32 kernels' test has the largest size
  return sizes;
}

}  // namespace ember::testing
