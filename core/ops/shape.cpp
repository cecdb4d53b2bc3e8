// Shape ops that copy: cat and slice, both built on the strided block copy of kernels/layout.h.
#include <string>

#include "core/ops/autocast.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/elementwise.h"
#include "kernels/layout.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;

// Copies `rows` runs of `cols` elements from src (row stride src_ld, starting at element
// src_off) into dst (row stride dst_ld, starting at dst_off).
void copy_block(const Tensor& src, std::size_t src_off, std::size_t src_ld, const Tensor& dst, std::size_t dst_off,
                std::size_t dst_ld, std::size_t rows, std::size_t cols) {
  ext::dispatch_dtype(
      src,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::copy_2d<T>(src.raw<T>() + src_off, src_ld, dst.raw<T>() + dst_off, dst_ld, rows, cols);
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::copy_2d<T>(src.raw<T>() + src_off, src_ld, dst.raw<T>() + dst_off, dst_ld, rows, cols, stream);
      });
}

std::size_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  std::size_t p = 1;
  for (std::size_t d = begin; d < end; ++d) p *= static_cast<std::size_t>(shape[d]);
  return p;
}

// out[i] = x[Σ index_d · strides[d]] over `shape`: the expand kernel's strided gather, which
// broadcasts (stride 0) or permutes (the input's strides reordered).
Tensor gather_strided(const Tensor& x, const Shape& shape, const std::vector<long long>& strides) {
  Tensor out = ext::new_empty(x, shape);
  kernels::BroadcastLayout layout;
  layout.ndim = static_cast<int>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    layout.out_shape[d] = shape[d];
    layout.a_stride[d] = strides[d];
  }
  ext::dispatch(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::expand<T>(x.raw<T>(), out.raw<T>(), layout, T(1));
      },
      [&](auto stream) { kernels::cuda::expand(x.raw<float>(), out.raw<float>(), layout, 1.0f, stream); });
  return out;
}

std::vector<long long> row_major_strides(const Shape& shape) {
  std::vector<long long> strides(shape.size());
  long long stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

}  // namespace

Tensor reshape(const Tensor& input, Shape shape) { return input.reshape(std::move(shape)); }

Tensor unsqueeze(const Tensor& input, int dim) {
  ext::check_defined("unsqueeze", {"input", input});
  const int d = ext::normalize_dim("unsqueeze", dim, input.dim() + 1);
  Shape shape = input.shape();
  shape.insert(shape.begin() + d, 1);
  return input.reshape(shape);
}

Tensor permute(const Tensor& input, const std::vector<int>& dims) {
  ext::check_defined("permute", {"input", input});
  ext::check_floating("permute", {"input", input});
  if (is_half(input.dtype())) return permute(ext::widened(input), dims).to(input.dtype());
  const int nd = input.dim();
  EMBER_CHECK(static_cast<int>(dims.size()) == nd, ShapeError, "permute: ", dims.size(), " dims given for a tensor of ",
              nd, " dims (shape ", shape_str(input.shape()), ")");
  EMBER_CHECK(nd <= kernels::kMaxDims, ShapeError, "permute: at most ", kernels::kMaxDims, " dims");
  const std::vector<long long> in_strides = row_major_strides(input.shape());
  std::vector<bool> seen(static_cast<std::size_t>(nd), false);
  std::vector<int> inverse(static_cast<std::size_t>(nd));
  Shape shape(static_cast<std::size_t>(nd));
  std::vector<long long> strides(static_cast<std::size_t>(nd));
  for (int i = 0; i < nd; ++i) {
    const int d = ext::normalize_dim("permute", dims[static_cast<std::size_t>(i)], nd);
    EMBER_CHECK(!seen[static_cast<std::size_t>(d)], ValueError, "permute: dim ", dims[static_cast<std::size_t>(i)],
                " appears more than once");
    seen[static_cast<std::size_t>(d)] = true;
    shape[static_cast<std::size_t>(i)] = input.shape()[static_cast<std::size_t>(d)];
    strides[static_cast<std::size_t>(i)] = in_strides[static_cast<std::size_t>(d)];
    inverse[static_cast<std::size_t>(d)] = i;
  }
  Tensor out = gather_strided(input, shape, strides);
  if (autograd::needs_recording({&input})) {
    autograd::record(out, "permute", {&input},
                     [inverse](const Tensor& g, NeedsGrad) { return Gradients{permute(g, inverse)}; });
  }
  return out;
}

Tensor broadcast_to(const Tensor& input, const Shape& shape) {
  ext::check_defined("broadcast_to", {"input", input});
  ext::check_floating("broadcast_to", {"input", input});
  if (is_half(input.dtype())) return broadcast_to(ext::widened(input), shape).to(input.dtype());
  const Shape& in = input.shape();
  EMBER_CHECK(in.size() <= shape.size() && shape.size() <= static_cast<std::size_t>(kernels::kMaxDims), ShapeError,
              "broadcast_to: cannot broadcast shape ", shape_str(in), " to ", shape_str(shape));
  if (in == shape) return input;
  const std::vector<long long> in_strides = row_major_strides(in);
  std::vector<long long> strides(shape.size(), 0);
  const std::size_t lead = shape.size() - in.size();
  for (std::size_t d = 0; d < in.size(); ++d) {
    EMBER_CHECK(in[d] == shape[lead + d] || in[d] == 1, ShapeError, "broadcast_to: cannot broadcast shape ",
                shape_str(in), " to ", shape_str(shape), " (dim ", d, ": ", in[d], " vs ", shape[lead + d], ")");
    strides[lead + d] = in[d] == 1 ? 0 : in_strides[d];
  }
  Tensor out = gather_strided(input, shape, strides);
  if (autograd::needs_recording({&input})) {
    autograd::record(out, "broadcast_to", {&input},
                     [in](const Tensor& g, NeedsGrad) { return Gradients{sum_to(g, in)}; });
  }
  return out;
}

