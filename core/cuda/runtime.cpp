// The CUDA runtime glue: availability probing, streams, events, guards, synchronization, the
// device-side error records and the CUDA error throwers. Compiled in every build; without the
// CUDA backend each query reports "not available" and nothing else is reachable.
#include "core/cuda/runtime.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "base/config.h"
#include "base/env.h"
#include "base/error.h"
#include "core/cuda/kernel_errors.h"
#include "kernels/common.h"
#include "kernels/conv.h"
#include "kernels/gemm.h"

#if EMBER_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

namespace ember::detail {

#if EMBER_WITH_CUDA
void throw_cuda_error(int code, const char* call, const char* file, int line) {
  const auto status = static_cast<cudaError_t>(code);
  cudaGetLastError();  // clear a non-sticky error so that later calls are not blamed for it
  std::string message = concat("CUDA error: ", call, " failed at ", file, ":", line, ": ", cudaGetErrorName(status),
                               " (", cudaGetErrorString(status), ")");
  if (status == cudaErrorMemoryAllocation) throw OutOfMemoryError(message);
  throw CudaError(message);
}
void log_cuda_error(int code, const char* call, const char* file, int line) noexcept {
  const auto status = static_cast<cudaError_t>(code);
  std::fprintf(stderr, "ember: warning: CUDA error ignored in cleanup: %s failed at %s:%d: %s\n", call, file, line,
               cudaGetErrorString(status));
}
void throw_cublas_error(int status, const char* call, const char* file, int line) {
  throw CudaError(concat("cuBLAS error: ", call, " failed at ", file, ":", line, ": ",
                         cublasGetStatusName(static_cast<cublasStatus_t>(status)), " (",
                         cublasGetStatusString(static_cast<cublasStatus_t>(status)), ")"));
}
#else
void throw_cuda_error(int code, const char* call, const char* file, int line) {
  throw CudaError(concat("CUDA error ", code, ": ", call, " failed at ", file, ":", line));
}
void log_cuda_error(int code, const char* call, const char* file, int line) noexcept {
  std::fprintf(stderr, "ember: warning: CUDA error %d ignored in cleanup: %s at %s:%d\n", code, call, file, line);
}
void throw_cublas_error(int status, const char* call, const char* file, int line) {
  throw CudaError(concat("cuBLAS error ", status, ": ", call, " failed at ", file, ":", line));
}
#endif

}  // namespace ember::detail

namespace ember::cuda {

void require_cuda_device(Device device, const char* caller) {
  EMBER_CHECK(device.is_cuda(), DeviceError, caller, ": expected a CUDA device, but got ", device,
              " (streams, events and the device-side error record belong to a CUDA device: pass cuda:N)");
}

void require_usable_device(Device device) {
  require_cuda_device(device, "require_usable_device");
  if (!is_available())
    throw DeviceError(detail::concat("cannot use ", device, ": ", unavailable_reason(),
                                     ". Use Device::best() to fall back to the CPU, or pass --device cpu"));
  if (device.index < 0 || device.index >= device_count())
    throw DeviceError(detail::concat("cannot use ", device, ": only ", device_count(),
                                     " CUDA device(s) found (cuda:0 to cuda:", device_count() - 1, ")"));
}

#if EMBER_WITH_CUDA
namespace {

constexpr int kMaxDevices = 64;

std::string version_string(int v) { return detail::concat(v / 1000, ".", (v % 1000) / 10); }

struct Availability {
  int count = 0;
  std::string reason;  // empty when usable
};

const Availability& availability() {
  static const Availability result = [] {
    Availability a;
    int driver = 0, runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
      a.reason = "CUDA driver not found (cudaDriverGetVersion reports none; is the NVIDIA driver installed?)";
      return a;
    }
    const cudaError_t status = cudaGetDeviceCount(&a.count);
    cudaGetLastError();
    if (status == cudaErrorInsufficientDriver || (status != cudaSuccess && driver < runtime)) {
      a.reason = detail::concat("the CUDA driver (supports CUDA ", version_string(driver),
                                ") is older than ember's CUDA runtime ", version_string(runtime),
                                ": update the NVIDIA driver");
      a.count = 0;
    } else if (status == cudaErrorNoDevice || (status == cudaSuccess && a.count == 0)) {
      a.reason = detail::concat("no CUDA device found (driver for CUDA ", version_string(driver), " is present)");
      a.count = 0;
    } else if (status != cudaSuccess) {
      a.reason = detail::concat("CUDA initialization failed: ", cudaGetErrorName(status), " (",
                                cudaGetErrorString(status), ")");
      a.count = 0;
    }
    if (a.count > kMaxDevices) a.count = kMaxDevices;
    return a;
  }();
  return result;
}

// The environment's settings, handed to kernels/ once, before the first CUDA work (and before a
// setter, so that the setter wins).
void apply_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    kernels::cuda::set_sync_debug(env_flag("EMBER_SYNC_DEBUG", false));
    kernels::cuda::set_deterministic(env_flag("EMBER_DETERMINISTIC", false));
    kernels::cuda::set_allow_tf32(env_flag("EMBER_ALLOW_TF32", false));
  });
}

