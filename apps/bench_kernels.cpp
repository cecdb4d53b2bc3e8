// bench_kernels: every kernel family on the CPU and on CUDA over a sweep of sizes, against
// ceilings measured in the same run (memcpy / a device-to-device copy for bandwidth, OpenBLAS /
// cuBLAS SGEMM for arithmetic). Each version is checked against the CPU twin on the benchmark's
// own inputs before it is timed; a wrong one is refused, not timed. See docs/benchmarking.md.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>

#include "apps/common/program.h"
#include "core/base/config.h"
#include "core/cuda/profile.h"
#include "core/cuda/runtime.h"
#include "core/io/serialize.h"
#include "core/ops/dispatch.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/bias_activation.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/layout.h"
#include "kernels/optim.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace ember;
using Clock = std::chrono::steady_clock;
namespace kc = ember::kernels::cpu;

namespace {

// ---- the cases ---------------------------------------------------------------------------------

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

struct Settings {
  std::string device = "all", filter, json;
  std::vector<std::size_t> sizes;
  int repeat = 25;
  bool include_broken = false;
};

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Largest |a − b| beyond atol + rtol·|b|, as a message; empty when all are within.
std::string compare(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol) {
  if (got.size() != want.size()) return "wrong number of outputs";
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (!(std::abs(a - b) <= atol + rtol * std::abs(b))) {
      std::ostringstream out;
      out << "element " << i << " is " << a << ", the CPU twin gives " << b;
      return out.str();
    }
  }
  return "";
}

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
  template <class T>
  std::vector<Tensor> copies(const std::vector<T>& host, const Shape& shape, int n) const {
    const Tensor h = from_vector(host, shape);
    std::vector<Tensor> out;
    for (int i = 0; i < n; ++i) out.push_back(h.to(device_).clone());
    return out;
  }
  std::vector<Tensor> outputs(const Shape& shape, DType dtype, int n) const {
    std::vector<Tensor> out;
    // Touched once here: a fresh page's first write costs a page fault, which would otherwise be
    // timed as the kernel's when each timed run writes a set that the warm-up did not reach.
    for (int i = 0; i < n; ++i) out.push_back(zeros(shape, {.dtype = dtype, .device = device_}));
    return out;
  }

 private:
  Device device_;
  std::size_t flush_;
};

// Runs cpu() or cuda(stream) on the case's device (Note [device dispatch] in core/ops/dispatch.h).
template <class Cpu, class Cuda>
void on(Device d, Cpu&& cpu, Cuda&& cuda) {
  ext::dispatch_device(d, std::forward<Cpu>(cpu), std::forward<Cuda>(cuda));
}

// Runs the kernel once on set 0 with the output poisoned, and compares with `want`.
std::function<std::string()> checker(std::function<void(int)> run, Tensor out, std::vector<float> want, double atol,
                                     double rtol) {
  return [run, out, want, atol, rtol]() mutable {
    out.fill_(std::numeric_limits<double>::quiet_NaN());
    run(0);
    return compare(out.to(DType::f32).to_vector<float>(), want, atol, rtol);
  };
}

