// DType names and sizes.
#include "base/dtype.h"

#include <string>

#include "base/error.h"

namespace ember {

std::size_t dtype_size(DType dtype) {
  return visit_dtype(dtype, [](auto zero) { return sizeof(zero); });
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
#define EMBER_DTYPE_NAME(name, ...) \
  case DType::name:                 \
    return #name;
    EMBER_FORALL_DTYPES(EMBER_DTYPE_NAME)
#undef EMBER_DTYPE_NAME
  }
  return "invalid";
}

DType parse_dtype(std::string_view name) {
  std::string known;
#define EMBER_DTYPE_PARSE(dtype, ...)      \
  if (name == #dtype) return DType::dtype; \
  known += std::string(known.empty() ? "" : ", ") + #dtype;
  EMBER_FORALL_DTYPES(EMBER_DTYPE_PARSE)
#undef EMBER_DTYPE_PARSE
  throw ValueError(detail::concat("unknown dtype '", name, "': expected one of ", known));
}

bool is_floating(DType dtype) {
  switch (dtype) {
#define EMBER_DTYPE_FLOATING(name, type, floating, ...) \
  case DType::name:                                     \
    return floating;
    EMBER_FORALL_DTYPES(EMBER_DTYPE_FLOATING)
#undef EMBER_DTYPE_FLOATING
  }
  return false;
}
bool is_half(DType dtype) { return dtype == DType::bf16 || dtype == DType::f16; }

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

}  // namespace ember
