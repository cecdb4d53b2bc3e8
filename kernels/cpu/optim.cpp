// CPU twins of the multi-tensor optimizer updates.
#include "kernels/optim_math.h"

namespace ember::kernels::cpu {

void advance_steps(const ParamSlot* slots, std::size_t count) {
  for (std::size_t s = 0; s < count; ++s) *slots[s].step += 1.0f;
}

void sgd_step(const ParamSlot* slots, std::size_t count, const SgdConfig& config, const float* lr) {
  for (std::size_t s = 0; s < count; ++s) {
    const ParamSlot& slot = slots[s];
    const bool first = *slot.step <= 1.0f;
    for (std::size_t i = 0; i < slot.n; ++i)
      sgd_update(slot.param[i], slot.grad[i], slot.state0 ? slot.state0 + i : nullptr, config, *lr, first);
  }
}

void adam_step(const ParamSlot* slots, std::size_t count, const AdamConfig& config, const float* lr) {
  for (std::size_t s = 0; s < count; ++s) {
    const ParamSlot& slot = slots[s];
    const float step = *slot.step;
    for (std::size_t i = 0; i < slot.n; ++i)
      adam_update(slot.param[i], slot.grad[i], slot.state0[i], slot.state1[i], config, *lr, step);
  }
}

}  // namespace ember::kernels::cpu
