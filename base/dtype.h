// Element types a Tensor can hold, their sizes and names, and the mapping to C++ types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "base/half.h"

namespace ember {

// Note [the dtype list]
// Every element type, written once; each list or switch over dtypes — the enum, names, sizes,
// the dispatch to C++ types, casts, safetensors' names, MPI's and NCCL's types — is generated
// from it (as c10's AT_FORALL_SCALAR_TYPES). A new dtype is one line here.
//   _(enum name, C++ type, floating, safetensors name, MPI_<type>, nccl<type>)
// MPI has no 16-bit floating type: bf16 and f16 travel as 16-bit words, and MPI reductions refuse
// them (distributed/mpi.cpp). Note [half precision] in base/half.h says what they are for.
#define EMBER_FORALL_DTYPES(_)                             \
  _(f32, float, true, F32, FLOAT, Float32)                 \
  _(f64, double, true, F64, DOUBLE, Float64)               \
  _(i32, std::int32_t, false, I32, INT32_T, Int32)         \
  _(i64, std::int64_t, false, I64, INT64_T, Int64)         \
  _(u8, std::uint8_t, false, U8, UINT8_T, Uint8)           \
  _(bf16, ember::bfloat16, true, BF16, UINT16_T, Bfloat16) \
  _(f16, ember::float16, true, F16, UINT16_T, Float16)

#define EMBER_DTYPE_ENUM(name, ...) name,
enum class DType : std::uint8_t { EMBER_FORALL_DTYPES(EMBER_DTYPE_ENUM) };
#undef EMBER_DTYPE_ENUM

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "f64", "i32", "i64", "u8", "bf16", "f16"
DType parse_dtype(std::string_view name);  // throws ValueError for an unknown name
bool is_floating(DType dtype);
// bf16 and f16: storage and casts on both devices; ops compute in f32 (Note [half precision]).
bool is_half(DType dtype);
std::ostream& operator<<(std::ostream& out, DType dtype);

// dtype_of<T> maps a C++ element type to its DType, at compile time.
template <class T>
struct DTypeOf;
#define EMBER_DTYPE_OF(name, type, ...)         \
  template <>                                   \
  struct DTypeOf<type> {                        \
    static constexpr DType value = DType::name; \
  };
EMBER_FORALL_DTYPES(EMBER_DTYPE_OF)
#undef EMBER_DTYPE_OF
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Calls f(T{}) with the element type of `dtype`.
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
#define EMBER_DTYPE_VISIT(name, type, ...) \
  case DType::name:                        \
    return f(type{});
    EMBER_FORALL_DTYPES(EMBER_DTYPE_VISIT)
#undef EMBER_DTYPE_VISIT
  }
  return f(float{});  // not reached: the switch covers every dtype
}

}  // namespace ember