// Elementwise-shaped families: one f32 input (or two), one f32 output, n elements.
void add_elementwise(std::vector<Case>& cases, const Arena& arena, std::size_t n) {
  const Device d = arena.device();
  const bool gpu = d.is_cuda();
  const Shape shape{static_cast<std::int64_t>(n)};
  const auto xh = random_vector(n, n), yh = random_vector(n, n + 1, 0.0f, 1.0f);
  const int rot = arena.rotations(12 * n);
  auto x = std::make_shared<std::vector<Tensor>>(arena.copies(xh, shape, rot));
  auto y = std::make_shared<std::vector<Tensor>>(arena.copies(yh, shape, rot));
  auto out = std::make_shared<std::vector<Tensor>>(arena.outputs(shape, DType::f32, rot));
  const std::string label = "n=" + std::to_string(n);
  // Transcendentals may differ by a few ulp between CUDA's and glibc's math (see
  // tests/cuda/test_cuda_kernels.cpp); plain arithmetic by one rounding.
  auto add = [&](const std::string& family, double bytes, std::function<void(int)> run, std::vector<float> want,
                 double rtol, std::string version = "v1", bool in_use = true) {
    Case c{family, version, in_use, d, label, bytes, 0, rot, run, nullptr};
    if (gpu || !in_use) c.check = checker(run, (*out)[0], std::move(want), 1e-6, rtol);
    cases.push_back(std::move(c));
  };
  for (const auto& [unary_op, name] :
       {std::pair{kernels::UnaryOp::relu, "relu_forward"}, std::pair{kernels::UnaryOp::exp, "exp"},
        std::pair{kernels::UnaryOp::tanh, "tanh"}}) {
    const kernels::UnaryOp op = unary_op;  // (a structured binding; lambdas capture names)
    std::vector<float> want(n);
    kc::unary(op, xh.data(), want.data(), n);
    add(
        name, 8.0 * n,
        [=](int r) {
          on(
              d, [&] { kc::unary(op, (*x)[r].raw<float>(), (*out)[r].raw<float>(), n); },
              [&](auto stream) {
                kernels::cuda::unary(op, (*x)[r].raw<float>(), (*out)[r].raw<float>(), n, {}, stream);
              });
        },
        want, op == kernels::UnaryOp::relu ? 0.0 : 2e-6);
  }
  {
    std::vector<float> want(n);
    const kernels::OpArgs<float> affine_args{1.5f, -0.5f};
    kc::unary(kernels::UnaryOp::affine, xh.data(), want.data(), n, affine_args);
    add(
        "affine", 8.0 * n,
        [=](int r) {
          on(
              d,
              [&] {
                kc::unary(kernels::UnaryOp::affine, (*x)[r].raw<float>(), (*out)[r].raw<float>(), n, affine_args);
              },
              [&](auto stream) {
                kernels::cuda::unary(kernels::UnaryOp::affine, (*x)[r].raw<float>(), (*out)[r].raw<float>(), n,
                                     affine_args, stream);
              });
        },
        want, 1e-6);
    kc::binary(kernels::BinaryOp::add, xh.data(), yh.data(), want.data(), n);
    add(
        "binary_add", 12.0 * n,
        [=](int r) {
          on(
              d,
              [&] {
                kc::binary(kernels::BinaryOp::add, (*x)[r].raw<float>(), (*y)[r].raw<float>(), (*out)[r].raw<float>(),
                           n);
              },
              [&](auto stream) {
                kernels::cuda::binary(kernels::BinaryOp::add, (*x)[r].raw<float>(), (*y)[r].raw<float>(),
                                      (*out)[r].raw<float>(), n, stream);
              });
        },
        want, 1e-6);
    kc::activation_grad(kernels::ActivationGrad::relu, xh.data(), yh.data(), want.data(), n,
                        kernels::WriteMode::overwrite);
    add(
        "relu_backward", 12.0 * n,
        [=](int r) {
          on(
              d,
              [&] {
                kc::activation_grad(kernels::ActivationGrad::relu, (*x)[r].raw<float>(), (*y)[r].raw<float>(),
                                    (*out)[r].raw<float>(), n, kernels::WriteMode::overwrite);
              },
              [&](auto stream) {
                kernels::cuda::activation_grad(kernels::ActivationGrad::relu, (*x)[r].raw<float>(),
                                               (*y)[r].raw<float>(), (*out)[r].raw<float>(), n,
                                               kernels::WriteMode::overwrite, {}, stream);
              });
        },
        want, 0.0);
    const kernels::OpArgs<float> slope{0.01f, 0.0f};
    kc::unary(kernels::UnaryOp::leaky_relu, xh.data(), want.data(), n, slope);
    add(
        "leaky_relu_forward", 8.0 * n,
        [=](int r) {
          on(
              d,
              [&] { kc::unary(kernels::UnaryOp::leaky_relu, (*x)[r].raw<float>(), (*out)[r].raw<float>(), n, slope); },
              [&](auto stream) {
                kernels::cuda::unary(kernels::UnaryOp::leaky_relu, (*x)[r].raw<float>(), (*out)[r].raw<float>(), n,
                                     slope, stream);
              });
        },
        want, 1e-6);
    kc::activation_grad(kernels::ActivationGrad::leaky_relu, xh.data(), yh.data(), want.data(), n,
                        kernels::WriteMode::overwrite, slope);
    add(
        "leaky_relu_backward", 12.0 * n,
        [=](int r) {
          on(
              d,
              [&] {
                kc::activation_grad(kernels::ActivationGrad::leaky_relu, (*x)[r].raw<float>(), (*y)[r].raw<float>(),
                                    (*out)[r].raw<float>(), n, kernels::WriteMode::overwrite, slope);
              },
              [&](auto stream) {
                kernels::cuda::activation_grad(kernels::ActivationGrad::leaky_relu, (*x)[r].raw<float>(),
                                               (*y)[r].raw<float>(), (*out)[r].raw<float>(), n,
                                               kernels::WriteMode::overwrite, slope, stream);
              });
        },
        want, 1e-6);
    kc::activation_grad(kernels::ActivationGrad::tanh, xh.data(), yh.data(), want.data(), n,
                        kernels::WriteMode::overwrite);
    add(
        "tanh_backward", 12.0 * n,
        [=](int r) {
          on(
              d,
              [&] {
                kc::activation_grad(kernels::ActivationGrad::tanh, (*x)[r].raw<float>(), (*y)[r].raw<float>(),
                                    (*out)[r].raw<float>(), n, kernels::WriteMode::overwrite);
              },
              [&](auto stream) {
                kernels::cuda::activation_grad(kernels::ActivationGrad::tanh, (*x)[r].raw<float>(),
                                               (*y)[r].raw<float>(), (*out)[r].raw<float>(), n,
                                               kernels::WriteMode::overwrite, {}, stream);
              });
        },
        want, 1e-6);
    const kernels::OpArgs<float> exponent{1.5f, 0.0f};
    kc::unary(kernels::UnaryOp::pow, yh.data(), want.data(), n, exponent);
    add(
        "pow_scalar", 8.0 * n,
        [=](int r) {
          on(
              d, [&] { kc::unary(kernels::UnaryOp::pow, (*y)[r].raw<float>(), (*out)[r].raw<float>(), n, exponent); },
              [&](auto stream) {
                kernels::cuda::unary(kernels::UnaryOp::pow, (*y)[r].raw<float>(), (*out)[r].raw<float>(), n, exponent,
                                     stream);
              });
        },
        want, 2e-6);
    // Broadcasting: [n/64, 64] + [64], and the expand behind sum's and mean's backward.
    const std::size_t cols = 64, rows = std::max<std::size_t>(1, n / cols);
    kernels::BroadcastLayout layout;
    layout.ndim = 2;
    layout.out_shape[0] = static_cast<long long>(rows);
    layout.out_shape[1] = static_cast<long long>(cols);
    layout.a_stride[0] = static_cast<long long>(cols);
    layout.a_stride[1] = 1;
    layout.b_stride[0] = 0;
    layout.b_stride[1] = 1;
    std::vector<float> want_b(rows * cols);
    kc::binary_broadcast(kernels::BinaryOp::add, xh.data(), yh.data(), want_b.data(), layout);
    want_b.resize(n, std::numeric_limits<float>::quiet_NaN());  // the tail past rows·cols is not written
    add(
        "binary_broadcast_add", 8.0 * rows * cols,
        [=](int r) {
          on(
              d,
              [&] {
                kc::binary_broadcast(kernels::BinaryOp::add, (*x)[r].raw<float>(), (*y)[r].raw<float>(),
                                     (*out)[r].raw<float>(), layout);
              },
              [&](auto stream) {
                kernels::cuda::binary_broadcast(kernels::BinaryOp::add, (*x)[r].raw<float>(), (*y)[r].raw<float>(),
                                                (*out)[r].raw<float>(), layout, stream);
              });
        },
        want_b, 1e-6);
    kernels::BroadcastLayout rows_of_bias = layout;
    rows_of_bias.a_stride[0] = 0;
    kc::expand(yh.data(), want_b.data(), rows_of_bias, 1.0f);
    add(
        "expand", 4.0 * rows * cols,
        [=](int r) {
          on(
              d, [&] { kc::expand((*y)[r].raw<float>(), (*out)[r].raw<float>(), rows_of_bias, 1.0f); },
              [&](auto stream) {
                kernels::cuda::expand((*y)[r].raw<float>(), (*out)[r].raw<float>(), rows_of_bias, 1.0f, stream);
              });
        },
        want_b, 0.0);
    // The strided block copy behind cat: the left half of each row of [n/64, 64] into [n/64, 32].
    std::vector<float> want_c(n, std::numeric_limits<float>::quiet_NaN());
    kc::copy_2d(xh.data(), cols, want_c.data(), cols / 2, rows, cols / 2);
    add(
        "copy_2d", 4.0 * rows * cols,
        [=](int r) {
          on(
              d, [&] { kc::copy_2d((*x)[r].raw<float>(), cols, (*out)[r].raw<float>(), cols / 2, rows, cols / 2); },
              [&](auto stream) {
                kernels::cuda::copy_2d((*x)[r].raw<float>(), cols, (*out)[r].raw<float>(), cols / 2, rows, cols / 2,
                                       stream);
              });
        },
        want_c, 0.0);
    std::fill(want.begin(), want.end(), 0.25f);
    add(
        "fill", 4.0 * n,
        [=](int r) {
          on(
              d, [&] { kc::fill((*out)[r].raw<float>(), 0.25f, n); },
              [&](auto stream) { kernels::cuda::fill((*out)[r].raw<float>(), 0.25f, n, stream); });
        },
        want, 0.0);
  }
  {  // a dtype conversion, and the accuracy count over i64 predictions and i32 targets
    auto ints = std::make_shared<std::vector<Tensor>>(arena.outputs(shape, DType::i32, rot));
    std::vector<std::int32_t> want_i(n);
    kc::cast(xh.data(), want_i.data(), n);
    std::vector<float> want(want_i.begin(), want_i.end());
    Case cast{"cast_f32_i32",
              "v1",
              true,
              d,
              label,
              8.0 * n,
              0,
              rot,
              [=](int r) {
                on(
                    d, [&] { kc::cast((*x)[r].raw<float>(), (*ints)[r].raw<std::int32_t>(), n); },
                    [&](auto stream) {
                      kernels::cuda::cast((*x)[r].raw<float>(), (*ints)[r].raw<std::int32_t>(), n, stream);
                    });
              },
              nullptr};
    if (gpu) cast.check = checker(cast.run, (*ints)[0], want, 0.0, 0.0);
    cases.push_back(cast);
    std::vector<std::int64_t> pred(n);
    std::vector<std::int32_t> target(n);
    for (std::size_t i = 0; i < n; ++i) {
      pred[i] = static_cast<std::int64_t>(i % 10);
      target[i] = static_cast<std::int32_t>((i * 7) % 10);
    }
    auto pt = std::make_shared<std::vector<Tensor>>(arena.copies(pred, shape, rot));
    auto tt = std::make_shared<std::vector<Tensor>>(arena.copies(target, shape, rot));
    auto count = std::make_shared<std::vector<Tensor>>(arena.outputs({1}, DType::i64, rot));
    std::int64_t want_count = 0;
    kc::count_equal(pred.data(), target.data(), &want_count, n);
    Case eq{"count_equal",
            "v1",
            true,
            d,
            label,
            12.0 * n,
            0,
            rot,
            [=](int r) {
              on(
                  d,
                  [&] {
                    kc::count_equal((*pt)[r].raw<std::int64_t>(), (*tt)[r].raw<std::int32_t>(),
                                    (*count)[r].raw<std::int64_t>(), n);
                  },
                  [&](auto stream) {
                    kernels::cuda::count_equal((*pt)[r].raw<std::int64_t>(), (*tt)[r].raw<std::int32_t>(),
                                               (*count)[r].raw<std::int64_t>(), n, stream);
                  });
            },
            nullptr};
    if (gpu) eq.check = checker(eq.run, (*count)[0], {static_cast<float>(want_count)}, 0.0, 0.0);
    cases.push_back(eq);
  }
  {  // uint8 pixels → f32, the data pipeline's normalization
    std::vector<std::uint8_t> pixels(n);
    for (std::size_t i = 0; i < n; ++i) pixels[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 13);
    auto px = std::make_shared<std::vector<Tensor>>(arena.copies(pixels, shape, rot));
    std::vector<float> want(n);
    kc::normalize_u8(pixels.data(), want.data(), n, 0.1307f, 0.3081f);
    add(
        "normalize_u8", 5.0 * n,
        [=](int r) {
          on(
              d, [&] { kc::normalize_u8((*px)[r].raw<std::uint8_t>(), (*out)[r].raw<float>(), n, 0.1307f, 0.3081f); },
              [&](auto stream) {
                kernels::cuda::normalize_u8((*px)[r].raw<std::uint8_t>(), (*out)[r].raw<float>(), n, 0.1307f, 0.3081f,
                                            stream);
              });
        },
        want, 1e-6);
  }
}

