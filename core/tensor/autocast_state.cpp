// Autocast's per-thread switch (see core/tensor/autocast_state.h).
#include "core/tensor/autocast_state.h"

namespace ember {
namespace {
thread_local AutocastState t_cpu{false, DType::bf16};
thread_local AutocastState t_cuda{false, DType::f16};
}  // namespace

AutocastState& autocast_state(DeviceType type) { return type == DeviceType::cuda ? t_cuda : t_cpu; }

bool autocast_enabled(Device device) { return autocast_state(device.type).enabled; }
DType autocast_dtype(Device device) { return autocast_state(device.type).dtype; }

namespace ext {

AutocastOff::AutocastOff() : was_cpu_(t_cpu.enabled), was_cuda_(t_cuda.enabled) {
  t_cpu.enabled = false;
  t_cuda.enabled = false;
}

AutocastOff::~AutocastOff() {
  t_cpu.enabled = was_cpu_;
  t_cuda.enabled = was_cuda_;
}

}  // namespace ext
}  // namespace ember
