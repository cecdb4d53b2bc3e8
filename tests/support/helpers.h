// Helpers shared by the tests: closeness checks that report the largest error, and random data.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace ember::testing {

// An environment variable set (or, with nullptr, unset) for a scope, restored when it ends, as
// FusionScope restores the fusion switch.
class EnvScope {
 public:
  EnvScope(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) before_ = before;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~EnvScope() { before_ ? ::setenv(name_.c_str(), before_->c_str(), 1) : ::unsetenv(name_.c_str()); }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  std::string name_;
  std::optional<std::string> before_;
};

// |a − b| ≤ atol + rtol·|b| for every element; on failure the message names the worst element.
struct CloseReport {
  bool ok = true;
  std::size_t worst_index = 0;
  double worst_error = 0;
  double worst_actual = 0, worst_expected = 0;
  std::string describe() const {
    std::ostringstream out;
    out << "largest error " << worst_error << " at element " << worst_index << " (got " << worst_actual << ", expected "
        << worst_expected << ")";
    return out.str();
  }
};

template <class A, class B>
CloseReport compare(const std::vector<A>& actual, const std::vector<B>& expected, double atol, double rtol) {
  CloseReport r;
  REQUIRE(actual.size() == expected.size());
  double worst_excess = -INFINITY;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = static_cast<double>(actual[i]), e = static_cast<double>(expected[i]);
    const double err = std::abs(a - e);
    const bool same_special = (std::isnan(a) && std::isnan(e)) || (std::isinf(a) && a == e);
    double excess = same_special ? -INFINITY : err - (atol + rtol * std::abs(e));
    if (std::isnan(excess)) excess = INFINITY;
    if (excess > 0) r.ok = false;
    if (i == 0 || excess > worst_excess) {
      worst_excess = excess;
      r.worst_index = i;
      r.worst_error = err;
      r.worst_actual = a;
      r.worst_expected = e;
    }
  }
  return r;
}

// Ends a test case that does not apply on this machine, saying so: Catch2 v2 has no SKIP, so the
// case still counts as passed, but the warning is printed by every reporter, with the reason.
#define EMBER_SKIP_CASE(reason)         \
  do {                                  \
    WARN("skipped here: " << (reason)); \
    return;                             \
  } while (false)

#define EMBER_REQUIRE_CLOSE(actual, expected, atol, rtol)                               \
  do {                                                                                  \
    const auto ember_report_ = ::ember::testing::compare(actual, expected, atol, rtol); \
    INFO(ember_report_.describe());                                                     \
    REQUIRE(ember_report_.ok);                                                          \
  } while (0)

// n values uniform in [low, high), the same for a seed on every machine (mt19937_64).
template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, T low, T high) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<T> dist(low, high);
  std::vector<T> v(n);
  for (T& x : v) x = dist(rng);
  return v;
}
inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float low = -1.0f, float high = 1.0f) {
  return random_values<float>(n, seed, low, high);
}
inline std::vector<double> random_doubles(std::size_t n, std::uint64_t seed, double low = -1.0, double high = 1.0) {
  return random_values<double>(n, seed, low, high);
}

// Every value of a module's state dict, in order, as f32: two models compare equal with ==.
template <class Module>
std::vector<float> state_values(const Module& m) {
  std::vector<float> out;
  for (const auto& [name, t] : m.state_dict())
    for (float v : t.template to_vector<float>()) out.push_back(v);
  return out;
}

// This test process's own folder for `area` under the system's temporary folder (created, kept).
inline std::filesystem::path process_dir(const std::string& area) {
  const auto dir = std::filesystem::temp_directory_path() / ("ember_" + area + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}
// An empty folder `name` in it.
inline std::filesystem::path fresh_dir(const std::string& area, const std::string& name) {
  const auto dir = process_dir(area) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs `fn` and returns the message of the ExceptionType it throws; fails the test otherwise.
template <class ExceptionType, class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const ExceptionType& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw the wrong exception type: " << e.what());
  }
  FAIL("did not throw");
  return {};
}

}  // namespace ember::testing
