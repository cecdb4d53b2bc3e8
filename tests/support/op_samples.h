// Sample sets shared by the op table's families (tests/support/op_table_*.cpp): the shapes every
// elementwise op runs on, built once here so that each entry names only what is its own.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "support/op_table.h"

// The op applied to a sample's inputs x: EMBER_APPLY(add(x[0], x[1])).
#define EMBER_APPLY(...) [](const std::vector<::ember::Tensor>& x) -> ::ember::Tensor { return __VA_ARGS__; }

namespace ember::testing {

// The large shape of every family: 37·45 = 1665 elements, not a multiple of a warp, a block or a
// vector width, and over six blocks of 256 threads. Gradcheck leaves it out (its Jacobian has
// 1665² entries); the smaller shapes check the rule, this one the devices.
inline const Shape kLarge{37, 45};

// A sample of these inputs, all differentiated where the op is differentiable; gradcheck leaves it
// out when its first input is as large as kLarge.
Sample call(std::string label, std::vector<Tensor> inputs, OpFn apply, std::string torch);
// The sample, left out of gradcheck: at a kink or a tie.
Sample at_kink(Sample sample);

// A unary op over a scalar, a vector, [3, 4], [2, 3, 4], an empty [0, 3] and kLarge, with values
// uniform in [low, high).
std::vector<Sample> unary_samples(const OpFn& apply, const std::string& torch, double low, double high);

// The values given, one sample of their own (ties, zeros, kinks, ±∞, NaN): gradcheck leaves it out.
Sample edge_sample(const OpFn& apply, const std::string& torch, const std::vector<double>& values,
                   const std::string& label = "edge values");

// A binary op with broadcasting: [3, 4]·[3, 4], [3, 4]·[4], [3, 1]·[1, 4], []·[2, 3],
// [2, 3, 4]·[3, 1] and kLarge·[45]; the second operand uniform in [low, high).
std::vector<Sample> binary_samples(const OpFn& apply, const std::string& torch, double low = -1, double high = 1);

// A u8 mask of 0 and 1 (a condition, as a comparison gives it), seeded.
Tensor mask_input(const Shape& shape, std::uint64_t seed);

// Two operands equal in places (ties, and 0 against −0), and two with NaN on either side and
// both, for comparisons and extremes.
Sample tie_sample(const OpFn& apply, const std::string& torch);
Sample nan_sample(const OpFn& apply, const std::string& torch);

inline std::vector<Sample> join(std::vector<Sample> a, std::vector<Sample> b) {
  for (Sample& s : b) a.push_back(std::move(s));
  return a;
}

}  // namespace ember::testing