void check_index(Device device, const char* caller) {
  require_cuda_device(device, caller);
  if (device.index < 0 || device.index >= device_count()) require_usable_device(device);
}

struct PerDevice {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  kernels::DeviceErrorRecord* error_device = nullptr;  // device memory, written by kernels
  kernels::DeviceErrorRecord* error_mirror = nullptr;  // pinned host memory: the record's copies
};
std::array<PerDevice, kMaxDevices> g_devices;

// Creates the device's compute stream and error record on first use. They live as long as the
// process: destroying them at exit could run after the CUDA context is torn down.
PerDevice& per_device(Device device, const char* caller) {
  check_index(device, caller);
  apply_environment();
  PerDevice& d = g_devices[static_cast<std::size_t>(device.index)];
  std::call_once(d.once, [&] {
    DeviceGuard guard(device);
    CUDA_CHECK(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
    void* host = nullptr;
    CUDA_CHECK(cudaHostAlloc(&host, sizeof(kernels::DeviceErrorRecord), cudaHostAllocPortable));
    d.error_mirror = new (host) kernels::DeviceErrorRecord{};
    void* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, sizeof(kernels::DeviceErrorRecord)));
    d.error_device = static_cast<kernels::DeviceErrorRecord*>(dev);
    CUDA_CHECK(cudaMemcpyAsync(d.error_device, d.error_mirror, sizeof(kernels::DeviceErrorRecord),
                               cudaMemcpyHostToDevice, d.stream));
    CUDA_CHECK(cudaStreamSynchronize(d.stream));
  });
  return d;
}

thread_local std::array<cudaStream_t, kMaxDevices> t_stream_override{};

// The live streams of cuda::Stream objects, numbered, for stream_alive().
struct StreamRegistry {
  std::mutex mutex;
  std::unordered_map<cudaStream_t, std::uint64_t> live;
  std::uint64_t next = 1;
};
StreamRegistry& stream_registry() {
  static StreamRegistry* registry = new StreamRegistry();  // never destroyed: streams may outlive statics
  return *registry;
}
// Streams ember did not make with cuda::Stream (the compute streams, the default stream) are
// taken to live for the process.
constexpr std::uint64_t kProcessLifetime = ~std::uint64_t{0};

}  // namespace

bool built_with_cuda() { return true; }
bool is_available() { return availability().count > 0; }
int device_count() { return availability().count; }
std::string unavailable_reason() { return availability().reason; }

std::string device_description(int index) {
  check_index(Device::cuda(index), "cuda::device_description");
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return detail::concat(prop.name, " (compute capability ", prop.major, ".", prop.minor, ", ",
                        prop.totalGlobalMem / (1024 * 1024), " MiB, ", prop.multiProcessorCount, " SMs)");
}

