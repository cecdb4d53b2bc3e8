// Fault points (Note [fault points]).
#include "base/fault_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "base/env.h"

namespace ember {
namespace {

struct Planned {
  std::string name;  // empty: none
  long at = 0;
  bool stop = false;
};

const Planned& planned() {
  static const Planned parsed = [] {
    Planned p;
    const std::optional<std::string> spec = env_value("EMBER_FAULT_POINT");
    if (!spec) return p;
    const std::size_t colon = spec->find(':');
    if (colon == std::string::npos) return p;
    p.name = spec->substr(0, colon);
    const std::string rest = spec->substr(colon + 1);
    p.at = std::strtol(rest.c_str(), nullptr, 10);
    p.stop = rest.find(":stop") != std::string::npos;
    return p;
  }();
  return parsed;
}

std::atomic<long> passes{0};

}  // namespace

void fault_point(const char* name) {
  const Planned& p = planned();
  if (p.name.empty() || p.name != name) return;
  if (++passes != p.at) return;
  ::kill(::getpid(), p.stop ? SIGSTOP : SIGKILL);
}

}  // namespace ember