// Families over [rows, cols] layouts: reductions, softmax, cross-entropy, bias epilogues, copies.
void add_rowwise(std::vector<Case>& cases, const Arena& arena, std::size_t n) {
  const Device d = arena.device();
  const bool gpu = d.is_cuda();
  const std::size_t cols = 10, rows = std::max<std::size_t>(1, n / cols);
  const std::size_t m = rows * cols;
  const Shape shape{static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)};
  const auto xh = random_vector(m, m + 7, -6.0f, 6.0f), gh = random_vector(m, m + 8);
  std::vector<std::int32_t> th(rows);
  for (std::size_t r = 0; r < rows; ++r) th[r] = static_cast<std::int32_t>((r * 7) % cols);
  const int rot = arena.rotations(12 * m);
  auto x = std::make_shared<std::vector<Tensor>>(arena.copies(xh, shape, rot));
  auto g = std::make_shared<std::vector<Tensor>>(arena.copies(gh, shape, rot));
  auto t = std::make_shared<std::vector<Tensor>>(arena.copies(th, {static_cast<std::int64_t>(rows)}, rot));
  auto out = std::make_shared<std::vector<Tensor>>(arena.outputs(shape, DType::f32, rot));
  auto out_rows =
      std::make_shared<std::vector<Tensor>>(arena.outputs({static_cast<std::int64_t>(rows)}, DType::f32, rot));
  auto row_max =
      std::make_shared<std::vector<Tensor>>(arena.outputs({static_cast<std::int64_t>(rows)}, DType::f32, rot));
  auto row_sum =
      std::make_shared<std::vector<Tensor>>(arena.outputs({static_cast<std::int64_t>(rows)}, DType::f32, rot));
  const std::string label = std::to_string(rows) + "x" + std::to_string(cols);
  auto add = [&](const std::string& family, double bytes, std::function<void(int)> run, Tensor out0,
                 std::vector<float> want, double atol, double rtol, std::string shape_label = "") {
    Case c{family, "v1", true, d, shape_label.empty() ? label : shape_label, bytes, 0, rot, run, nullptr};
    if (gpu) c.check = checker(run, out0, std::move(want), atol, rtol);
    cases.push_back(std::move(c));
  };
  using kernels::SoftmaxKind;
  std::vector<float> want(m), want_rows(rows);
  kc::softmax_forward(SoftmaxKind::softmax, xh.data(), want.data(), rows, cols);
  const std::vector<float> y_host = want;
  add(
      "softmax_forward", 8.0 * m,
      [=](int r) {
        on(
            d,
            [&] {
              kc::softmax_forward(SoftmaxKind::softmax, (*x)[r].raw<float>(), (*out)[r].raw<float>(), rows, cols);
            },
            [&](auto stream) {
              kernels::cuda::softmax_forward(SoftmaxKind::softmax, (*x)[r].raw<float>(), (*out)[r].raw<float>(), rows,
                                             cols, stream);
            });
      },
      (*out)[0], want, 1e-6, 1e-5);
  auto y = std::make_shared<std::vector<Tensor>>(arena.copies(y_host, shape, rot));
  kc::softmax_backward(SoftmaxKind::softmax, gh.data(), y_host.data(), want.data(), rows, cols,
                       kernels::WriteMode::overwrite);
  add(
      "softmax_backward", 12.0 * m,
      [=](int r) {
        on(
            d,
            [&] {
              kc::softmax_backward(SoftmaxKind::softmax, (*g)[r].raw<float>(), (*y)[r].raw<float>(),
                                   (*out)[r].raw<float>(), rows, cols, kernels::WriteMode::overwrite);
            },
            [&](auto stream) {
              kernels::cuda::softmax_backward(SoftmaxKind::softmax, (*g)[r].raw<float>(), (*y)[r].raw<float>(),
                                              (*out)[r].raw<float>(), rows, cols, kernels::WriteMode::overwrite,
                                              stream);
            });
      },
      (*out)[0], want, 1e-6, 1e-5);
  kernels::DeviceErrorRecord record;
  std::vector<float> want_max(rows), want_sum(rows);
  kc::cross_entropy_forward(xh.data(), th.data(), want_rows.data(), want_max.data(), want_sum.data(), rows, cols,
                            &record);
  add(
      "cross_entropy_forward", 4.0 * m + 16.0 * rows,
      [=](int r) {
        on(
            d,
            [&] {
              kernels::DeviceErrorRecord e;
              kc::cross_entropy_forward((*x)[r].raw<float>(), (*t)[r].raw<std::int32_t>(), (*out_rows)[r].raw<float>(),
                                        (*row_max)[r].raw<float>(), (*row_sum)[r].raw<float>(), rows, cols, &e);
            },
            [&](auto stream) {
              kernels::cuda::cross_entropy_forward((*x)[r].raw<float>(), (*t)[r].raw<std::int32_t>(),
                                                   (*out_rows)[r].raw<float>(), (*row_max)[r].raw<float>(),
                                                   (*row_sum)[r].raw<float>(), rows, cols, cuda::device_error_record(d),
                                                   stream);
            });
      },
      (*out_rows)[0], want_rows, 1e-5, 1e-5);
  auto max_in = std::make_shared<std::vector<Tensor>>(arena.copies(want_max, {static_cast<std::int64_t>(rows)}, rot));
  auto sum_in = std::make_shared<std::vector<Tensor>>(arena.copies(want_sum, {static_cast<std::int64_t>(rows)}, rot));
  auto one = std::make_shared<Tensor>(full({1}, 1.0, {.device = d}));
  const float one_host = 1.0f, scale = 1.0f / static_cast<float>(rows);
  kc::cross_entropy_backward(xh.data(), th.data(), want_max.data(), want_sum.data(), &one_host, scale, want.data(),
                             rows, cols, kernels::WriteMode::overwrite);
  add(
      "cross_entropy_backward", 8.0 * m + 12.0 * rows,
      [=](int r) {
        on(
            d,
            [&] {
              kc::cross_entropy_backward((*x)[r].raw<float>(), (*t)[r].raw<std::int32_t>(), (*max_in)[r].raw<float>(),
                                         (*sum_in)[r].raw<float>(), one->raw<float>(), scale, (*out)[r].raw<float>(),
                                         rows, cols, kernels::WriteMode::overwrite);
            },
            [&](auto stream) {
              kernels::cuda::cross_entropy_backward((*x)[r].raw<float>(), (*t)[r].raw<std::int32_t>(),
                                                    (*max_in)[r].raw<float>(), (*sum_in)[r].raw<float>(),
                                                    one->raw<float>(), scale, (*out)[r].raw<float>(), rows, cols,
                                                    kernels::WriteMode::overwrite, stream);
            });
      },
      (*out)[0], want, 1e-7, 1e-5);
  // Loss, gradient and the loss sum in one pass: a training step's whole loss (the counter and the
  // two scalars are this case's own; the sum just keeps growing).
  std::vector<float> fused_rows(rows);
  float batch_host = 0, sum_host = 0;
  kc::cross_entropy_fused(xh.data(), th.data(), want.data(), fused_rows.data(), &batch_host, &sum_host, rows, cols,
                          scale, nullptr);
  auto scalars = std::make_shared<Tensor>(zeros({2}, {.device = d}));
  auto counter = std::make_shared<Tensor>(zeros({1}, {.dtype = DType::i32, .device = d}));
  add(
      "cross_entropy_fused", 8.0 * m + 8.0 * rows,
      [=](int r) {
        on(
            d,
            [&] {
              kc::cross_entropy_fused((*x)[r].raw<float>(), (*t)[r].raw<std::int32_t>(), (*out)[r].raw<float>(),
                                      (*out_rows)[r].raw<float>(), scalars->raw<float>(), scalars->raw<float>() + 1,
                                      rows, cols, scale, nullptr);
            },
            [&](auto stream) {
              kernels::cuda::cross_entropy_fused(
                  (*x)[r].raw<float>(), (*t)[r].raw<std::int32_t>(), (*out)[r].raw<float>(),
                  (*out_rows)[r].raw<float>(), scalars->raw<float>(), scalars->raw<float>() + 1, rows, cols, scale,
                  cuda::device_error_record(d), reinterpret_cast<unsigned*>(counter->raw<std::int32_t>()), stream);
            });
      },
      (*out)[0], want, 1e-7, 1e-5);
  kc::max_last_dim(xh.data(), want_rows.data(), nullptr, rows, cols);
  add(
      "max_last_dim", 4.0 * m + 4.0 * rows,
      [=](int r) {
        on(
            d, [&] { kc::max_last_dim((*x)[r].raw<float>(), (*out_rows)[r].raw<float>(), nullptr, rows, cols); },
            [&](auto stream) {
              kernels::cuda::max_last_dim((*x)[r].raw<float>(), (*out_rows)[r].raw<float>(), nullptr, rows, cols,
                                          stream);
            });
      },
      (*out_rows)[0], want_rows, 0.0, 0.0);
  // Sums: every row of 10 (inner = 1), the bias-gradient layout [rows, 10] over dim 0, everything.
  kc::sum(xh.data(), want_rows.data(), rows, cols, 1, 1.0f);
  add(
      "sum_rows", 4.0 * m + 4.0 * rows,
      [=](int r) {
        on(
            d, [&] { kc::sum((*x)[r].raw<float>(), (*out_rows)[r].raw<float>(), rows, cols, 1, 1.0f); },
            [&](auto stream) {
              kernels::cuda::sum((*x)[r].raw<float>(), (*out_rows)[r].raw<float>(), rows, cols, 1, 1.0f, nullptr,
                                 stream);
            });
      },
      (*out_rows)[0], want_rows, 1e-5, 1e-5);
  auto cols_out =
      std::make_shared<std::vector<Tensor>>(arena.outputs({static_cast<std::int64_t>(cols)}, DType::f32, rot));
  std::vector<float> want_cols(cols), want_all(1);
  kc::sum(xh.data(), want_cols.data(), 1, rows, cols, 1.0f);
  // A column of `rows` terms: float rounding grows with rows (CPU sums in double).
  const double sum_tol = 1e-6 * static_cast<double>(rows) * 6.0;
  // Columns of many rows split into row chunks across blocks (sum_workspace_size): the workspace.
  const std::size_t dim0_ws = kernels::sum_workspace_size(1, rows, cols);
  auto dim0_workspace =
      std::make_shared<Tensor>(empty({static_cast<std::int64_t>(std::max<std::size_t>(dim0_ws, 1))}, {.device = d}));
  add(
      "sum_dim0", 4.0 * m,
      [=](int r) {
        on(
            d, [&] { kc::sum((*x)[r].raw<float>(), (*cols_out)[r].raw<float>(), 1, rows, cols, 1.0f); },
            [&](auto stream) {
              kernels::cuda::sum((*x)[r].raw<float>(), (*cols_out)[r].raw<float>(), 1, rows, cols, 1.0f,
                                 dim0_ws ? dim0_workspace->raw<float>() : nullptr, stream);
            });
      },
      (*cols_out)[0], want_cols, sum_tol, 1e-5);
  auto all_out = std::make_shared<std::vector<Tensor>>(arena.outputs({1}, DType::f32, rot));
  const std::size_t ws = kernels::sum_workspace_size(1, m, 1);
  auto workspace =
      std::make_shared<Tensor>(empty({static_cast<std::int64_t>(std::max<std::size_t>(ws, 1))}, {.device = d}));
  kc::sum(xh.data(), want_all.data(), 1, m, 1, 1.0f);
  add(
      "sum_all", 4.0 * m,
      [=](int r) {
        on(
            d, [&] { kc::sum((*x)[r].raw<float>(), (*all_out)[r].raw<float>(), 1, m, 1, 1.0f); },
            [&](auto stream) {
              kernels::cuda::sum((*x)[r].raw<float>(), (*all_out)[r].raw<float>(), 1, m, 1, 1.0f,
                                 ws ? workspace->raw<float>() : nullptr, stream);
            });
      },
      (*all_out)[0], want_all, 1e-6 * static_cast<double>(m) * 6.0, 1e-5);
  // The fused bias+ReLU epilogue of a linear layer, [rows·10/32, 32].
  const std::size_t bc = 32, br = std::max<std::size_t>(1, m / bc);
  const Shape bshape{static_cast<std::int64_t>(br), static_cast<std::int64_t>(bc)};
  const auto bias = random_vector(bc, 3), pre = random_vector(br * bc, br);
  auto bias_t = std::make_shared<Tensor>(from_vector(bias, {static_cast<std::int64_t>(bc)}).to(d));
  auto pre_t = std::make_shared<std::vector<Tensor>>(arena.copies(pre, bshape, rot));
  auto bout = std::make_shared<std::vector<Tensor>>(arena.outputs(bshape, DType::f32, rot));
  std::vector<float> want_b = pre;
  kc::bias_relu_forward(want_b.data(), bias.data(), br, bc);
  Case fwd{"bias_relu_forward",
           "v1",
           true,
           d,
           std::to_string(br) + "x32",
           8.0 * br * bc,
           0,
           rot,
           [=](int r) {
             (*bout)[r].copy_((*pre_t)[r]);  // in place: restore the GEMM output first (not timed separately)
             on(
                 d, [&] { kc::bias_relu_forward((*bout)[r].raw<float>(), bias_t->raw<float>(), br, bc); },
                 [&](auto stream) {
                   kernels::cuda::bias_relu_forward((*bout)[r].raw<float>(), bias_t->raw<float>(), br, bc, stream);
                 });
           },
           nullptr};
  fwd.bytes += 8.0 * br * bc;  // the restoring copy is in the timing, so its bytes count too
  if (gpu) fwd.check = checker(fwd.run, (*bout)[0], want_b, 1e-6, 1e-6);
  cases.push_back(fwd);
  auto yb = std::make_shared<std::vector<Tensor>>(arena.copies(want_b, bshape, rot));
  auto gb = std::make_shared<std::vector<Tensor>>(arena.copies(pre, bshape, rot));
  auto db = std::make_shared<std::vector<Tensor>>(arena.outputs({static_cast<std::int64_t>(bc)}, DType::f32, rot));
  std::vector<float> want_dx(br * bc), want_db(bc);
  kc::bias_relu_backward(pre.data(), want_b.data(), want_dx.data(), want_db.data(), br, bc);
  const std::size_t bias_ws = kernels::sum_workspace_size(1, br, bc);
  auto bias_workspace =
      std::make_shared<Tensor>(empty({static_cast<std::int64_t>(std::max<std::size_t>(bias_ws, 1))}, {.device = d}));
  add(
      "bias_relu_backward", 12.0 * br * bc,
      [=](int r) {
        on(
            d,
            [&] {
              kc::bias_relu_backward((*gb)[r].raw<float>(), (*yb)[r].raw<float>(), (*bout)[r].raw<float>(),
                                     (*db)[r].raw<float>(), br, bc);
            },
            [&](auto stream) {
              kernels::cuda::bias_relu_backward((*gb)[r].raw<float>(), (*yb)[r].raw<float>(), (*bout)[r].raw<float>(),
                                                (*db)[r].raw<float>(), br, bc,
                                                bias_ws ? bias_workspace->raw<float>() : nullptr, stream);
            });
      },
      (*bout)[0], want_dx, 0.0, 0.0, std::to_string(br) + "x32");
  // A square transpose and the strided block copy behind cat and slice.
  const auto side = static_cast<std::size_t>(std::max(1.0, std::floor(std::sqrt(static_cast<double>(n)))));
  const Shape sq{static_cast<std::int64_t>(side), static_cast<std::int64_t>(side)};
  const auto sqh = random_vector(side * side, side);
  auto sq_in = std::make_shared<std::vector<Tensor>>(arena.copies(sqh, sq, rot));
  auto sq_out = std::make_shared<std::vector<Tensor>>(arena.outputs(sq, DType::f32, rot));
  std::vector<float> want_t(side * side);
  kc::transpose_last2(sqh.data(), want_t.data(), 1, side, side);
  add(
      "transpose", 8.0 * side * side,
      [=](int r) {
        on(
            d, [&] { kc::transpose_last2((*sq_in)[r].raw<float>(), (*sq_out)[r].raw<float>(), 1, side, side); },
            [&](auto stream) {
              kernels::cuda::transpose_last2((*sq_in)[r].raw<float>(), (*sq_out)[r].raw<float>(), 1, side, side,
                                             stream);
            });
      },
      (*sq_out)[0], want_t, 0.0, 0.0, std::to_string(side) + "x" + std::to_string(side));
}

