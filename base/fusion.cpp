// The fusion switch (see base/fusion.h).
#include "base/fusion.h"

#include <atomic>

#include "base/env.h"

namespace ember {
namespace {
std::atomic<bool>& fusion_flag() {
  static std::atomic<bool> flag{env_flag("EMBER_FUSION", true)};
  return flag;
}
}  // namespace

void set_fusion_enabled(bool enabled) { fusion_flag() = enabled; }
bool fusion_enabled() { return fusion_flag(); }
}  // namespace ember
