// Optimizer updates for many tensors in one call: on CUDA one launch updates every parameter of a
// group (a multi-tensor kernel), instead of one launch per tensor.
//
// The learning rate and the step counts are read from memory (device memory on CUDA), not passed
// as kernel arguments (Note [graph-safe kernels] in core/cuda/graph.h). Each parameter has its own
// step count (PyTorch counts steps per parameter too), one more at every update: advanced by
// advance_steps() before the update, or — on CUDA, given a counter — by the update kernel itself.
#pragma once

#include "kernels/common.h"

namespace ember::kernels {

// One parameter: its values, its gradient, up to two state buffers (momentum; Adam's moments)
// and its step count, all f32 in the backend's memory.
struct ParamSlot {
  float* param = nullptr;
  const float* grad = nullptr;
  float* state0 = nullptr;  // SGD: momentum buffer; Adam: exp_avg
  float* state1 = nullptr;  // Adam: exp_avg_sq
  float* step = nullptr;    // this parameter's step count, 1 at its first update
  std::size_t n = 0;
};

struct SgdConfig {
  float momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

struct AdamConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
};

}  // namespace ember::kernels

namespace ember::kernels::cpu {
// slots is a host array of `count` slots; *lr is read from host memory.
void advance_steps(const ParamSlot* slots, std::size_t count);
void sgd_step(const ParamSlot* slots, std::size_t count, const SgdConfig& config, const float* lr);
void adam_step(const ParamSlot* slots, std::size_t count, const AdamConfig& config, const float* lr);
}  // namespace ember::kernels::cpu

namespace ember::kernels::cuda {
// A slot table in device memory — what the kernels read — with the host array it was uploaded
// from, whose pointers the launcher declares to the stream-ordering checks of a CUDA runtime that
// runs kernels on the CPU (launch_reaching in kernels/cuda/launch.cuh): those checks see only a
// launch's arguments, and cannot read a table an earlier copy on the stream has yet to fill.
struct DeviceSlots {
  const ParamSlot* device = nullptr;
  const ParamSlot* host = nullptr;
  std::size_t count = 0;
};

// max_n is the largest slot's n (sizes the grid); lr a device pointer. With `advance` — a device
// counter at 0, which the kernel leaves at 0 — the update advances the step counts itself (it
// runs as step count + 1 and the last block to finish stores that), so a whole optimizer step is
// one launch; with null, call advance_steps first.
void advance_steps(const DeviceSlots& slots, cudaStream_t stream);
void sgd_step(const DeviceSlots& slots, std::size_t max_n, const SgdConfig& config, const float* lr, unsigned* advance,
              cudaStream_t stream);
void adam_step(const DeviceSlots& slots, std::size_t max_n, const AdamConfig& config, const float* lr,
               unsigned* advance, cudaStream_t stream);
}  // namespace ember::kernels::cuda
