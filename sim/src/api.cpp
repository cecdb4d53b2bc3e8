// The errors (each host thread's last error, the names and texts) and the device API: versions,
// the current device, properties and attributes, peer access, cudaDeviceSynchronize.
#include <cstdio>
#include <cstring>

#include "state.h"

namespace ember_sim::rt {

namespace {
thread_local cudaError_t t_last_error = cudaSuccess;
}  // namespace

cudaError_t record_error(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

namespace {
// The errors the software GPU returns, with their names and CUDA's texts.
struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported (by the software GPU)"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
};

const ErrorText* error_text(cudaError_t e) {
  for (const ErrorText& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}

const char* error_name(cudaError_t e) {
  const ErrorText* t = error_text(e);
  return t ? t->name : "cudaErrorUnknown";
}

const char* error_string(cudaError_t e) {
  const ErrorText* t = error_text(e);
  return t ? t->text : "unknown error";
}
}  // namespace

}  // namespace ember_sim::rt

// ---- errors and devices ------------------------------------------------------------------------------
using namespace ember_sim::rt;

cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (cudaError_t sticky = sticky_error(rt, t_device)) return sticky;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (cudaError_t sticky = sticky_error(rt, t_device)) return sticky;
  return t_last_error;
}

const char* cudaGetErrorName(cudaError_t error) { return error_name(error); }
const char* cudaGetErrorString(cudaError_t error) { return error_string(error); }

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return cudaErrorInvalidValue;
  *version = CUDART_VERSION;
  return cudaSuccess;
}

// The software GPU is its own driver: the same version as the runtime.
cudaError_t cudaDriverGetVersion(int* version) { return cudaRuntimeGetVersion(version); }

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return cudaErrorInvalidValue;
  *count = static_cast<int>(runtime().devices.size());
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= static_cast<int>(runtime().devices.size())) return record_error(cudaErrorInvalidDevice);
  t_device = device;
  note_context_use(device);  // CUDA 12: cudaSetDevice makes the device's primary context current
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return cudaErrorInvalidValue;
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return cudaErrorInvalidValue;
  if (device < 0 || device >= static_cast<int>(runtime().devices.size())) return record_error(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "ember software GPU, simulated sm_90");
  prop->totalGlobalMem = config().capacity;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->canMapHostMemory = 1;
  prop->unifiedAddressing = 1;
  prop->concurrentKernels = 1;
  prop->asyncEngineCount = 2;
  prop->memoryPoolsSupported = 1;
  prop->pciDeviceID = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return cudaErrorInvalidValue;
  cudaDeviceProp p;
  if (cudaError_t e = cudaGetDeviceProperties(&p, device)) return e;
  switch (attr) {
    case cudaDevAttrL2CacheSize:
      *value = p.l2CacheSize;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      return cudaSuccess;
    case cudaDevAttrMemoryPoolsSupported:
      *value = 1;
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    default:
      return record_error(cudaErrorNotSupported);
  }
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!can) return cudaErrorInvalidValue;
  const int n = static_cast<int>(runtime().devices.size());
  if (device < 0 || device >= n || peer < 0 || peer >= n) return record_error(cudaErrorInvalidDevice);
  *can = device != peer;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (peer < 0 || peer >= static_cast<int>(rt.devices.size()) || peer == t_device)
    return record_error(cudaErrorInvalidDevice);
  if (!rt.devices[static_cast<std::size_t>(t_device)].peers.insert(peer).second)
    return record_error(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  if (cudaError_t e = unsafe_during_capture(rt, "cudaDeviceSynchronize")) return record_error(e);
  device_synchronize(rt, lock, t_device);
  return record_error(sticky_error(rt, t_device));
}
