// Multi-tensor optimizer kernels: blockIdx.y picks the parameter, blocks along x stride over its
// elements, so one launch updates every parameter of a group.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/optim_math.h"

namespace ember::kernels::cuda {
namespace {

constexpr std::size_t kMaxSlotsPerLaunch = 65535;  // gridDim.y's limit

__global__ void advance_steps_kernel(const ParamSlot* slots, std::size_t count) {
  const std::size_t s = global_thread();
  if (s < count) *slots[s].step += 1.0f;
}

// With `advance` (a counter at 0), this update is step *step + 1, and the last block to finish
// writes that count back to every slot of the launch: the step counts advance without a launch
// of their own. Without it, the counts were advanced beforehand (advance_steps).
__device__ float this_step(const ParamSlot& slot, const unsigned* advance) {
  return *slot.step + (advance ? 1.0f : 0.0f);
}
__device__ void finish_advance(const ParamSlot* slots, unsigned* advance) {
  if (!advance || !is_last_block(advance)) return;
  for (unsigned s = threadIdx.x; s < gridDim.y; s += blockDim.x) *slots[s].step += 1.0f;
  if (threadIdx.x == 0) *advance = 0;
}

__global__ void sgd_kernel(const ParamSlot* slots, SgdConfig config, const float* lr, unsigned* advance) {
  const ParamSlot slot = slots[blockIdx.y];
  const float rate = *lr;
  const bool first = this_step(slot, advance) <= 1.0f;
  for (std::size_t i = global_thread(); i < slot.n; i += grid_stride())
    sgd_update(slot.param[i], slot.grad[i], slot.state0 ? slot.state0 + i : nullptr, config, rate, first);
  finish_advance(slots, advance);
}

__global__ void adam_kernel(const ParamSlot* slots, AdamConfig config, const float* lr, unsigned* advance) {
  const ParamSlot slot = slots[blockIdx.y];
  const float rate = *lr;
  const AdamCorrections k = adam_corrections(config, rate, this_step(slot, advance));
  for (std::size_t i = global_thread(); i < slot.n; i += grid_stride())
    adam_update(slot.param[i], slot.grad[i], slot.state0[i], slot.state1[i], config, rate, k);
  finish_advance(slots, advance);
}

// What the kernels reach through slots [first, first + count): the parameters, their state and
// step counts written, the gradients read (launch_reaching in kernels/cuda/launch.cuh).
std::vector<Reached> reached_by(const ParamSlot* slots, std::size_t first, std::size_t count, bool steps_only) {
  std::vector<Reached> out;
  for (std::size_t i = first; i < first + count; ++i) {
    const ParamSlot& s = slots[i];
    const std::size_t bytes = s.n * sizeof(float);
    out.push_back({s.step, sizeof(float), true});
    if (steps_only || bytes == 0) continue;
    out.push_back({s.param, bytes, true});
    out.push_back({s.grad, bytes, false});
    for (const float* state : {s.state0, s.state1})
      if (state) out.push_back({state, bytes, true});
  }
  return out;
}

// Launches `Kernel` once per batch of at most kMaxSlotsPerLaunch slots.
template <auto Kernel, class Config>
void for_each_batch(const DeviceSlots& slots, std::size_t max_n, const Config& config, const float* lr,
                    unsigned* advance, cudaStream_t stream) {
  // Parameters of no elements still take a step (their counts advance, as on the CPU): a block.
  const unsigned blocks = grid_for(max_n > 0 ? max_n : 1);
  for (std::size_t first = 0; first < slots.count; first += kMaxSlotsPerLaunch) {
    const std::size_t batch = std::min(slots.count - first, kMaxSlotsPerLaunch);
    launch_reaching<Kernel>(
        {dim3(blocks, static_cast<unsigned>(batch))}, [&] { return reached_by(slots.host, first, batch, false); },
        stream, slots.device + first, config, lr, advance);
  }
}

}  // namespace

void advance_steps(const DeviceSlots& slots, cudaStream_t stream) {
  if (slots.count == 0) return;
  launch_reaching<advance_steps_kernel>(
      {dim3(static_cast<unsigned>(ceil_div(slots.count, kBlock)))},
      [&] { return reached_by(slots.host, 0, slots.count, true); }, stream, slots.device, slots.count);
}

void sgd_step(const DeviceSlots& slots, std::size_t max_n, const SgdConfig& config, const float* lr, unsigned* advance,
              cudaStream_t stream) {
  if (slots.count == 0) return;
  for_each_batch<sgd_kernel>(slots, max_n, config, lr, advance, stream);
}

void adam_step(const DeviceSlots& slots, std::size_t max_n, const AdamConfig& config, const float* lr,
               unsigned* advance, cudaStream_t stream) {
  if (slots.count == 0) return;
  for_each_batch<adam_kernel>(slots, max_n, config, lr, advance, stream);
}

}  // namespace ember::kernels::cuda
