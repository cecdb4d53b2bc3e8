// Flatten.
#include "layers/flatten.h"

#include "base/error.h"

namespace ember::nn {

Tensor Flatten::forward(const Tensor& input) { return input.flatten(start_dim_); }
std::string Flatten::extra_repr() const { return detail::concat("start_dim=", start_dim_, ", end_dim=-1"); }

}  // namespace ember::nn
