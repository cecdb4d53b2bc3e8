// Raising a device-side error from a kernel (device code only, never included by C++): the GPU
// side of kernels::raise_error_on_host, with atomics so that any number of threads may raise at
// once. Note [which bad input is reported] in kernels/common.h.
#pragma once

#include <cuda_runtime.h>

#include "kernels/common.h"

namespace ember::kernels::cuda {

__device__ inline void raise_device_error(DeviceErrorRecord* record, DeviceErrorCode code, OpTag op, long long position,
                                          long long value, long long bound) {
  if (!record) return;
  const int mine = static_cast<int>(code);
  const int before = atomicCAS(&record->code, 0, mine);
  if (before != 0 && before != mine) return;  // another kind of error came first
  // Every thread raising this kind writes the same op and bound; atomics keep those writes from
  // racing with each other.
  atomicExch(&record->op, static_cast<int>(op));
  atomicExch(reinterpret_cast<unsigned long long*>(&record->bound), static_cast<unsigned long long>(bound));
  atomicMin(&record->key, error_key(position, value));
  // The record lives in device memory; the host copies it after a synchronization, which orders
  // these writes before the copy: no fence is needed.
}

}  // namespace ember::kernels::cuda
