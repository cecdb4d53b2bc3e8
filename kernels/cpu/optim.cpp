// CPU twins of the multi-tensor optimizer updates.
#include "kernels/optim_math.h"

#include <algorithm>

#include "kernels/parallel.h"

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
// update(slot, first, last) for the elements [first, last) of each slot, all slots' elements in
// parallel pieces (Note [CPU threads]): within a large parameter as well as across small ones.
template <class Update>
void for_slot_ranges(const ParamSlot* slots, std::size_t count, Update update) {
  std::size_t total = 0;
  for (std::size_t s = 0; s < count; ++s) total += slots[s].n;
  parallel_for(total, kElementsPerPiece / 4, [&](std::size_t begin, std::size_t end) {
    std::size_t start = 0;
    for (std::size_t s = 0; s < count && start < end; start += slots[s].n, ++s) {
      const std::size_t first = std::max(begin, start), last = std::min(end, start + slots[s].n);
      if (first < last) update(slots[s], first - start, last - start);
    }
  });
}
}  // namespace

void sgd_step(const ParamSlot* slots, std::size_t count, const SgdConfig& config, const float* lr) {
  for_slot_ranges(slots, count, [&](const ParamSlot& slot, std::size_t first, std::size_t last) {
    sgd_loop(slot.param + first, slot.grad + first, slot.state0 ? slot.state0 + first : nullptr, last - first, config,
             *lr, *slot.step <= 1.0f);
  });
}

void adam_step(const ParamSlot* slots, std::size_t count, const AdamConfig& config, const float* lr) {
  for_slot_ranges(slots, count, [&](const ParamSlot& slot, std::size_t first, std::size_t last) {
    adam_loop(slot.param + first, slot.grad + first, slot.state0 + first, slot.state1 + first, last - first, config,
              *lr, *slot.step);
  });
}

}  // namespace ember::kernels::cpu
