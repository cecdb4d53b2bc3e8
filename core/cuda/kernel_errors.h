// Turns the record a kernel filled in about bad input into ember's typed exception.
#pragma once

#include "base/device.h"

namespace ember::kernels {
struct DeviceErrorRecord;
}

namespace ember {
// Throws IndexError (target out of range) or NonFiniteError (non-finite value), naming the op, the
// offending value and where it was; for a CUDA device the message says that the error was
// found at a synchronization after the op had returned.
[[noreturn]] void throw_kernel_error(const kernels::DeviceErrorRecord& record, Device device);
}  // namespace ember
