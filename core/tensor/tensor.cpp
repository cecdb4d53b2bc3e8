// Tensor: metadata, host access, copies between devices, autograd entry points and the factories
// (views: core/tensor/views.cpp; printing: core/tensor/print.cpp).
#include "core/tensor/tensor.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "base/config.h"
#include "core/cuda/runtime.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "core/tensor/cuda_copy.h"
#include "core/tensor/random.h"
#include "kernels/elementwise.h"

namespace ember {

std::int64_t numel_of(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

namespace {

std::shared_ptr<TensorImpl> make_impl(const Shape& shape, DType dtype, Device device, MemoryKind kind) {
  for (std::int64_t d : shape)
    EMBER_CHECK(d >= 0, ShapeError, "invalid shape ", shape_str(shape), ": sizes must be non-negative");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage =
      std::make_shared<Storage>(static_cast<std::size_t>(numel_of(shape)) * dtype_size(dtype), device, kind);
  return impl;
}

MemoryKind kind_for(const TensorOptions& options) {
  if (options.device.is_cuda()) return MemoryKind::device;
  return options.pinned ? MemoryKind::pinned : MemoryKind::pageable;
}

char* byte_ptr(const Tensor& t) { return static_cast<char*>(t.storage()->data()) + t.offset() * dtype_size(t.dtype()); }

void check_no_grad_inplace(const Tensor& t, const char* op) {
  EMBER_CHECK(!(autograd::is_grad_enabled() && t.requires_grad()), AutogradError, op,
              ": a tensor that requires grad cannot be modified in place while gradients are recorded; wrap the "
              "update in NoGradGuard (as optimizers do), or detach() the tensor first");
}

// Copies src's bytes into dst (same byte count), whatever their devices (Note [stream ownership of
// device memory] in core/tensor/storage.h for what each copy records).
void copy_bytes(const Tensor& dst, const Tensor& src, bool non_blocking) {
  const std::size_t bytes = src.nbytes();
  if (bytes == 0) return;
  src.storage()->wait_until_ready();
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    dst.storage()->wait_until_ready();
    std::memcpy(byte_ptr(dst), byte_ptr(src), bytes);
    return;
  }
  cuda::copy_bytes(dst, src, non_blocking);  // a CUDA device at one end or both
}

template <class To>
To convert_scalar(const void* p, DType dtype) {
  return visit_dtype(dtype, [p](auto zero) { return static_cast<To>(*static_cast<const decltype(zero)*>(p)); });
}

}  // namespace

const TensorImpl& Tensor::checked() const {
  EMBER_CHECK(impl_ != nullptr, ValueError,
              "use of an undefined tensor (default-constructed, or a gradient that "
              "has not been computed yet)");
  return *impl_;
}

std::int64_t Tensor::size(int dim) const {
  const int nd = this->dim();
  const int d = dim < 0 ? dim + nd : dim;
  EMBER_CHECK(d >= 0 && d < nd, IndexError, "size(", dim, "): dim out of range for a tensor of shape ",
              shape_str(shape()));
  return shape()[static_cast<std::size_t>(d)];
}

void* Tensor::raw_bytes() const {
  // A CPU tensor may be the target of a non_blocking device→host copy still in flight.
  if (!is_cuda()) storage()->wait_until_ready();
  return byte_ptr(*this);
}

void* Tensor::raw_data(DType expected) const {
  EMBER_CHECK(dtype() == expected, DTypeError, "expected a tensor of dtype ", expected, ", but this tensor has dtype ",
              dtype());
  return raw_bytes();
}

void* Tensor::host_data(DType expected) const {
  EMBER_CHECK(!is_cuda(), DeviceError, "cannot access the data of a tensor on ", device(),
              " from the host: copy it first with .cpu() (e.g. t.cpu().data<T>()), or use item()/to_vector()");
  void* p = raw_data(expected);
  storage()->wait_until_ready();
  return p;
}

std::size_t Tensor::flat_index(std::initializer_list<std::int64_t> index) const {
  EMBER_CHECK(static_cast<int>(index.size()) == dim(), IndexError, "at(): ", index.size(),
              " indices for a tensor of shape ", shape_str(shape()));
  std::size_t flat = 0;
  std::size_t d = 0;
  for (std::int64_t i : index) {
    const std::int64_t extent = shape()[d];
    EMBER_CHECK(i >= 0 && i < extent, IndexError, "at(): index ", i, " is out of range for dim ", d, " of size ",
                extent);
    flat = flat * static_cast<std::size_t>(extent) + static_cast<std::size_t>(i);
    ++d;
  }
  return flat;
}

template <class T>
T Tensor::item() const {
  EMBER_CHECK(numel() == 1, ValueError, "item(): the tensor has ", numel(), " elements (shape ", shape_str(shape()),
              "); only one-element tensors can be converted to a number");
  const Tensor host = detach().cpu();
  host.storage()->wait_until_ready();
  return convert_scalar<T>(host.raw_bytes(), host.dtype());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  const Tensor host = detach().cpu();
  host.storage()->wait_until_ready();
  std::vector<T> out(static_cast<std::size_t>(numel()));
  const char* p = static_cast<const char*>(host.raw_bytes());
  const std::size_t step = dtype_size(dtype());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = convert_scalar<T>(p + i * step, dtype());
  return out;
}

#define EMBER_INSTANTIATE(T)          \
  template T Tensor::item<T>() const; \
  template std::vector<T> Tensor::to_vector<T>() const;
#define EMBER_INSTANTIATE_DTYPE(name, type, ...) EMBER_INSTANTIATE(type)
EMBER_FORALL_DTYPES(EMBER_INSTANTIATE_DTYPE)  // Note [the dtype list]
#undef EMBER_INSTANTIATE_DTYPE
#undef EMBER_INSTANTIATE

Tensor Tensor::to(Device target, bool non_blocking) const {
  if (target == device()) return *this;
  require_usable(target);
  // Device → host with non_blocking lands in pinned memory, so the copy can really be async.
  const MemoryKind kind = target.is_cuda()                         ? MemoryKind::device
                          : (non_blocking && cuda::is_available()) ? MemoryKind::pinned
                                                                   : MemoryKind::pageable;
  Tensor out(make_impl(shape(), dtype(), target, kind));
  copy_bytes(out, *this, non_blocking);
  if (autograd::needs_recording({this})) {
    autograd::record(out, "to", {this}, [source = device()](const Tensor& g, autograd::NeedsGrad) {
      return autograd::Gradients{g.to(source)};
    });
  }
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out(make_impl(shape(), target, device(), is_cuda() ? MemoryKind::device : MemoryKind::pageable));
  const std::size_t n = static_cast<std::size_t>(numel());
  ext::dispatch_device(
      *this,
      [&] {
        storage()->wait_until_ready();
        kernels::cpu::cast(dtype(), raw_bytes(), target, out.raw_bytes(), n);
      },
      [&](auto stream) { kernels::cuda::cast(dtype(), raw_bytes(), target, out.raw_bytes(), n, stream); });
  // Between floating dtypes the cast is differentiable, as PyTorch's: the gradient comes back in
  // the source's dtype (autocast's casts at each op's boundary rely on it).
  if (is_floating(target) && autograd::needs_recording({this})) {
    autograd::record(out, "to", {this}, [source = dtype()](const Tensor& g, autograd::NeedsGrad) {
      return autograd::Gradients{g.to(source)};
    });
  }
  return out;
}

Tensor Tensor::pin_memory() const {
  EMBER_CHECK(!is_cuda(), DeviceError, "pin_memory(): the tensor is on ", device(),
              "; only host tensors can be pinned");
  if (is_pinned()) return *this;
  Tensor out(make_impl(shape(), dtype(), Device::cpu(), MemoryKind::pinned));
  copy_bytes(out, *this, false);
  return out;
}

Tensor& Tensor::move_to_(Device target) {
  EMBER_CHECK(is_leaf(), AutogradError, "move_to_: only leaf tensors (such as parameters) can be moved in place");
  if (device() == target) return *this;
  const Tensor moved = detach().to(target);
  impl_->storage = moved.storage();
  impl_->offset = moved.offset();
  if (impl_->grad) Tensor(impl_->grad).move_to_(target);
  return *this;
}

Tensor& Tensor::convert_to_(DType target) {
  EMBER_CHECK(is_leaf(), AutogradError,
              "convert_to_: only leaf tensors (such as parameters) can be converted in place");
  EMBER_CHECK(is_floating(dtype()) && is_floating(target), DTypeError,
              "convert_to_: converts between floating dtypes, not ", dtype(), " to ", target);
  if (dtype() == target) return *this;
  const Tensor converted = detach().to(target);
  impl_->storage = converted.storage();
  impl_->offset = converted.offset();
  impl_->dtype = target;
  if (impl_->grad) Tensor(impl_->grad).convert_to_(target);
  return *this;
}

void Tensor::record_stream(cudaStream_t stream) const {
  EMBER_CHECK(is_cuda(), DeviceError, "record_stream: the tensor is on ", device(),
              "; only CUDA tensors belong to streams");
  storage()->record_stream(stream);
}

Tensor Tensor::clone() const {
  Tensor out(make_impl(shape(), dtype(), device(), is_cuda() ? MemoryKind::device : MemoryKind::pageable));
  copy_bytes(out, *this, false);
  if (autograd::needs_recording({this})) {
    autograd::record(out, "clone", {this}, [](const Tensor& g, autograd::NeedsGrad) { return autograd::Gradients{g}; });
  }
  return out;
}

Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  check_no_grad_inplace(*this, "copy_");
  EMBER_CHECK(src.numel() == numel(), ShapeError, "copy_: the source has shape ", shape_str(src.shape()), " (",
              src.numel(), " elements) but the destination has shape ", shape_str(shape()), " (", numel(),
              " elements)");
  const Tensor converted = src.dtype() == dtype() ? src : src.detach().to(dtype());
  copy_bytes(*this, converted, non_blocking);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_no_grad_inplace(*this, "fill_");
  const std::size_t n = static_cast<std::size_t>(numel());
  // The value converts as any element does (kernels::cast_formula: NaN to 0 for integers, saturating).
  ext::dispatch_dtype(
      *this,
      [&](auto zero) {
        using T = decltype(zero);
        storage()->wait_until_ready();
        kernels::cpu::fill<T>(raw<T>(), kernels::cast_formula<double, T>(value), n);
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::fill<T>(raw<T>(), kernels::cast_formula<double, T>(value), n, stream);
      });
  return *this;
}

