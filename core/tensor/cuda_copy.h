// Copies between a CUDA device and the host, or between devices: the CUDA half of Tensor::copy_
// and to(), with what each copy records for the memory it touches (Note [stream ownership of device
// memory] in core/tensor/storage.h). The only file where a tensor's CUDA copies are made.
#pragma once

#include "core/tensor/tensor.h"

namespace ember::cuda {

// Copies src's bytes into dst (same byte count; at least one of them on a CUDA device). Host →
// device from pinned memory with `non_blocking` returns at once (the source is recorded as read
// by the copy); device → pinned host with `non_blocking` makes dst wait for an event before any
// host read; otherwise the host waits for the copy.
void copy_bytes(const Tensor& dst, const Tensor& src, bool non_blocking);

}  // namespace ember::cuda
