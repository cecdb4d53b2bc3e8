// Counter-based random numbers: u(seed, counter), a hash of its arguments mapped to [0, 1), the
// same on the host and on a GPU. Dropout's masks (kernels/dropout.h) and the loader's augmentation
// (data/augment.h) draw from it, so that what is drawn depends on a position, not on which thread
// or device draws it, and no random state has to move anywhere.
#pragma once

#include <cstdint>

#include "base/host_device.h"

namespace ember {

// splitmix64's finalizer over (seed, counter): a good 64-bit mix, then the top 24 bits as a float
// in [0, 1) (24 bits: exactly representable, the same on every device).
EMBER_HOST_DEVICE float counter_uniform(std::uint64_t seed, std::uint64_t counter) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (counter + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

}  // namespace ember
