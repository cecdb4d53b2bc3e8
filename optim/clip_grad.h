// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <vector>

#include "core/tensor/tensor.h"

namespace ember::optim {

// The 2-norm of all the parameters' gradients together, √(Σ g²) (those without a gradient left
// out); every gradient is scaled in place by max_norm / (norm + 10⁻⁶) where that is below 1,
// PyTorch's coefficient. Returns the norm before clipping (as PyTorch does); a non-finite norm
// is returned and the gradients are left as they are, for the caller's non-finite check to see.
// Reads one scalar back from the device.
double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm);

}  // namespace ember::optim
