// The LeakyReLU module's summary line; its op is ember::leaky_relu (core/ops/unary.cpp).
#include "layers/leaky_relu.h"

#include "base/error.h"

namespace ember::nn {

std::string LeakyReLU::extra_repr() const { return detail::concat("negative_slope=", slope_); }

}  // namespace ember::nn
