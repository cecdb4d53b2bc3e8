// The loss criteria.
#include "layers/loss.h"

#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"

namespace ember::nn {

Tensor CrossEntropyLoss::operator()(const Tensor& input, const Tensor& target) const {
  ext::check_same_device("CrossEntropyLoss", {{"input", input}, {"target", target}});
  return cross_entropy(input, target);
}

}  // namespace ember::nn
