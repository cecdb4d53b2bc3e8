// Element types a Tensor can hold, their sizes and names, and the mapping to C++ types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

namespace ember {

enum class DType : std::uint8_t { f32, f64, i32, i64, u8 };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "f64", "i32", "i64", "u8"
DType parse_dtype(std::string_view name);  // throws ValueError for an unknown name
bool is_floating(DType dtype);
std::ostream& operator<<(std::ostream& out, DType dtype);

// dtype_of<T> maps a C++ element type to its DType, at compile time.
template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<std::uint8_t> {
  static constexpr DType value = DType::u8;
};
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace ember