Tensor cat(std::initializer_list<Tensor> tensors, int dim) {
  return cat(std::span<const Tensor>(tensors.begin(), tensors.size()), dim);
}

Tensor cat(std::span<const Tensor> tensors, int dim) {
  EMBER_CHECK(!tensors.empty(), ValueError, "cat: expected a non-empty list of tensors");
  if (const ext::AutocastInputs cast{OpKey::cat, tensors}) return cat(std::span<const Tensor>(cast.all()), dim);
  const Tensor& first = tensors[0];
  ext::check_defined("cat", {"tensors[0]", first});
  EMBER_CHECK(first.dim() >= 1, ShapeError, "cat: zero-dimensional tensors cannot be concatenated");
  const std::size_t d = static_cast<std::size_t>(ext::normalize_dim("cat", dim, first.dim()));
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string name = "tensors[" + std::to_string(i) + "]";
    ext::check_defined("cat", {name.c_str(), t});
    ext::check_same_device("cat", {{"tensors[0]", first}, {name.c_str(), t}});
    ext::check_same_dtype("cat", {"tensors[0]", first}, {name.c_str(), t});
    bool compatible = t.dim() == first.dim();
    for (std::size_t k = 0; compatible && k < first.shape().size(); ++k)
      compatible = k == d || t.shape()[k] == first.shape()[k];
    EMBER_CHECK(compatible, ShapeError, "cat: ", name, " has shape ", shape_str(t.shape()), ", which does not match ",
                "tensors[0]'s ", shape_str(first.shape()), " outside dim ", d);
    out_shape[d] += t.shape()[d];
  }
  Tensor out = ext::new_empty(first, out_shape);
  const std::size_t rows = product(out_shape, 0, d), inner = product(out_shape, d + 1, out_shape.size());
  const std::size_t out_cols = static_cast<std::size_t>(out_shape[d]) * inner;
  std::size_t col = 0;
  std::vector<std::int64_t> offsets;
  for (const Tensor& t : tensors) {
    const std::size_t cols = static_cast<std::size_t>(t.shape()[d]) * inner;
    copy_block(t, 0, cols, out, col, out_cols, rows, cols);
    offsets.push_back(static_cast<std::int64_t>(col / (inner ? inner : 1)));
    col += cols;
  }
  if (autograd::needs_recording(tensors)) {
    std::vector<std::int64_t> sizes;
    for (const Tensor& t : tensors) sizes.push_back(t.shape()[d]);
    autograd::record(out, "cat", tensors, [d, offsets, sizes](const Tensor& g, NeedsGrad needs) {
      Gradients grads(sizes.size());
      for (std::size_t i = 0; i < sizes.size(); ++i)
        if (needs[i]) grads[i] = slice(g, static_cast<int>(d), offsets[i], sizes[i]);
      return grads;
    });
  }
  return out;
}

Tensor slice(const Tensor& input, int dim, std::int64_t start, std::int64_t length) {
  ext::check_defined("slice", {"input", input});
  EMBER_CHECK(input.dim() >= 1, ShapeError, "slice: cannot slice a 0-dimensional tensor");
  const std::size_t d = static_cast<std::size_t>(ext::normalize_dim("slice", dim, input.dim()));
  const std::int64_t extent = input.shape()[d];
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= extent, IndexError, "slice: [", start, ", ",
              start + length, ") is out of range for dim ", d, " of size ", extent);
  Shape out_shape = input.shape();
  out_shape[d] = length;
  Tensor out = ext::new_empty(input, out_shape);
  const std::size_t rows = product(out_shape, 0, d), inner = product(out_shape, d + 1, out_shape.size());
  copy_block(input, static_cast<std::size_t>(start) * inner, static_cast<std::size_t>(extent) * inner, out, 0,
             static_cast<std::size_t>(length) * inner, rows, static_cast<std::size_t>(length) * inner);
  if (autograd::needs_recording({&input})) {
    autograd::record(out, "slice", {&input}, [full = input.shape(), d, start, length](const Tensor& g, NeedsGrad) {
      Tensor grad_in = zeros(full, {.dtype = g.dtype(), .device = g.device()});
      const std::size_t rows = product(full, 0, d), inner = product(full, d + 1, full.size());
      copy_block(g, 0, static_cast<std::size_t>(length) * inner, grad_in, static_cast<std::size_t>(start) * inner,
                 static_cast<std::size_t>(full[d]) * inner, rows, static_cast<std::size_t>(length) * inner);
      return Gradients{grad_in};
    });
  }
  return out;
}

}  // namespace ember
