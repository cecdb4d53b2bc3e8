// The CUDA runtime as ember uses it: availability, streams, events, synchronization and the
// device-side error flags. Compiles without the CUDA toolkit (the stream and event types are
// forward-declared); in a build without CUDA every query answers "not available".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/device.h"

typedef struct CUstream_st* cudaStream_t;  // identical to the CUDA runtime's own typedef
typedef struct CUevent_st* cudaEvent_t;

namespace ember::kernels {
struct DeviceErrorRecord;
}

namespace ember::cuda {

bool built_with_cuda();  // whether this build of ember contains the CUDA backend
bool is_available();     // a driver, a compatible runtime and at least one device
int device_count();      // 0 when not available
// Why CUDA is not available ("CUDA driver not found", "no CUDA device", "driver 12.2 is older
// than the runtime 13.0", ...); empty when it is.
std::string unavailable_reason();
// A one-line description of device `index`: name, compute capability, memory.
std::string device_description(int index);

// Throws DeviceError naming `caller` and the device unless `device` is a CUDA device (cuda:N);
// every call below that takes a Device starts with it.
void require_cuda_device(Device device, const char* caller);
// Throws DeviceError unless CUDA device `device` can hold tensors now (a usable runtime and driver,
// and index < device_count()), saying what was found; require_usable (core/tensor/device.h) for
// any device.
void require_usable_device(Device device);

// An owned CUDA stream. Non-blocking: it does not wait on the legacy default stream. Its
// destructor waits for the work issued on it, so memory it used can be freed safely afterwards
// (Note [stream ownership of device memory] in core/tensor/storage.h).
class Stream {
 public:
  explicit Stream(Device device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t handle() const { return handle_; }
  Device device() const { return device_; }
  void synchronize() const;

 private:
  cudaStream_t handle_ = nullptr;
  Device device_;
};

// Whether an event records a time: most events only order streams, and an event without timing
// costs less to record and wait on (cudaEventDisableTiming).
enum class EventTiming { off, on };

// An owned CUDA event. elapsed_ms needs two events made with EventTiming::on.
class Event {
 public:
  explicit Event(Device device, EventTiming timing = EventTiming::off);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  void wait(cudaStream_t stream) const;  // makes `stream` wait for this event, host returns at once
  void synchronize() const;              // blocks the host until the event has completed
  bool query() const;                    // true when the recorded work has completed
  // Milliseconds between two recorded events; both must have completed.
  static float elapsed_ms(const Event& start, const Event& end);
  cudaEvent_t handle() const { return handle_; }

 private:
  cudaEvent_t handle_ = nullptr;
  Device device_;
  EventTiming timing_ = EventTiming::off;
};

// The stream that ops on `device` are issued on: the device's compute stream, unless a
// StreamGuard on this thread says otherwise.
cudaStream_t current_stream(Device device);
// The device's own compute stream, created on first use and kept for the process.
cudaStream_t compute_stream(Device device);

// Makes `later` wait for the work issued to `earlier` (a stream of `earlier_device`) so far: an
// event recorded on one, waited on by the other, possibly of another device; the host does not
// wait. A no-op when they are the same stream.
void order_after(cudaStream_t later, cudaStream_t earlier, Device earlier_device);
// For memory that recorded a stream: streams of cuda::Stream objects are numbered when made and
// forgotten when destroyed (after their work is done); any other stream (the compute streams,
// the default stream) counts as living for the process. order_after_if_alive() orders `later`
// after `earlier` only if `earlier` is still the stream that stream_generation() numbered when
// it was recorded — a destroyed one has nothing left to wait for, and a handle reused by a later
// stream has another number — checking and ordering under one lock, so that the stream cannot be
// destroyed in between. Returns whether it ordered.
std::uint64_t stream_generation(cudaStream_t stream);
bool order_after_if_alive(cudaStream_t later, cudaStream_t earlier, Device earlier_device, std::uint64_t generation);

// Makes ops on the stream's device issue on `stream` for the guard's lifetime (this thread).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  [[maybe_unused]] cudaStream_t previous_;  // unused in a build without CUDA, where the guard does nothing
};

// Note [a rank's device]
// The CUDA runtime's current device belongs to a host thread, and since CUDA 12 making a device
// current creates its primary context (a few hundred MB of GPU memory). A process that works on
// one GPU — a data-parallel rank on cuda:r — calls set_device once, so that its ops' DeviceGuards
// find that device current and switch nothing. A DeviceGuard switches back on leaving only to a
// device this process has made current before (set_device or a guard): a thread that starts on
// the default device 0 and works on cuda:r stays on cuda:r, and rank r never touches GPU 0, as
// PyTorch's c10::cuda::MaybeSetDevice never switches to a device without a primary context.
// Ember keeps the record itself: a context a program made on its own, behind ember's back, is not
// known to it. Any other thread that calls CUDA for the rank (a loader's) calls set_device too.
void set_device(Device device);

// Makes `device` the CUDA runtime's current device for the guard's lifetime, and then switches
// back if the previous device was in use (Note [a rank's device]).
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  [[maybe_unused]] int previous_ = -1;  // unused in a build without CUDA
};

// Waits for all work on the device's current stream, then reports any error that a kernel
// raised on the device since the last check (see check_device_errors).
void synchronize(Device device);

// Kernels that find bad input (a target out of range, a non-finite loss) cannot throw: they
// write a record into this per-device slot in device memory, at a fixed address so that a kernel
// that writes it can be captured in a CUDA graph (Note [graph-safe kernels] in core/cuda/graph.h).
// Device memory rather than mapped host memory: the record is written with atomics, and atomics
// on host memory over PCIe depend on the platform.
kernels::DeviceErrorRecord* device_error_record(Device device);
// Copies the record to the host on the device's current stream and waits for that stream (the
// natural synchronization points: a copy to the host, synchronize()), then throws the recorded
// error and clears it if one is pending. Work on other streams is seen once it has finished.
void check_device_errors(Device device);

// Sync debug mode: every launch is followed by a synchronization, so a failing kernel is reported
// at its cause. Deterministic mode: cuDNN restricted to deterministic algorithms, so one seed
// gives one result on the GPU too. Both start from the environment (EMBER_SYNC_DEBUG=1,
// EMBER_DETERMINISTIC=1; Note [environment flags] in base/env.h); the setters override it.
bool sync_debug();
void set_sync_debug(bool on);
bool deterministic();
void set_deterministic(bool on);
// TF32: f32 matmuls, linear layers and convolutions on CUDA may round their inputs to TF32 (10
// mantissa bits) on tensor cores — cuBLAS, cuBLASLt and cuDNN alike (Note [cuDNN math] in
// kernels/conv.h). Off by default (EMBER_ALLOW_TF32=1 turns it on), so that f32 on the GPU is f32
// as on the CPU. PyTorch has two switches, torch.backends.cuda.matmul.allow_tf32 (off) and
// torch.backends.cudnn.allow_tf32 (on); ember has one, off for both: TF32 is a choice to make
// knowingly, and one switch cannot leave a model half in TF32. bf16 and f16 are not affected.
bool allow_tf32();
void set_allow_tf32(bool on);

}  // namespace ember::cuda

namespace ember {
// Waits for all work issued to `device` (a no-op for the CPU) and reports device-side errors.
void synchronize(Device device);
}  // namespace ember