// The fused optimizer updates over one parameter of n elements.
void add_optimizers(std::vector<Case>& cases, const Arena& arena, std::size_t n) {
  const Device d = arena.device();
  const bool gpu = d.is_cuda();
  const Shape shape{static_cast<std::int64_t>(n)};
  const auto ph = random_vector(n, 11), gh = random_vector(n, 12), mh = random_vector(n, 13),
             vh = random_vector(n, 14, 0.0f, 1.0f);
  for (bool adam : {false, true}) {
    const int rot = arena.rotations((adam ? 28 : 20) * n);
    auto p = std::make_shared<std::vector<Tensor>>(arena.copies(ph, shape, rot));
    auto g = std::make_shared<std::vector<Tensor>>(arena.copies(gh, shape, rot));
    auto m = std::make_shared<std::vector<Tensor>>(arena.copies(mh, shape, rot));
    auto v = std::make_shared<std::vector<Tensor>>(arena.copies(vh, shape, rot));
    auto lr = std::make_shared<Tensor>(full({1}, 0.01, {.device = d}));
    // The step count stays at 5 (advance_steps is not part of the update's timing).
    auto step = std::make_shared<Tensor>(full({1}, 5.0, {.device = d}));
    auto slots = std::make_shared<std::vector<Tensor>>();
    auto host_slots = std::make_shared<std::vector<kernels::ParamSlot>>();
    for (int r = 0; r < rot; ++r) {
      kernels::ParamSlot slot{(*p)[r].raw<float>(), (*g)[r].raw<float>(), (*m)[r].raw<float>(),
                              (*v)[r].raw<float>(), step->raw<float>(),   n};
      host_slots->push_back(slot);
      std::vector<std::uint8_t> bytes(sizeof slot);
      std::memcpy(bytes.data(), &slot, sizeof slot);
      slots->push_back(from_vector(bytes, {static_cast<std::int64_t>(bytes.size())}).to(d));
    }
    const kernels::SgdConfig sgd{0.9f, 0.0f, 1e-4f, false};
    const kernels::AdamConfig adam_config{0.9f, 0.999f, 1e-8f, 1e-2f, true};
    // Captures everything the slots point into (p, g, m, v and step) so that it outlives the case.
    auto run = [=](int r) {
      (void)p, (void)g, (void)m, (void)v, (void)step;
      const auto* s = static_cast<const kernels::ParamSlot*>((*slots)[r].raw_bytes());
      on(
          d,
          [&] {
            if (adam)
              kc::adam_step(s, 1, adam_config, lr->raw<float>());
            else
              kc::sgd_step(s, 1, sgd, lr->raw<float>());
          },
          [&](auto stream) {
            if (adam)
              kernels::cuda::adam_step({s, &(*host_slots)[r], 1}, n, adam_config, lr->raw<float>(), nullptr, stream);
            else
              kernels::cuda::sgd_step({s, &(*host_slots)[r], 1}, n, sgd, lr->raw<float>(), nullptr, stream);
          });
    };
    Case c{adam ? "adamw_step" : "sgd_momentum_step",
           "v1",
           true,
           d,
           "n=" + std::to_string(n),
           (adam ? 28.0 : 20.0) * n,
           0,
           rot,
           run,
           nullptr};
    if (gpu) {
      // Check one update from fresh copies of the host state against the CPU twin.
      c.check = [=]() {
        (*p)[0].copy_(from_vector(ph, shape));
        (*m)[0].copy_(from_vector(mh, shape));
        (*v)[0].copy_(from_vector(vh, shape));
        run(0);
        std::vector<float> pw = ph, mw = mh, vw = vh;
        float step_host = 5.0f, lr_host = 0.01f;
        const kernels::ParamSlot slot{pw.data(), gh.data(), mw.data(), vw.data(), &step_host, n};
        if (adam)
          kc::adam_step(&slot, 1, adam_config, &lr_host);
        else
          kc::sgd_step(&slot, 1, sgd, &lr_host);
        return compare((*p)[0].to_vector<float>(), pw, 1e-6, 1e-5);
      };
    }
    cases.push_back(std::move(c));
  }
}

