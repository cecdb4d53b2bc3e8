// The loss criteria: CrossEntropyLoss, as torch.nn.CrossEntropyLoss with the default mean reduction.
#pragma once

#include "core/tensor/tensor.h"

namespace ember::nn {

// Mean softmax cross-entropy of logits [B, C] against class indices [B] (i32 or i64).
class CrossEntropyLoss {
 public:
  Tensor operator()(const Tensor& input, const Tensor& target) const;
};

}  // namespace ember::nn
