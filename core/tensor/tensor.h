// Tensor: a dtype, a shape and an offset into a shared Storage that lives on one device, plus
// the autograd state. A Tensor is a handle: copies share the same tensor (and its .grad), as in
// PyTorch. Storage is always dense and row-major; reshape and narrow along dim 0 share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "core/tensor/device.h"
#include "core/tensor/storage.h"

namespace ember {

using Shape = std::vector<std::int64_t>;
std::int64_t numel_of(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"

namespace autograd {
struct Node;
}
class Generator;

// How to make a tensor. Designated initializers read well: {.dtype = DType::f64, .device = d}.
struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
  bool pinned = false;  // host tensors only: allocate pinned (page-locked) memory
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::size_t offset = 0;  // in elements
  Shape shape;
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  std::shared_ptr<TensorImpl> grad;         // accumulated by backward() into leaves
  // Called after backward() added into this leaf's .grad (autograd::on_grad_accumulated).
  std::vector<std::pair<std::uint64_t, std::function<void()>>> grad_accumulated_hooks;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds nothing
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return checked().dtype; }
  const Shape& shape() const { return checked().shape; }
  int dim() const { return static_cast<int>(shape().size()); }
  std::int64_t size(int dim) const;  // negative dims count from the end
  std::int64_t numel() const { return numel_of(shape()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  Device device() const { return checked().storage->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_pinned() const { return checked().storage->is_pinned(); }
  std::size_t offset() const { return checked().offset; }
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // Host access. data<T>() is a host pointer: it throws DeviceError for a CUDA tensor ("call
  // .cpu() first") and DTypeError when T is not the tensor's dtype. It waits for a pending
  // non_blocking device→host copy into this tensor.
  template <class T>
  T* data() {
    return static_cast<T*>(host_data(dtype_of<T>));
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(host_data(dtype_of<T>));
  }
  // The element at a multi-index, read on the host (same rules as data<T>()).
  template <class T>
  T at(std::initializer_list<std::int64_t> index) const {
    return data<T>()[flat_index(index)];
  }
  // A pointer into the tensor's own memory space — device memory for a CUDA tensor. For kernel
  // launchers; dereference it on the host only for CPU tensors.
  template <class T>
  T* raw() const {
    return static_cast<T*>(raw_data(dtype_of<T>));
  }
  void* raw_bytes() const;

  // item() and to_vector() copy from the device when needed (and synchronize), as PyTorch's
  // item() and tolist() do, and convert the values to T.
  template <class T>
  T item() const;
  template <class T>
  std::vector<T> to_vector() const;

  // Views (share storage) and copies.
  Tensor reshape(Shape shape) const;  // one dim may be -1
  Tensor view(Shape shape) const { return reshape(std::move(shape)); }
  Tensor flatten(int start_dim = 0) const;
  // Elements [start, start+length) along dim 0, sharing storage. Other dims: see ember::slice.
  Tensor narrow(int dim, std::int64_t start, std::int64_t length) const;
  // The same data on `device`. A tensor already there is returned as is. From pinned memory
  // with non_blocking the copy is asynchronous on the current stream; from pageable memory it
  // is issued on the stream and then synchronized. Device→host with non_blocking lands in
  // pinned memory and host reads of the result wait for it.
  Tensor to(Device device, bool non_blocking = false) const;
  // A converted copy; between floating dtypes differentiable (the gradient cast back), as PyTorch.
  Tensor to(DType dtype) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor pin_memory() const;  // a pinned host copy (pageable, with a warning, without CUDA)
  // Moves this tensor's data (and its .grad) to `device` in place: every handle to the tensor
  // sees the move. For leaves such as parameters (Module::to uses it); not differentiable.
  Tensor& move_to_(Device device);
  // Converts this tensor's data (and its .grad) to a floating `dtype` in place, the same way, for
  // leaves (Module::to(dtype)); not differentiable.
  Tensor& convert_to_(DType dtype);
  // Says that work on `stream` (a stream of this tensor's CUDA device other than the one ops use)
  // reads or writes this tensor, so its memory is not freed for reuse before that work is done —
  // PyTorch's record_stream. Copies and tensors made under a cuda::StreamGuard record their stream
  // themselves (Note [stream ownership of device memory] in core/tensor/storage.h).
  void record_stream(cudaStream_t stream) const;
  Tensor clone() const;
  Tensor& copy_(const Tensor& src, bool non_blocking = false);  // same numel and dtype
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // Autograd.
  bool requires_grad() const { return checked().requires_grad; }
  Tensor& set_requires_grad(bool enabled = true);  // leaves only
  // Undefined until a backward pass reaches this leaf. The result shares the gradient, so an
  // in-place update of it (an optimizer's zero_()) changes the tensor's gradient.
  Tensor grad() const;
  void set_grad(const Tensor& grad);  // an undefined tensor clears it
  bool is_leaf() const { return checked().grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked().grad_fn; }
  // Accumulates d(this)/d(leaf) into every leaf's .grad. A scalar needs no gradient argument.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // shares storage, outside the graph

 private:
  const TensorImpl& checked() const;
  void* host_data(DType expected) const;
  void* raw_data(DType expected) const;
  std::size_t flat_index(std::initializer_list<std::int64_t> index) const;

  std::shared_ptr<TensorImpl> impl_;
};

// Prints dtype, shape, device and up to 6 values per dim. Throws DeviceError for a CUDA tensor
// (print t.cpu()).
std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

// A tensor over an existing storage (e.g. one borrowed from a data loader's staging buffer):
// `shape` elements of `dtype` starting at element `offset`; throws if they do not fit.
Tensor tensor_on(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype, std::size_t offset = 0);

// Factories. Random values are always drawn on the host from a seeded Generator (the default
// one when none is given) and then copied, so one seed gives one model on every device.
Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor scalar_tensor(double value, const TensorOptions& options = {});
// From host values; the dtype is T's, options.dtype is ignored.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& options = {});
Tensor arange(std::int64_t end, const TensorOptions& options = {});
Tensor arange(double start, double end, double step, const TensorOptions& options = {});
Tensor rand(const Shape& shape, const TensorOptions& options = {}, Generator* generator = nullptr);   // U[0,1)
Tensor randn(const Shape& shape, const TensorOptions& options = {}, Generator* generator = nullptr);  // N(0,1)
Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& options = {},
               Generator* generator = nullptr);
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, const TensorOptions& options = {},
               Generator* generator = nullptr);

}  // namespace ember
