// CPU twins of the multi-tensor optimizer updates.
#include "kernels/optim_math.h"

namespace ember::kernels::cpu {

void advance_steps(const ParamSlot* slots, std::size_t count) {
  for (std::size_t s = 0; s < count; ++s) *slots[s].step += 1.0f;
}

namespace {
// The loops take restrict-qualified pointers and the settings by value, so that no store can
// change the settings, the branches on them move out of the loop, and the compiler vectorizes
// the shared per-element update.
void sgd_loop(float* __restrict param, const float* __restrict grad, float* __restrict buffer, std::size_t n,
              const SgdConfig config, float lr, bool first) {
  if (buffer) {
    for (std::size_t i = 0; i < n; ++i) sgd_update(param[i], grad[i], buffer + i, config, lr, first);
  } else {
    for (std::size_t i = 0; i < n; ++i) sgd_update(param[i], grad[i], nullptr, config, lr, first);
  }
}

void adam_loop(float* __restrict param, const float* __restrict grad, float* __restrict m, float* __restrict v,
               std::size_t n, const AdamConfig config, float lr, float step) {
  const AdamCorrections k = adam_corrections(config, lr, step);
  for (std::size_t i = 0; i < n; ++i) adam_update(param[i], grad[i], m[i], v[i], config, lr, k);
}
}  // namespace

void sgd_step(const ParamSlot* slots, std::size_t count, const SgdConfig& config, const float* lr) {
  for (std::size_t s = 0; s < count; ++s) {
    const ParamSlot& slot = slots[s];
    sgd_loop(slot.param, slot.grad, slot.state0, slot.n, config, *lr, *slot.step <= 1.0f);
  }
}

void adam_step(const ParamSlot* slots, std::size_t count, const AdamConfig& config, const float* lr) {
  for (std::size_t s = 0; s < count; ++s) {
    const ParamSlot& slot = slots[s];
    adam_loop(slot.param, slot.grad, slot.state0, slot.state1, slot.n, config, *lr, *slot.step);
  }
}

}  // namespace ember::kernels::cpu
