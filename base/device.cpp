// Device parsing and printing, and the names of memory kinds.
#include "base/device.h"

#include <cstddef>
#include <iterator>
#include <string>

#include "base/error.h"

namespace ember {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    int index = 0;
    for (char c : text.substr(5)) {
      if (c < '0' || c > '9' || index > 100000) {
        index = -1;
        break;
      }
      index = index * 10 + (c - '0');
    }
    if (index >= 0) return cuda(index);
  }
  throw ValueError(detail::concat("invalid device '", text, "': expected 'cpu', 'cuda' or 'cuda:N' (N = 0, 1, ...)"));
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : detail::concat("cuda:", index); }

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

const char* memory_kind_name(MemoryKind kind) {
  constexpr const char* names[] = {"pageable", "pinned", "device"};  // in MemoryKind's order
  const auto i = static_cast<std::size_t>(kind);
  return i < std::size(names) ? names[i] : "invalid";
}

}  // namespace ember
