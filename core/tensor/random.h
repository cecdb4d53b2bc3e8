// Seeded random numbers. The stream of values is defined by this file alone (a 64-bit Mersenne
// Twister and explicit conversions), not by the standard library's distributions, so a seed
// gives the same numbers with every compiler and on every machine.
#pragma once

#include <cstdint>
#include <random>

namespace ember {

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : engine_(seed), seed_(seed) {}
  void manual_seed(std::uint64_t seed) {
    engine_.seed(seed);
    seed_ = seed;
    has_spare_normal_ = false;
  }
  std::uint64_t seed() const { return seed_; }

  std::uint64_t next_u64() { return engine_(); }
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal();                                                               // N(0, 1)
  // Uniform integer in [0, n), without modulo bias.
  std::uint64_t below(std::uint64_t n);

 private:
  std::mt19937_64 engine_;
  std::uint64_t seed_;
  bool has_spare_normal_ = false;
  double spare_normal_ = 0;
};

// The process-wide generator used when none is passed.
Generator& default_generator();
void manual_seed(std::uint64_t seed);

}  // namespace ember
