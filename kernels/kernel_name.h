// The name of a function known at compile time, as the compiler spells it
// ("ember::kernels::cuda::{anonymous}::map_kernel<...>"): how a kernel launch names the kernel in
// its error messages without a hand-written string that could drift from the kernel.
#pragma once

#include <string_view>

namespace ember::kernels {

template <auto Function>
constexpr std::string_view function_name() {
  // GCC and clang (nvcc's host compilers): "... function_name() [with auto Function = NAME]" or
  // "[Function = &NAME]". GCC's NAME carries a template's arguments (map_kernel<Neg>); clang 14's
  // does not (map_kernel), so under clang two instances of one kernel template share a name.
  constexpr std::string_view pretty = __PRETTY_FUNCTION__;
  constexpr std::string_view marker = "Function = ";
  constexpr std::size_t begin = pretty.find(marker) + marker.size();
  constexpr std::size_t end = pretty.find_first_of(";]", begin);
  constexpr std::string_view name = pretty.substr(begin, end - begin);
  return name.substr(0, 1) == "&" ? name.substr(1) : name;
}

}  // namespace ember::kernels