Stream::Stream(Device device) : device_(device) {
  check_index(device, "cuda::Stream");
  DeviceGuard guard(device);
  CUDA_CHECK(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking));
  StreamRegistry& r = stream_registry();
  std::lock_guard lock(r.mutex);
  r.live[handle_] = r.next++;
}
Stream::~Stream() {
  if (!handle_) return;
  // Memory that recorded this stream stops waiting for it once it is forgotten, so its work must
  // be done first; a free that orders itself meanwhile holds the lock and sees it alive.
  CUDA_CHECK_NOTHROW(cudaStreamSynchronize(handle_));
  {
    StreamRegistry& r = stream_registry();
    std::lock_guard lock(r.mutex);
    r.live.erase(handle_);
  }
  CUDA_CHECK_NOTHROW(cudaStreamDestroy(handle_));
}

void order_after(cudaStream_t later, cudaStream_t earlier, Device earlier_device) {
  if (later == earlier) return;
  DeviceGuard guard(earlier_device);  // an event is recorded on a stream of its own device
  cudaEvent_t event = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(event, earlier);
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(later, event, 0) : recorded;
  CUDA_CHECK_NOTHROW(cudaEventDestroy(event));  // released once the wait is satisfied
  CUDA_CHECK(waited);
}

std::uint64_t stream_generation(cudaStream_t stream) {
  StreamRegistry& r = stream_registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.live.find(stream);
  return it == r.live.end() ? kProcessLifetime : it->second;
}

bool order_after_if_alive(cudaStream_t later, cudaStream_t earlier, Device earlier_device, std::uint64_t generation) {
  if (generation == kProcessLifetime) {
    order_after(later, earlier, earlier_device);
    return true;
  }
  StreamRegistry& r = stream_registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.live.find(earlier);
  if (it == r.live.end() || it->second != generation) return false;
  order_after(later, earlier, earlier_device);
  return true;
}
void Stream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(handle_)); }

Event::Event(Device device, EventTiming timing) : device_(device), timing_(timing) {
  check_index(device, "cuda::Event");
  DeviceGuard guard(device);
  CUDA_CHECK(cudaEventCreateWithFlags(&handle_, timing == EventTiming::on ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (handle_) CUDA_CHECK_NOTHROW(cudaEventDestroy(handle_));
}
void Event::record(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(handle_, stream)); }
void Event::wait(cudaStream_t stream) const { CUDA_CHECK(cudaStreamWaitEvent(stream, handle_, 0)); }
void Event::synchronize() const { CUDA_CHECK(cudaEventSynchronize(handle_)); }
bool Event::query() const {
  const cudaError_t status = cudaEventQuery(handle_);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  CUDA_CHECK(status);
  return true;
}
float Event::elapsed_ms(const Event& start, const Event& end) {
  EMBER_CHECK(start.timing_ == EventTiming::on && end.timing_ == EventTiming::on, ValueError,
              "cuda::Event::elapsed_ms: both events must be made with EventTiming::on (events order streams "
              "without timing by default)");
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.handle_, end.handle_));
  return ms;
}

cudaStream_t compute_stream(Device device) { return per_device(device, "cuda::compute_stream").stream; }

cudaStream_t current_stream(Device device) {
  check_index(device, "cuda::current_stream");
  cudaStream_t s = t_stream_override[static_cast<std::size_t>(device.index)];
  return s ? s : compute_stream(device);
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()) {
  auto& slot = t_stream_override[static_cast<std::size_t>(device_.index)];
  previous_ = slot;
  slot = stream.handle();
}
StreamGuard::~StreamGuard() { t_stream_override[static_cast<std::size_t>(device_.index)] = previous_; }

namespace {
// The devices this process has made current (Note [a rank's device]), one bit each.
std::atomic<std::uint64_t> g_devices_made_current{0};
void made_current(int device) { g_devices_made_current.fetch_or(std::uint64_t{1} << device); }
bool was_made_current(int device) { return (g_devices_made_current.load() >> device) & 1u; }
}  // namespace

void set_device(Device device) {
  check_index(device, "cuda::set_device");
  CUDA_CHECK(cudaSetDevice(device.index));
  made_current(device.index);
}

