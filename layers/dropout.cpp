// Dropout.
#include "layers/dropout.h"

#include "base/error.h"
#include "core/ops/ops.h"
#include "core/tensor/random.h"

namespace ember::nn {

Dropout::Dropout(double p, std::optional<std::uint64_t> seed)
    : p_(p), seed_(seed ? *seed : default_generator().next_u64()) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, ValueError, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& input) {
  if (!is_training() || p_ == 0.0) return input;
  const std::uint64_t offset = offset_;
  offset_ += static_cast<std::uint64_t>(input.numel());
  return dropout(input, p_, seed_, offset);
}

std::string Dropout::extra_repr() const { return detail::concat("p=", p_, ", inplace=False"); }

}  // namespace ember::nn
