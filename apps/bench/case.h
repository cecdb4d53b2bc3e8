// bench_kernels' cases: one kernel version at one size on one device (Case), the buffers of a
// device (Arena), and tables of cases over shared buffers (Entry, add_table), each case's call
// written once for both devices. The families' tables are in apps/bench/*_cases.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/dispatch.h"
#include "core/tensor/tensor.h"

// A kernel call written once for both devices: kernels::cpu::fn(args...) on the CPU,
// kernels::cuda::fn(args..., stream) on a CUDA device, through the dispatch seam (Note [device
// dispatch] in core/ops/dispatch.h: the CUDA lambda is generic, so a build without CUDA never
// instantiates it). Kernels whose twins take different arguments (a workspace, an error record)
// call ember::ext::dispatch_device with two lambdas instead.
#define EMBER_BENCH_CALL(device, fn, ...)                      \
  ::ember::ext::dispatch_device(                               \
      device, [&] { ::ember::kernels::cpu::fn(__VA_ARGS__); }, \
      [&](auto bench_stream) { ::ember::kernels::cuda::fn(__VA_ARGS__, bench_stream); })

namespace ember::apps::bench {

// One kernel version at one size on one device: how to run it (on input set r of several, so
// small sizes do not measure the cache), how to check it, and what it must move and compute.
struct Case {
  std::string family, version;
  bool in_use = true;
  Device device;
  std::string shape;
  double bytes = 0, flops = 0;
  int rotations = 1;
  std::function<void(int)> run;
  std::function<std::string()> check;  // empty result: correct
};

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float lo = -2.0f, float hi = 2.0f);

// Largest |a − b| beyond atol + rtol·|b|, as a message; empty when all are within.
std::string compare(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol);

// Runs the kernel once on set 0 with the output poisoned, and compares with `want`.
std::function<std::string()> checker(std::function<void(int)> run, Tensor out, std::vector<float> want, double atol,
                                     double rtol);

inline float* f32(const Tensor& t) { return t.raw<float>(); }

// Buffers for the cases of one device: copies of host data, one per rotation.
class Arena {
 public:
  Arena(Device device, std::size_t flush_bytes) : device_(device), flush_(flush_bytes) {}
  Device device() const { return device_; }
  // How many input sets make the working set exceed the cache flush size.
  int rotations(std::size_t working_set) const {
    if (working_set == 0) return 1;
    return static_cast<int>(std::clamp<std::size_t>(flush_ / working_set + 1, 1, 256));
  }
  // A copy on this device; outputs are copies of the host's zeros. Every page is written here: a
  // fresh page's first write costs a page fault, which would otherwise be timed as the kernel's
  // when each timed run writes a set that the warm-up did not reach.
  Tensor copy(const Tensor& host) const { return host.to(device_).clone(); }
  template <class T>
  std::vector<Tensor> copies(const std::vector<T>& host, const Shape& shape, int n) const {
    const Tensor h = from_vector(host, shape);
    std::vector<Tensor> out;
    for (int i = 0; i < n; ++i) out.push_back(copy(h));
    return out;
  }
  // n sets of a table's buffers (below): each its own copy of those that `per_set()` lists, and
  // one copy for all of those that `shared()` lists (constants, counters, workspaces).
  template <class Io>
  std::vector<Io> sets(Io host, int n) const {
    if constexpr (requires { host.shared(); })
      for (Tensor* t : host.shared()) *t = copy(*t);
    std::vector<Io> out(static_cast<std::size_t>(n), host);
    for (Io& set : out)
      for (Tensor* t : set.per_set()) *t = copy(*t);
    return out;
  }

 private:
  Device device_;
  std::size_t flush_;
};

// One case of a table. `Io` is one input set of the table's buffers (tensors, and the sizes);
// `run` is the call to time, given the device, so that it is written once for both. The table
// is built on the host (its inputs, and zeros for its outputs), where the family's in-use entry
// run on the CPU gives the result every other entry (and every CUDA one) is checked against.
template <class Io>
struct Entry {
  std::string family;
  double bytes;        // what the kernel must move: each input read once, each output written once
  Tensor Io::*output;  // the result the check compares
  double atol, rtol;
  std::function<void(Device, const Io&)> run;
  std::string shape = {};  // empty: the table's
  std::string version = "v1";
  bool in_use = true;
  double flops = 0;
};

// Appends the table's cases on the arena's device, over `rotations` copies of `host`'s buffers.
template <class Io>
void add_table(std::vector<Case>& cases, const Arena& arena, Io host, int rotations, const std::string& shape,
               const std::vector<Entry<Io>>& table) {
  const Device d = arena.device();
  auto sets = std::make_shared<std::vector<Io>>(arena.sets(host, rotations));
  auto reference = std::make_shared<Io>(std::move(host));
  for (const Entry<Io>& e : table) {
    Case c{e.family,
           e.version,
           e.in_use,
           d,
           e.shape.empty() ? shape : e.shape,
           e.bytes,
           e.flops,
           rotations,
           [sets, d, run = e.run](int r) { run(d, (*sets)[r]); },
           nullptr};
    // On the CPU the in-use version is the reference; any other is checked against it.
    if (d.is_cuda() || !e.in_use) {
      auto twin = std::find_if(table.begin(), table.end(),
                               [&](const Entry<Io>& t) { return t.in_use && t.family == e.family; });
      c.check = [cpu = (twin == table.end() ? e : *twin).run, reference, sets, run = c.run, output = e.output,
                 atol = e.atol, rtol = e.rtol] {
        Tensor want = (*reference).*output, got = (*sets)[0].*output;
        want.fill_(std::numeric_limits<double>::quiet_NaN());  // what a kernel leaves alone stays NaN
        cpu(Device::cpu(), *reference);
        got.fill_(std::numeric_limits<double>::quiet_NaN());
        run(0);
        return compare(got.to(DType::f32).to_vector<float>(), want.to(DType::f32).to_vector<float>(), atol, rtol);
      };
    }
    cases.push_back(std::move(c));
  }
}

// The families, by table (the *_cases.cpp files).
void add_elementwise(std::vector<Case>& cases, const Arena& arena, std::size_t n);
void add_rowwise(std::vector<Case>& cases, const Arena& arena, std::size_t n);
void add_optimizers(std::vector<Case>& cases, const Arena& arena, std::size_t n);
void add_gemms(std::vector<Case>& cases, const Arena& arena, bool quick);
void add_convolutions(std::vector<Case>& cases, const Arena& arena);
void add_attention(std::vector<Case>& cases, const Arena& arena, bool quick);
void add_layer_norm(std::vector<Case>& cases, const Arena& arena, bool quick);
// Peak host memory of the fused and reference attention, forward and backward, at L = S = 256,
// 1,024 and 4,096 (quick: 64 and 128) on the CPU: rows with time_us and peak_mb.
void add_attention_memory(std::vector<nlohmann::json>& rows, bool quick);
void add_broken(std::vector<Case>& cases, const Arena& arena);

}  // namespace ember::apps::bench
