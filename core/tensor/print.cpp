// Printing a tensor: PyTorch's layout of nested brackets, host data only.
#include <ostream>

#include "base/error.h"
#include "core/tensor/storage.h"
#include "core/tensor/tensor.h"

namespace ember {

namespace {
void print_values(std::ostream& out, const Tensor& t, const char* base, std::size_t dim) {
  const Shape& shape = t.shape();
  const std::int64_t extent = shape[dim];
  const std::size_t elem = dtype_size(t.dtype());
  std::size_t inner = 1;
  for (std::size_t d = dim + 1; d < shape.size(); ++d) inner *= static_cast<std::size_t>(shape[d]);
  out << '[';
  constexpr std::int64_t kEdge = 3;  // first and last three entries of long dims
  for (std::int64_t i = 0; i < extent; ++i) {
    if (extent > 2 * kEdge && i == kEdge) {
      out << (dim + 1 == shape.size() ? ", ..." : ",\n ...");
      i = extent - kEdge;
    }
    if (i > 0) out << (dim + 1 == shape.size() ? ", " : ",\n ");
    const char* p = base + static_cast<std::size_t>(i) * inner * elem;
    if (dim + 1 == shape.size()) {
      visit_dtype(t.dtype(), [&out, p](auto zero) {
        const auto v = *reinterpret_cast<const decltype(zero)*>(p);
        if constexpr (sizeof(v) == 1)
          out << static_cast<int>(v);  // a u8 as a number, not a character
        else
          out << v;
      });
    } else {
      print_values(out, t, p, dim + 1);
    }
  }
  out << ']';
}
}  // namespace

std::ostream& operator<<(std::ostream& out, const Tensor& t) {
  if (!t.defined()) return out << "tensor(undefined)";
  EMBER_CHECK(!t.is_cuda(), DeviceError, "cannot print the values of a tensor on ", t.device(),
              " from the host: print t.cpu() instead");
  out << "tensor(";
  const char* base = static_cast<const char*>(t.storage()->data()) + t.offset() * dtype_size(t.dtype());
  t.storage()->wait_until_ready();
  if (t.dim() == 0) {
    Tensor one = t.reshape({1});
    std::ostringstream tmp;
    print_values(tmp, one, base, 0);
    const std::string s = tmp.str();
    out << s.substr(1, s.size() - 2);
  } else {
    print_values(out, t, base, 0);
  }
  out << ", shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype() << ", device=" << t.device();
  if (t.requires_grad()) out << ", requires_grad=true";
  return out << ')';
}

}  // namespace ember
