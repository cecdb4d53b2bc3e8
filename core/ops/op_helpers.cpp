// Argument checks shared by the ops, with messages in PyTorch's words where users know them.
#include "core/ops/op_helpers.h"

#include <algorithm>

#include "base/env.h"
#include "kernels/gemm_bf16.h"

namespace ember::ext {

void throw_built_without_cuda() {
  throw DeviceError("this build of ember has no CUDA backend (EMBER_CUDA=OFF), so no tensor can be on a CUDA device");
}

void check_defined(const std::string& op, const Arg& arg) {
  EMBER_CHECK(arg.tensor.defined(), ValueError, op, ": argument '", arg.name, "' is an undefined tensor");
}

void check_same_device(const std::string& op, std::initializer_list<Arg> args) {
  const Arg* first = nullptr;
  for (const Arg& a : args) {
    if (!a.tensor.defined()) continue;
    if (!first) {
      first = &a;
      continue;
    }
    if (a.tensor.device() != first->tensor.device())
      throw DeviceError(device_mismatch_message(op, a.name, first->tensor.device(), a.tensor.device()));
  }
}

std::string device_mismatch_message(const std::string& op, const std::string& argument, Device expected, Device found) {
  return concat("Expected all tensors to be on the same device, but found ", expected, " and ", found, " (argument '",
                argument, "' of ", op,
                "). Move every input to one device with .to(device): the "
                "model with model.to(device) once, and each batch's inputs and labels at every step");
}

void check_same_dtype(const std::string& op, const Arg& a, const Arg& b) {
  EMBER_CHECK(a.tensor.dtype() == b.tensor.dtype(), DTypeError, op, ": expected '", b.name, "' to have dtype ",
              a.tensor.dtype(), " (like '", a.name, "'), but it has dtype ", b.tensor.dtype(),
              "; convert one with .to(DType::...)");
}

void check_floating(const std::string& op, const Arg& arg) {
  const DType d = arg.tensor.dtype();
  EMBER_CHECK(is_floating(d), DTypeError, op, ": argument '", arg.name,
              "' must be a floating-point tensor (f32, f64, bf16 or f16), but it has dtype ", d);
  EMBER_CHECK(!(d == DType::f64 && arg.tensor.is_cuda()), DTypeError, op, ": argument '", arg.name, "' is f64 on ",
              arg.tensor.device(),
              ", but ember's CUDA kernels are f32 only; use .to(DType::f32) "
              "(f64 is for gradient checks on the CPU)");
}

void check_dtype(const std::string& op, const Arg& arg, std::initializer_list<DType> allowed) {
  if (std::find(allowed.begin(), allowed.end(), arg.tensor.dtype()) != allowed.end()) return;
  std::string names;
  for (DType d : allowed) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  throw DTypeError(
      concat(op, ": argument '", arg.name, "' must have dtype ", names, ", but it has dtype ", arg.tensor.dtype()));
}

void check_dim(const std::string& op, const Arg& arg, int expected_dim) {
  EMBER_CHECK(arg.tensor.dim() == expected_dim, ShapeError, op, ": argument '", arg.name, "' must be ", expected_dim,
              "-dimensional, but it has shape ", shape_str(arg.tensor.shape()));
}

int normalize_dim(const std::string& op, int dim, int ndim) {
  const int d = dim < 0 ? dim + ndim : dim;
  EMBER_CHECK(d >= 0 && d < ndim, IndexError, op, ": dim ", dim, " is out of range for a ", ndim,
              "-dimensional tensor (expected a dim in [", -ndim, ", ", ndim - 1, "])");
  return d;
}

bool cpu_bf16_kernels() {
  static const bool vector = !env_flag("EMBER_NO_AVX512_BF16", false) &&
                             kernels::cpu::best_bf16_gemm_path() == kernels::cpu::Bf16GemmPath::avx512_bf16;
  return vector;
}

Tensor new_empty(const Tensor& like, const Shape& shape, DType dtype) {
  return empty(shape, {.dtype = dtype, .device = like.device()});
}

}  // namespace ember::ext
