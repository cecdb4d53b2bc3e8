// Tensor's views: reshape, flatten and narrow, which share the tensor's storage.
#include <algorithm>

#include "core/ops/op_helpers.h"
#include "core/tensor/autograd.h"
#include "core/tensor/tensor.h"

namespace ember {

Tensor Tensor::reshape(Shape new_shape) const {
  const std::int64_t total = numel();
  int inferred = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      EMBER_CHECK(inferred < 0, ShapeError, "reshape: only one dimension can be -1, got ", shape_str(new_shape));
      inferred = static_cast<int>(i);
    } else {
      EMBER_CHECK(new_shape[i] >= 0, ShapeError, "reshape: invalid size ", new_shape[i], " in ", shape_str(new_shape));
      known *= new_shape[i];
    }
  }
  if (inferred >= 0) {
    EMBER_CHECK(known != 0 && total % known == 0, ShapeError, "reshape: cannot reshape a tensor of shape ",
                shape_str(shape()), " (", total, " elements) into ", shape_str(new_shape));
    new_shape[static_cast<std::size_t>(inferred)] = total / known;
  }
  EMBER_CHECK(numel_of(new_shape) == total, ShapeError, "reshape: cannot reshape a tensor of shape ",
              shape_str(shape()), " (", total, " elements) into ", shape_str(new_shape), " (", numel_of(new_shape),
              " elements)");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->offset = offset();
  impl->shape = std::move(new_shape);
  impl->dtype = dtype();
  Tensor out(std::move(impl));
  if (autograd::needs_recording({this})) {
    autograd::record(out, "reshape", {this}, [old = shape()](const Tensor& g, autograd::NeedsGrad) {
      return autograd::Gradients{g.reshape(old)};
    });
  }
  return out;
}

Tensor Tensor::flatten(int start_dim) const {
  const int d = ext::normalize_dim("flatten", start_dim, dim() == 0 ? 1 : dim());
  Shape s(shape().begin(), shape().begin() + std::min<std::ptrdiff_t>(d, dim()));
  s.push_back(-1);
  if (numel() == 0) {  // -1 cannot be inferred from zero elements
    s.back() = 1;
    for (int i = d; i < dim(); ++i) s.back() *= shape()[static_cast<std::size_t>(i)];
  }
  return reshape(s);
}

Tensor Tensor::narrow(int dim, std::int64_t start, std::int64_t length) const {
  EMBER_CHECK(this->dim() > 0, ShapeError, "narrow: cannot narrow a 0-dimensional tensor");
  const int d = ext::normalize_dim("narrow", dim, this->dim());
  EMBER_CHECK(d == 0, ShapeError,
              "narrow: only dim 0 shares storage in ember (storage is dense row-major); use "
              "ember::slice(t, ",
              dim, ", start, length) for a copy along another dim");
  const std::int64_t rows = shape()[0];
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= rows, IndexError, "narrow: rows [", start, ", ",
              start + length, ") are out of range for dim 0 of size ", rows);
  const std::int64_t row_elems = rows == 0 ? 0 : numel() / rows;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->offset = offset() + static_cast<std::size_t>(start * row_elems);
  impl->shape = shape();
  impl->shape[0] = length;
  impl->dtype = dtype();
  Tensor out(std::move(impl));
  if (autograd::needs_recording({this})) {
    autograd::record(out, "narrow", {this}, [full = shape(), start, length](const Tensor& g, autograd::NeedsGrad) {
      Tensor grad_in = zeros(full, {.dtype = g.dtype(), .device = g.device()});
      grad_in.narrow(0, start, length).copy_(g);
      return autograd::Gradients{grad_in};
    });
  }
  return out;
}

}  // namespace ember
