#include "apps/bench/case.h"

#include <random>
#include <sstream>

namespace ember::apps::bench {

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::string compare(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol) {
  if (got.size() != want.size()) return "wrong number of outputs";
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (!(std::abs(a - b) <= atol + rtol * std::abs(b))) {
      std::ostringstream out;
      out << "element " << i << " is " << a << ", the CPU twin gives " << b;
      return out.str();
    }
  }
  return "";
}

std::function<std::string()> checker(std::function<void(int)> run, Tensor out, std::vector<float> want, double atol,
                                     double rtol) {
  return [run, out, want, atol, rtol]() mutable {
    out.fill_(std::numeric_limits<double>::quiet_NaN());
    run(0);
    return compare(out.to(DType::f32).to_vector<float>(), want, atol, rtol);
  };
}

}  // namespace ember::apps::bench