DeviceGuard::DeviceGuard(Device device) {
  if (!device.is_cuda()) return;
  int current = 0;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) {
    CUDA_CHECK(cudaSetDevice(device.index));
    if (was_made_current(current)) previous_ = current;  // else stay: switching back would make a context
  }
  made_current(device.index);
}
DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
}

void synchronize(Device device) {
  check_index(device, "cuda::synchronize");
  DeviceGuard guard(device);
  CUDA_CHECK(cudaDeviceSynchronize());
  check_device_errors(device);
}

kernels::DeviceErrorRecord* device_error_record(Device device) {
  return per_device(device, "cuda::device_error_record").error_device;
}

void check_device_errors(Device device) {
  PerDevice& d = per_device(device, "cuda::check_device_errors");
  const DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  constexpr std::size_t bytes = sizeof(kernels::DeviceErrorRecord);
  CUDA_CHECK(cudaMemcpyAsync(d.error_mirror, d.error_device, bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (d.error_mirror->code == 0) return;
  const kernels::DeviceErrorRecord found = *d.error_mirror;
  *d.error_mirror = kernels::DeviceErrorRecord{};
  CUDA_CHECK(cudaMemcpyAsync(d.error_device, d.error_mirror, bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  throw_kernel_error(found, device);
}

bool sync_debug() {
  apply_environment();
  return kernels::cuda::sync_debug();
}
void set_sync_debug(bool on) {
  apply_environment();
  kernels::cuda::set_sync_debug(on);
}
bool deterministic() {
  apply_environment();
  return kernels::cuda::deterministic();
}
void set_deterministic(bool on) {
  apply_environment();
  kernels::cuda::set_deterministic(on);
}
bool allow_tf32() {
  apply_environment();
  return kernels::cuda::allow_tf32();
}
void set_allow_tf32(bool on) {
  apply_environment();
  kernels::cuda::set_allow_tf32(on);
}

#else  // built without CUDA

namespace {
[[noreturn]] void no_cuda() {
  throw DeviceError("ember was built without CUDA (EMBER_CUDA=OFF): use the CPU (Device::best() or --device cpu)");
}
}  // namespace

bool built_with_cuda() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "ember was built without CUDA (EMBER_CUDA=OFF)"; }
std::string device_description(int) { no_cuda(); }
Stream::Stream(Device device) : device_(device) { no_cuda(); }
Stream::~Stream() = default;
void Stream::synchronize() const { no_cuda(); }
Event::Event(Device device, EventTiming timing) : device_(device), timing_(timing) { no_cuda(); }
Event::~Event() = default;
void Event::record(cudaStream_t) { no_cuda(); }
void Event::wait(cudaStream_t) const { no_cuda(); }
void Event::synchronize() const { no_cuda(); }
bool Event::query() const { no_cuda(); }
float Event::elapsed_ms(const Event&, const Event&) { no_cuda(); }
cudaStream_t compute_stream(Device device) {
  require_cuda_device(device, "cuda::compute_stream");
  no_cuda();
}
cudaStream_t current_stream(Device device) {
  require_cuda_device(device, "cuda::current_stream");
  no_cuda();
}
void order_after(cudaStream_t, cudaStream_t, Device) { no_cuda(); }
std::uint64_t stream_generation(cudaStream_t) { return 0; }
bool order_after_if_alive(cudaStream_t, cudaStream_t, Device, std::uint64_t) { return false; }
StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()), previous_(nullptr) {}
StreamGuard::~StreamGuard() = default;
void set_device(Device) { no_cuda(); }
DeviceGuard::DeviceGuard(Device) {}
DeviceGuard::~DeviceGuard() = default;
void synchronize(Device) { no_cuda(); }
kernels::DeviceErrorRecord* device_error_record(Device device) {
  require_cuda_device(device, "cuda::device_error_record");
  no_cuda();
}
void check_device_errors(Device) {}
bool sync_debug() { return false; }
void set_sync_debug(bool) {}
bool deterministic() { return false; }
void set_deterministic(bool) {}
bool allow_tf32() { return false; }
void set_allow_tf32(bool) {}

#endif

}  // namespace ember::cuda

namespace ember {
void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device);
}
}  // namespace ember
