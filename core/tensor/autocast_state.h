// Autocast's per-thread switch for each device type, and the guard that turns it off: the part of
// autocast (core/ops/autocast.h) that the backward pass needs, kept below the ops so that
// autograd can turn it off without including them.
#pragma once

#include "base/device.h"
#include "base/dtype.h"

namespace ember {

// On this thread: whether autocast is on for ops on `type`, and its 16-bit dtype (bf16 on the
// CPU, f16 on CUDA until a scope says otherwise).
struct AutocastState {
  bool enabled;
  DType dtype;
};
AutocastState& autocast_state(DeviceType type);

bool autocast_enabled(Device device);
DType autocast_dtype(Device device);  // the scope's dtype, or the default above outside one

namespace ext {

// Autocast off on every device type for a scope (the backward pass), restored at its end.
class AutocastOff {
 public:
  AutocastOff();
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  bool was_cpu_, was_cuda_;
};

}  // namespace ext
}  // namespace ember
