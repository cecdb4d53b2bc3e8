// Multi-tensor optimizer kernels: blockIdx.y picks the parameter, blocks along x stride over its
// elements, so one launch updates every parameter of a group.
#include <cuda_runtime.h>

#include "kernels/cuda/grid.cuh"
#include "kernels/optim_math.h"

namespace ember::kernels::cuda {
namespace {

constexpr std::size_t kMaxSlotsPerLaunch = 65535;  // gridDim.y's limit

__global__ void advance_steps_kernel(const ParamSlot* slots, std::size_t count) {
  const std::size_t s = global_thread();
  if (s < count) *slots[s].step += 1.0f;
}

__global__ void sgd_kernel(const ParamSlot* slots, SgdConfig config, const float* lr) {
  const ParamSlot slot = slots[blockIdx.y];
  const float rate = *lr;
  const bool first = *slot.step <= 1.0f;
  for (std::size_t i = global_thread(); i < slot.n; i += grid_stride())
    sgd_update(slot.param[i], slot.grad[i], slot.state0 ? slot.state0 + i : nullptr, config, rate, first);
}

__global__ void adam_kernel(const ParamSlot* slots, AdamConfig config, const float* lr) {
  const ParamSlot slot = slots[blockIdx.y];
  const float rate = *lr;
  const AdamCorrections k = adam_corrections(config, rate, *slot.step);
  for (std::size_t i = global_thread(); i < slot.n; i += grid_stride())
    adam_update(slot.param[i], slot.grad[i], slot.state0[i], slot.state1[i], config, rate, k);
}

template <class Launch>
void for_each_batch(std::size_t count, std::size_t max_n, Launch launch) {
  const unsigned blocks = grid_for(max_n);
  for (std::size_t first = 0; first < count; first += kMaxSlotsPerLaunch) {
    const std::size_t batch = count - first < kMaxSlotsPerLaunch ? count - first : kMaxSlotsPerLaunch;
    launch(first, dim3(blocks, static_cast<unsigned>(batch)));
  }
}

}  // namespace

void advance_steps(const ParamSlot* slots, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  advance_steps_kernel<<<static_cast<unsigned>(ceil_div(count, kBlock)), kBlock, 0, stream>>>(slots, count);
  check_launch("advance_steps", stream);
}

void sgd_step(const ParamSlot* slots, std::size_t count, std::size_t max_n, const SgdConfig& config,
              const float* lr, cudaStream_t stream) {
  if (count == 0 || max_n == 0) return;
  for_each_batch(count, max_n, [&](std::size_t first, dim3 grid) {
    sgd_kernel<<<grid, kBlock, 0, stream>>>(slots + first, config, lr);
    check_launch("sgd_step", stream);
  });
}

void adam_step(const ParamSlot* slots, std::size_t count, std::size_t max_n, const AdamConfig& config,
               const float* lr, cudaStream_t stream) {
  if (count == 0 || max_n == 0) return;
  for_each_batch(count, max_n, [&](std::size_t first, dim3 grid) {
    adam_kernel<<<grid, kBlock, 0, stream>>>(slots + first, config, lr);
    check_launch("adam_step", stream);
  });
}

}  // namespace ember::kernels::cuda