// GEMMs of the MLP's shapes and a large square one; on the CPU, OpenBLAS (in use) and the builtin.
void add_gemms(std::vector<Case>& cases, const Arena& arena, bool quick) {
  const Device d = arena.device();
  const bool gpu = d.is_cuda();
  using kernels::Transpose;
  struct Shape3 {
    std::size_t m, n, k;
    Transpose ta, tb;
    const char* name;
  };
  std::vector<Shape3> shapes{{128, 32, 784, Transpose::no, Transpose::yes, "x·W1ᵀ 784-32"},
                             {32, 784, 128, Transpose::yes, Transpose::no, "gᵀ·x 784-32"},
                             {128, 128, 784, Transpose::no, Transpose::yes, "x·W1ᵀ 784-128"}};
  if (!quick) shapes.push_back({1024, 1024, 1024, Transpose::no, Transpose::no, "square"});
  for (const Shape3& s : shapes) {
    const std::size_t lda = s.ta == Transpose::no ? s.k : s.m, ldb = s.tb == Transpose::no ? s.n : s.k;
    const auto ah = random_vector(s.m * s.k, s.m), bh = random_vector(s.k * s.n, s.n);
    const int rot = arena.rotations(4 * (s.m * s.k + s.k * s.n + s.m * s.n));
    auto a = std::make_shared<std::vector<Tensor>>(arena.copies(ah, {static_cast<std::int64_t>(ah.size())}, rot));
    auto b = std::make_shared<std::vector<Tensor>>(arena.copies(bh, {static_cast<std::int64_t>(bh.size())}, rot));
    auto c =
        std::make_shared<std::vector<Tensor>>(arena.outputs({static_cast<std::int64_t>(s.m * s.n)}, DType::f32, rot));
    std::vector<float> want(s.m * s.n);
    kc::gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, ah.data(), lda, bh.data(), ldb, 0.0f, want.data(), s.n);
    const std::string label =
        std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " + s.name;
    const double flops = 2.0 * s.m * s.n * s.k, bytes = 4.0 * (s.m * s.k + s.k * s.n + s.m * s.n);
    // A length-k dot product of values in [−2, 2] may round differently by k·ε·Σ|a·b| ≤ k²·4ε.
    const double tol = 4.0 * static_cast<double>(s.k * s.k) * std::numeric_limits<float>::epsilon();
    if (gpu) {
      auto run = [=](int r) {
        on(
            d, [] {},
            [&](auto stream) {
              kernels::cuda::gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, (*a)[r].raw<float>(), lda, (*b)[r].raw<float>(), ldb,
                                  0.0f, (*c)[r].raw<float>(), s.n, stream);
            });
      };
      cases.push_back(
          {"gemm", "cublas", true, d, label, bytes, flops, rot, run, checker(run, (*c)[0], want, tol, 0.0)});
      continue;
    }
    auto blas = [=](int r) {
      kc::gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, (*a)[r].raw<float>(), lda, (*b)[r].raw<float>(), ldb, 0.0f,
               (*c)[r].raw<float>(), s.n);
    };
    cases.push_back({"gemm", kc::blas_name(), true, d, label, bytes, flops, rot, blas, nullptr});
    if (std::string(kc::blas_name()) != "builtin") {
      auto builtin = [=](int r) {
        kc::gemm_builtin(s.ta, s.tb, s.m, s.n, s.k, 1.0f, (*a)[r].raw<float>(), lda, (*b)[r].raw<float>(), ldb, 0.0f,
                         (*c)[r].raw<float>(), s.n);
      };
      cases.push_back(
          {"gemm", "builtin", false, d, label, bytes, flops, rot, builtin, checker(builtin, (*c)[0], want, tol, 0.0)});
    }
  }
}

