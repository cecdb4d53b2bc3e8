// Reading the EMBER_* environment variables (Note [environment flags] in base/env.h).
#include "base/env.h"

#include <cstdlib>

namespace ember {

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

bool env_flag(const char* name, bool fallback) {
  const std::optional<std::string> value = env_value(name);
  if (!value) return fallback;
  return *value != "0";
}

}  // namespace ember