Tensor& Tensor::set_requires_grad(bool enabled) {
  EMBER_CHECK(is_leaf() || enabled, AutogradError,
              "set_requires_grad(false) on a non-leaf tensor: use detach() to take it out of the graph");
  EMBER_CHECK(!enabled || is_floating(dtype()), DTypeError,
              "only floating-point tensors can require gradients, "
              "this one has dtype ",
              dtype());
  impl_->requires_grad = enabled;
  return *this;
}

Tensor Tensor::grad() const { return checked().grad ? Tensor(impl_->grad) : Tensor(); }

void Tensor::set_grad(const Tensor& grad) {
  checked();
  if (grad.defined())
    EMBER_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(), ShapeError,
                "set_grad: the gradient has shape ", shape_str(grad.shape()), ", dtype ", grad.dtype(), " on ",
                grad.device(), " but the tensor has shape ", shape_str(shape()), ", dtype ", dtype(), " on ", device());
  impl_->grad = grad.defined() ? grad.impl_ptr() : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward(*this, gradient, retain_graph);
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->offset = offset();
  impl->shape = shape();
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

// ---- factories ---------------------------------------------------------------------------------

Tensor tensor_on(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype, std::size_t offset) {
  EMBER_CHECK(storage != nullptr, ValueError, "tensor_on: the storage is null");
  for (std::int64_t d : shape) EMBER_CHECK(d >= 0, ShapeError, "tensor_on: invalid shape ", shape_str(shape));
  const std::size_t need = (offset + static_cast<std::size_t>(numel_of(shape))) * dtype_size(dtype);
  EMBER_CHECK(need <= storage->bytes(), ShapeError, "tensor_on: shape ", shape_str(shape), " of ", dtype, " at offset ",
              offset, " needs ", need, " bytes, the storage has ", storage->bytes());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, const TensorOptions& options) {
  Tensor t(make_impl(shape, options.dtype, options.device, kind_for(options)));
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor full(const Shape& shape, double value, const TensorOptions& options) {
  Tensor t(make_impl(shape, options.dtype, options.device, kind_for(options)));
  t.fill_(value);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor zeros(const Shape& shape, const TensorOptions& options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, const TensorOptions& options) { return full(shape, 1.0, options); }
Tensor scalar_tensor(double value, const TensorOptions& options) { return full({}, value, options); }

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& options) {
  EMBER_CHECK(static_cast<std::int64_t>(values.size()) == numel_of(shape), ShapeError, "from_vector: ", values.size(),
              " values do not fill shape ", shape_str(shape), " (", numel_of(shape), " elements)");
  TensorOptions host = options;
  host.dtype = dtype_of<T>;
  host.device = Device::cpu();
  host.requires_grad = false;
  Tensor t(make_impl(shape, host.dtype, host.device, kind_for(host)));
  if (!values.empty()) std::memcpy(t.raw_bytes(), values.data(), values.size() * sizeof(T));
  Tensor out = t.to(options.device);
  if (options.requires_grad) out.set_requires_grad(true);
  return out;
}
#define EMBER_INSTANTIATE_FROM_VECTOR(name, T, ...) \
  template Tensor from_vector<T>(const std::vector<T>&, const Shape&, const TensorOptions&);
EMBER_FORALL_DTYPES(EMBER_INSTANTIATE_FROM_VECTOR)  // Note [the dtype list]
#undef EMBER_INSTANTIATE_FROM_VECTOR

namespace {
// Values computed on the host as doubles, stored as options.dtype, then moved to the device.
template <class Fill>
Tensor host_generated(const Shape& shape, const TensorOptions& options, Fill&& next) {
  std::vector<double> values(static_cast<std::size_t>(numel_of(shape)));
  for (double& v : values) v = next();
  Tensor t = from_vector(values, shape).to(options.dtype).to(options.device);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}
}  // namespace

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  EMBER_CHECK(step != 0.0, ValueError, "arange: step must be non-zero");
  const double count = std::ceil((end - start) / step);
  const std::int64_t n = count > 0 ? static_cast<std::int64_t>(count) : 0;
  std::int64_t i = 0;
  return host_generated({n}, options, [&] { return start + step * static_cast<double>(i++); });
}

Tensor arange(std::int64_t end, const TensorOptions& options) {
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& options, Generator* generator) {
  Generator& g = generator ? *generator : default_generator();
  return host_generated(shape, options, [&] { return low + (high - low) * g.uniform(); });
}

Tensor rand(const Shape& shape, const TensorOptions& options, Generator* generator) {
  return uniform(shape, 0.0, 1.0, options, generator);
}

Tensor randn(const Shape& shape, const TensorOptions& options, Generator* generator) {
  Generator& g = generator ? *generator : default_generator();
  return host_generated(shape, options, [&] { return g.normal(); });
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, const TensorOptions& options,
               Generator* generator) {
  EMBER_CHECK(high > low, ValueError, "randint: empty range [", low, ", ", high, ")");
  Generator& g = generator ? *generator : default_generator();
  const auto span = static_cast<std::uint64_t>(high - low);
  return host_generated(shape, options,
                        [&] { return static_cast<double>(low + static_cast<std::int64_t>(g.below(span))); });
}

}  // namespace ember