// The MNIST CNN's convolutions at batch 64 (CPU): forward, backward data and backward filter as
// the framework runs them (kernels/conv.h: im2col + GEMM image by image for conv1, Winograd
// F(4×4, 3×3) for conv2, whose forward also runs fused with its ReLU and pooling), each next to
// the bare GEMMs that im2col would need (family conv_gemm): FLOPs are the direct algorithm's, so
// a rate above the GEMMs' is work saved. The first convolution's input gradient is never needed
// (the images need none).
void add_convolutions(std::vector<Case>& cases, const Arena& arena) {
  if (arena.device().is_cuda()) return;
  using kernels::Transpose;
  struct Layer {
    const char* name;
    kernels::ConvGeometry g;
    bool data_gradient;
  };
  for (const Layer& l : {Layer{"conv1 1→32 28²", {64, 1, 28, 28, 32, 3, 3, 1, 0}, false},
                         Layer{"conv2 32→64 26²", {64, 32, 26, 26, 64, 3, 3, 1, 0}, true}}) {
    const kernels::ConvGeometry g = l.g;
    const std::size_t patch = g.c * g.kh * g.kw, out = g.oh() * g.ow(), image = g.c * g.h * g.w;
    auto x = std::make_shared<std::vector<float>>(random_vector(g.n * image, 1));
    auto w = std::make_shared<std::vector<float>>(random_vector(g.k * patch, 2));
    auto b = std::make_shared<std::vector<float>>(random_vector(g.k, 3));
    auto dy = std::make_shared<std::vector<float>>(random_vector(g.n * g.k * out, 4));
    auto y = std::make_shared<std::vector<float>>(g.n * g.k * out);
    auto dx = std::make_shared<std::vector<float>>(g.n * image);
    auto dw = std::make_shared<std::vector<float>>(g.k * patch);
    const kernels::PoolGeometry pool{g.n, g.k, g.oh(), g.ow(), 2, 2};
    auto pooled = std::make_shared<std::vector<float>>(g.n * g.k * pool.oh() * pool.ow());
    auto argmax = std::make_shared<std::vector<std::int32_t>>(pooled->size());
    auto columns = std::make_shared<std::vector<float>>(std::max(
        {kc::conv2d_workspace_elements(g), patch * out, kc::conv2d_relu_max_pool2d_workspace_elements(g, pool)}));
    const std::string algorithm = kc::winograd_applies(g) ? " winograd" : " im2col+gemm";
    const double flops = 2.0 * g.n * g.k * patch * out;
    const std::string label = l.name;
    // Bytes: the tensors each pass reads and writes once (the columns stay in cache, or not).
    auto add = [&](const char* what, double tensors, std::function<void(int)> conv, std::function<void(int)> bare) {
      const double bytes = 4.0 * tensors;
      cases.push_back({"conv", std::string(what) + algorithm, true, arena.device(), label, bytes, flops, 1,
                       std::move(conv), nullptr});
      if (bare)
        cases.push_back({"conv_gemm", std::string(what) + " gemm only", false, arena.device(), label, bytes, flops, 1,
                         std::move(bare), nullptr});
    };
    const double x_size = static_cast<double>(g.n * image), w_size = static_cast<double>(g.k * patch),
                 y_size = static_cast<double>(g.n * g.k * out);
    add(
        "forward", x_size + w_size + y_size,
        [=](int) { kc::conv2d_forward(x->data(), w->data(), b->data(), y->data(), g, columns->data()); },
        [=](int) {
          for (std::size_t i = 0; i < g.n; ++i)
            kc::gemm(Transpose::no, Transpose::no, g.k, out, patch, 1.0f, w->data(), patch, columns->data(), out, 0.0f,
                     y->data() + i * g.k * out, out);
        });
    if (kc::winograd_pools_tiles(g, pool))
      add(
          "forward+relu+pool", x_size + w_size + y_size / 2,  // pooled values and their int32 positions
          [=](int) {
            kc::conv2d_relu_max_pool2d_forward(x->data(), w->data(), b->data(), pooled->data(), argmax->data(), g, pool,
                                               columns->data());
          },
          nullptr);
    if (l.data_gradient)
      add(
          "backward_data", y_size + w_size + x_size,
          [=](int) { kc::conv2d_backward_data(dy->data(), w->data(), dx->data(), g, columns->data()); },
          [=](int) {
            for (std::size_t i = 0; i < g.n; ++i)
              kc::gemm(Transpose::yes, Transpose::no, patch, out, g.k, 1.0f, w->data(), patch,
                       dy->data() + i * g.k * out, out, 0.0f, columns->data(), out);
          });
    add(
        "backward_filter", x_size + y_size + w_size,
        [=](int) { kc::conv2d_backward_filter(x->data(), dy->data(), dw->data(), g, columns->data()); },
        [=](int) {
          for (std::size_t i = 0; i < g.n; ++i)
            kc::gemm(Transpose::no, Transpose::yes, g.k, patch, out, 1.0f, dy->data() + i * g.k * out, out,
                     columns->data(), out, i == 0 ? 0.0f : 1.0f, dw->data(), patch);
        });
  }
}

