// DType names and sizes.
#include "core/base/dtype.h"

#include "core/base/error.h"

namespace ember {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  throw ValueError("dtype_size: invalid DType value");
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "invalid";
}

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8})
    if (dtype_name(d) == name) return d;
  throw ValueError(detail::concat("unknown dtype '", name, "': expected one of f32, f64, i32, i64, u8"));
}

bool is_floating(DType dtype) { return dtype == DType::f32 || dtype == DType::f64; }

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

}  // namespace ember
