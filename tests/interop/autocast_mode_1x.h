// A stand-in for ATen/autocast_mode.h as PyTorch 1.x and early 2.x install it (Debian's
// libtorch-dev 1.13 among them): the autocast API's declarations and wrappers, and no AT_FORALL_*
// lists, which those versions keep in autocast_mode.cpp. autocast_torch reads it with --header
// (the autocast_torch_header_1x test) and must skip only its CUDA half, saying why.
#pragma once

namespace at::autocast {

bool is_enabled();
void set_enabled(bool enabled);
bool is_cpu_enabled();
void set_cpu_enabled(bool enabled);

#define KERNEL_CUDA(OP, POLICY) KERNEL(c10::DeviceType::CUDA, OP, POLICY)

}  // namespace at::autocast