// A deliberately wrong version (it forgets the ReLU), so that a test can see the tool refuse it.
void add_broken(std::vector<Case>& cases, const Arena& arena) {
  const std::size_t n = 4096;
  const auto xh = random_vector(n, 99);
  auto x = std::make_shared<Tensor>(from_vector(xh, {static_cast<std::int64_t>(n)}).to(arena.device()));
  auto out = std::make_shared<Tensor>(empty({static_cast<std::int64_t>(n)}, {.device = arena.device()}));
  std::vector<float> want(n);
  kc::unary(kernels::UnaryOp::relu, xh.data(), want.data(), n);
  auto run = [=](int) { out->copy_(*x); };
  cases.push_back({"relu_forward", "v0-broken (self-test)", false, arena.device(), "n=4096", 8.0 * n, 0, 1, run,
                   checker(run, *out, want, 0.0, 0.0)});
}

// ---- timing ------------------------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median microseconds of one run, after a warm-up pass over every rotation (a buffer's first use
// after a long idle can cost page faults, which belong to no kernel): a monotonic clock on the CPU,
// CUDA events on the GPU.
double time_us(const std::function<void(int)>& run, int rotations, int repeat, Device device) {
  for (int r = 0; r < std::max(rotations, 2); ++r) run(r % rotations);
  std::vector<double> samples;
  if (device.is_cuda()) {
#if EMBER_WITH_CUDA
    cuda::Event start(device), stop(device);
    const cudaStream_t stream = cuda::current_stream(device);
    for (int i = 0; i < repeat; ++i) {
      start.record(stream);
      run(i % rotations);
      stop.record(stream);
      stop.synchronize();
      samples.push_back(1000.0 * cuda::Event::elapsed_ms(start, stop));
    }
#endif
  } else {
    for (int i = 0; i < repeat; ++i) {
      const auto t0 = Clock::now();
      run(i % rotations);
      samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }
  return median(samples);
}

struct Ceilings {
  double copy_gb_per_s = 0, gemm_gflop_per_s = 0;
  std::string copy_how, gemm_how;
};

Ceilings measure_ceilings(Device device, int repeat) {
  Ceilings c;
  const std::size_t bytes = std::size_t{256} << 20;
  if (device.is_cpu()) {
    std::vector<std::uint8_t> a(bytes, 1), b(bytes, 2);
    const double us = time_us([&](int) { std::memcpy(b.data(), a.data(), bytes); }, 1, std::max(3, repeat / 5), device);
    c.copy_gb_per_s = 2.0 * bytes / (us * 1e3);
    c.copy_how = "memcpy of 256 MiB (bytes read + written)";
    const std::size_t s = 1024;
    const auto ah = random_vector(s * s, 1), bh = random_vector(s * s, 2);
    std::vector<float> ch(s * s);
    const double gus = time_us(
        [&](int) {
          kc::gemm(kernels::Transpose::no, kernels::Transpose::no, s, s, s, 1.0f, ah.data(), s, bh.data(), s, 0.0f,
                   ch.data(), s);
        },
        1, std::max(3, repeat / 5), device);
    c.gemm_gflop_per_s = 2.0 * s * s * s / (gus * 1e3);
    c.gemm_how = std::string(kc::blas_name()) + " SGEMM 1024³, " + std::to_string(kc::num_threads()) + " thread(s)";
    return c;
  }
#if EMBER_WITH_CUDA
  const std::size_t big = std::size_t{1} << 30;
  Tensor src = empty({static_cast<std::int64_t>(big)}, {.dtype = DType::u8, .device = device});
  Tensor dst = empty({static_cast<std::int64_t>(big)}, {.dtype = DType::u8, .device = device});
  const cudaStream_t stream = cuda::current_stream(device);
  const double us = time_us(
      [&](int) {
        CUDA_CHECK(cudaMemcpyAsync(dst.raw_bytes(), src.raw_bytes(), big, cudaMemcpyDeviceToDevice, stream));
      },
      1, std::max(5, repeat / 3), device);
  c.copy_gb_per_s = 2.0 * big / (us * 1e3);
  c.copy_how = "device-to-device copy of 1 GiB (bytes read + written)";
  const std::size_t s = 4096;
  Tensor a = rand({static_cast<std::int64_t>(s * s)}).to(device),
         b = rand({static_cast<std::int64_t>(s * s)}).to(device);
  Tensor out = empty({static_cast<std::int64_t>(s * s)}, {.device = device});
  const double gus = time_us(
      [&](int) {
        kernels::cuda::gemm(kernels::Transpose::no, kernels::Transpose::no, s, s, s, 1.0f, a.raw<float>(), s,
                            b.raw<float>(), s, 0.0f, out.raw<float>(), s, stream);
      },
      1, std::max(5, repeat / 3), device);
  c.gemm_gflop_per_s = 2.0 * s * s * s / (gus * 1e3);
  c.gemm_how = "cuBLAS SGEMM 4096³ (fp32)";
#endif
  return c;
}

// ---- GPU-only measurements ---------------------------------------------------------------------

#if EMBER_WITH_CUDA
void add_transfers_and_launches(std::vector<nlohmann::json>& rows, Device device, int repeat) {
  const std::size_t bytes = std::size_t{64} << 20;
  Tensor dev = empty({static_cast<std::int64_t>(bytes)}, {.dtype = DType::u8, .device = device});
  const cudaStream_t stream = cuda::current_stream(device);
  for (bool pinned : {false, true}) {
    Tensor host = empty({static_cast<std::int64_t>(bytes)}, {.dtype = DType::u8, .pinned = pinned});
    for (bool to_device : {true, false}) {
      const double us = time_us(
          [&](int) {
            CUDA_CHECK(cudaMemcpyAsync(to_device ? dev.raw_bytes() : host.raw_bytes(),
                                       to_device ? host.raw_bytes() : dev.raw_bytes(), bytes,
                                       to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream));
          },
          1, std::max(5, repeat / 3), device);
      rows.push_back({{"family", to_device ? "copy_host_to_device" : "copy_device_to_host"},
                      {"version", pinned ? "pinned" : "pageable"},
                      {"device", device.str()},
                      {"shape", "64 MiB"},
                      {"time_us", us},
                      {"gb_per_s", bytes / (us * 1e3)},
                      {"status", "ok"},
                      {"in_use", true}});
    }
  }
  const double eager = time_us([&](int) { kernels::cuda::launch_empty(stream); }, 1, repeat, device);
  rows.push_back({{"family", "launch_overhead"},
                  {"version", "eager"},
                  {"device", device.str()},
                  {"shape", "1 empty kernel"},
                  {"time_us", eager},
                  {"status", "ok"},
                  {"in_use", true}});
  const int n = 100;
  cuda::Stream capture(device);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(capture.handle(), cudaStreamCaptureModeGlobal));
  for (int i = 0; i < n; ++i) kernels::cuda::launch_empty(capture.handle());
  CUDA_CHECK(cudaStreamEndCapture(capture.handle(), &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double replay = time_us([&](int) { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, 1, repeat, device);
  rows.push_back({{"family", "launch_overhead"},
                  {"version", "graph replay"},
                  {"device", device.str()},
                  {"shape", "100 empty kernels"},
                  {"time_us", replay / n},
                  {"status", "ok"},
                  {"in_use", false},
                  {"note", "per kernel"}});
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
}
#endif

// The framework's own cost per op on the CPU: an op on a 4-element tensor, recorded or not, and
// one node's forward and backward in a chain — the bookkeeping a training step pays per op.
void add_autograd_overhead(std::vector<nlohmann::json>& rows, int repeat) {
  const Tensor x = ones({4});
  const Tensor w = ones({4}, {.requires_grad = true});
  const int n = 2000;
  auto per_op = [&](const std::function<void()>& body) {
    return time_us(
               [&](int) {
                 for (int i = 0; i < n; ++i) body();
               },
               1, std::max(5, repeat / 3), Device::cpu()) /
           n;
  };
  const double plain = per_op([&] { Tensor y = relu(x); });
  const double recorded = per_op([&] { Tensor y = relu(w); });
  const double chain = time_us(
                           [&](int) {
                             Tensor y = w;
                             for (int i = 0; i < 50; ++i) y = relu(y);
                             sum(y).backward();
                           },
                           1, std::max(5, repeat / 3), Device::cpu()) /
                       51;
  for (auto [version, us] : {std::pair{"op, not recorded", plain}, std::pair{"op, recorded", recorded},
                             std::pair{"forward + backward per node", chain}})
    rows.push_back({{"family", "autograd_overhead"},
                    {"version", version},
                    {"device", "cpu"},
                    {"shape", "4 elements"},
                    {"time_us", us},
                    {"status", "ok"},
                    {"in_use", true}});
}

// ---- main --------------------------------------------------------------------------------------

std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> sizes;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0)
      throw apps::UsageError("--sizes: expected element counts like 65536,1048576");
    sizes.push_back(static_cast<std::size_t>(v));
  }
  return sizes;
}

