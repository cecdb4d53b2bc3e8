// The fusion switch (see core/fusion.h).
#include "core/fusion.h"

#include <atomic>
#include <cstdlib>
#include <string>

namespace ember {
namespace {
std::atomic<bool>& fusion_flag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("EMBER_FUSION");
    return !(env && std::string(env) == "0");
  }()};
  return flag;
}
}  // namespace

void set_fusion_enabled(bool enabled) { fusion_flag() = enabled; }
bool fusion_enabled() { return fusion_flag(); }
}  // namespace ember
