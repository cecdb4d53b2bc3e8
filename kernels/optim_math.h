// The per-element optimizer updates, shared by the CPU and CUDA backends so that both compute
// exactly PyTorch's formulas in the same order. Compiled as host code by g++ and as host and
// device code by nvcc.
#pragma once

#include <math.h>

#include "kernels/optim.h"

namespace ember::kernels {

// torch.optim.SGD: d = g + wd·p; buf = g on the first step, else momentum·buf + (1−dampening)·d;
// d = d + momentum·buf (Nesterov) or buf; p −= lr·d.
EMBER_HOST_DEVICE void sgd_update(float& p, float g, float* buf, const SgdConfig& c, float lr, bool first_step) {
  float d = g;
  if (c.weight_decay != 0.0f) d = d + c.weight_decay * p;
  if (c.momentum != 0.0f) {
    const float b = first_step ? d : c.momentum * *buf + (1.0f - c.dampening) * d;
    *buf = b;
    d = c.nesterov ? d + c.momentum * b : b;
  }
  p = p - lr * d;
}

// Adam's bias corrections for step t: 1 − β1ᵗ and √(1 − β2ᵗ). Computed once per parameter, not
// per element.
struct AdamCorrections {
  float step_size;              // lr / (1 − β1ᵗ)
  float bias_correction2_sqrt;  // √(1 − β2ᵗ)
};
EMBER_HOST_DEVICE AdamCorrections adam_corrections(const AdamConfig& c, float lr, float step) {
  return {lr / (1.0f - powf(c.beta1, step)), sqrtf(1.0f - powf(c.beta2, step))};
}

// torch.optim.Adam / AdamW (not amsgrad): m ← m + (1−β1)(g − m); v ← β2·v + (1−β2)·g²;
// p −= (lr / (1−β1ᵗ)) · m / (√v / √(1−β2ᵗ) + eps). Adam adds wd·p to g; AdamW scales p by
// (1 − lr·wd) first.
EMBER_HOST_DEVICE void adam_update(float& p, float g, float& m, float& v, const AdamConfig& c, float lr,
                                   AdamCorrections k) {
  if (c.weight_decay != 0.0f) {
    if (c.decoupled_weight_decay)
      p = p * (1.0f - lr * c.weight_decay);
    else
      g = g + c.weight_decay * p;
  }
  m = m + (1.0f - c.beta1) * (g - m);
  v = c.beta2 * v + (1.0f - c.beta2) * g * g;
  p = p - k.step_size * (m / (sqrtf(v) / k.bias_correction2_sqrt + c.eps));
}

}  // namespace ember::kernels
