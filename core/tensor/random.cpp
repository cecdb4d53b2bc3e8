// Conversions from raw random bits to distributions.
#include "core/tensor/random.h"

#include <cmath>

namespace ember {

double Generator::normal() {
  // Box–Muller: two uniforms give two independent normals; keep the second for the next call.
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * 3.14159265358979323846 * u2;
  spare_normal_ = radius * std::sin(angle);
  has_spare_normal_ = true;
  return radius * std::cos(angle);
}

std::uint64_t Generator::below(std::uint64_t n) {
  if (n <= 1) return 0;
  // Rejection sampling on the top of the range keeps every value equally likely.
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t v = engine_();
  while (v >= limit) v = engine_();
  return v % n;
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ember