int bench(const Settings& s, const std::string& sizes_text) {
  kc::set_num_threads(1);
  std::vector<Device> devices;
  if (s.device == "all" || s.device == "cpu") devices.push_back(Device::cpu());
  if (s.device == "all" && cuda::is_available()) devices.push_back(Device::cuda(0));
  if (s.device != "all" && s.device != "cpu") {
    try {
      devices.push_back(Device::parse(s.device));
      require_usable(devices.back());
    } catch (const Error& e) {
      throw apps::UsageError("--device " + s.device + ": " + e.what());
    }
  }
  std::regex filter;
  try {
    filter = std::regex(s.filter.empty() ? ".*" : s.filter);
  } catch (const std::regex_error&) {
    throw apps::UsageError("--filter " + s.filter + ": not a valid regular expression");
  }
  nlohmann::json report = {{"ember_version", EMBER_VERSION},
                           {"repeat", s.repeat},
                           {"ceilings", nlohmann::json::array()},
                           {"results", nlohmann::json::array()}};
  for (const Device device : devices) {
    const bool gpu = device.is_cuda();
    std::vector<std::size_t> sizes = s.sizes;
    if (sizes_text.empty())
      sizes = gpu ? std::vector<std::size_t>{1 << 16, 1 << 20, 1 << 24, 1 << 26}
                  : std::vector<std::size_t>{1 << 14, 1 << 18, 1 << 22};
    std::size_t flush = std::size_t{64} << 20;  // CPU: twice a 32 MiB last-level cache
#if EMBER_WITH_CUDA
    if (gpu) {
      int l2 = 0;
      CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device.index));
      flush = 2 * static_cast<std::size_t>(l2);
    }
#endif
    const Ceilings ceil = measure_ceilings(device, s.repeat);
    report["ceilings"].push_back({{"device", device.str()},
                                  {"copy_gb_per_s", ceil.copy_gb_per_s},
                                  {"copy", ceil.copy_how},
                                  {"gemm_gflop_per_s", ceil.gemm_gflop_per_s},
                                  {"gemm", ceil.gemm_how}});
    std::printf("\n== %s: copy ceiling %.1f GB/s (%s); GEMM ceiling %.1f GFLOP/s (%s)\n", device.str().c_str(),
                ceil.copy_gb_per_s, ceil.copy_how.c_str(), ceil.gemm_gflop_per_s, ceil.gemm_how.c_str());
    std::printf("%-24s %-22s %-26s %11s %9s %9s %7s  %s\n", "family", "version", "shape", "time (us)", "GB/s",
                "GFLOP/s", "of max", "");
    const Arena arena(device, flush);
    std::vector<Case> cases;
    for (std::size_t n : sizes) {
      add_elementwise(cases, arena, n);
      add_rowwise(cases, arena, n);
      add_optimizers(cases, arena, n);
    }
    add_gemms(cases, arena, !sizes_text.empty() && *std::max_element(sizes.begin(), sizes.end()) < (1 << 16));
    add_convolutions(cases, arena);
    if (s.include_broken) add_broken(cases, arena);
    std::string current;
    for (Case& c : cases) {
      if (!std::regex_search(c.family, filter)) continue;
      ProfileRange range(c.family.c_str());
      nlohmann::json row = {{"family", c.family},
                            {"version", c.version},
                            {"in_use", c.in_use},
                            {"device", device.str()},
                            {"shape", c.shape}};
      std::string problem;
      if (c.check) problem = c.check();
      if (!problem.empty()) {
        row["status"] = "refused";
        row["reason"] = "wrong result: " + problem;
        std::printf("%-24s %-22s %-26s REFUSED: wrong result (%s); not timed\n", c.family.c_str(), c.version.c_str(),
                    c.shape.c_str(), problem.c_str());
      } else {
        const double us = time_us(c.run, c.rotations, s.repeat, device);
        const double gbps = c.bytes / (us * 1e3), gflops = c.flops / (us * 1e3);
        const double fraction = c.flops > 0 ? gflops / ceil.gemm_gflop_per_s : gbps / ceil.copy_gb_per_s;
        row.update({{"status", "ok"},
                    {"time_us", us},
                    {"bytes", c.bytes},
                    {"gb_per_s", gbps},
                    {"fraction_of_ceiling", fraction}});
        if (c.flops > 0) row["gflop_per_s"] = gflops;
        std::printf("%-24s %-22s %-26s %11.2f %9.1f %9s %6.0f%%  %s\n", c.family.c_str(), c.version.c_str(),
                    c.shape.c_str(), us, gbps, c.flops > 0 ? std::to_string(static_cast<int>(gflops)).c_str() : "",
                    100 * fraction, c.in_use ? "(in use)" : "");
      }
      report["results"].push_back(row);
    }
    std::vector<nlohmann::json> extra;
#if EMBER_WITH_CUDA
    if (gpu && std::regex_search(std::string("copy_host_to_device launch_overhead"), filter))
      add_transfers_and_launches(extra, device, s.repeat);
#endif
    if (!gpu && std::regex_search(std::string("autograd_overhead"), filter)) add_autograd_overhead(extra, s.repeat);
    for (const auto& row : extra) {
      std::printf(
          "%-24s %-22s %-26s %11.3f %9s\n", row["family"].get<std::string>().c_str(),
          row["version"].get<std::string>().c_str(), row["shape"].get<std::string>().c_str(),
          row["time_us"].get<double>(),
          row.contains("gb_per_s") ? std::to_string(static_cast<int>(row["gb_per_s"].get<double>())).c_str() : "");
      report["results"].push_back(row);
    }
  }
  if (!s.json.empty()) {
    const std::string text = report.dump(2) + "\n";
    write_file_atomically(s.json, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  std::string sizes_text;
  CLI::App app{"bench_kernels: every kernel family against measured ceilings, on the CPU and CUDA"};
  app.add_option("--device", s.device, "all (the CPU, and cuda:0 when usable), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--filter", s.filter, "only families whose name matches this regular expression");
  app.add_option("--sizes", sizes_text, "element counts, e.g. 65536,16777216 (default: a sweep per device)");
  app.add_option("--repeat", s.repeat, "timed runs per case (the median is reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--json", s.json, "also write every result as JSON to this file");
  app.add_flag("--include-broken", s.include_broken,
               "add a deliberately wrong kernel version (self-test: it must be refused)");
  return apps::run_cli(app, argc, argv, [&] {
    if (!sizes_text.empty()) s.sizes = parse_sizes(sizes_text);
    return bench(s, sizes_text);
  });
}
