// Reductions: sum and mean (with their broadcasting backward), sum_to, and the
// non-differentiable argmax, max, count_equal and accuracy.
#include <algorithm>

#include "core/ops/autocast.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;

// One pass of the sum kernel over x viewed as [outer, reduce, inner], into `out_dtype` (x's, or
// f32 between the passes over 16-bit data on CUDA, whose sums round once, in the last pass).
Tensor sum_pass(const Tensor& x, DType out_dtype, const Shape& out_shape, std::size_t outer, std::size_t reduce,
                std::size_t inner, double scale) {
  Tensor out = ext::new_empty(x, out_shape, out_dtype);
  ext::dispatch_with_cuda_half(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::sum<T>(x.raw<T>(), out.raw<T>(), outer, reduce, inner, static_cast<T>(scale));
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        const std::size_t ws = kernels::sum_workspace_size(outer, reduce, inner);
        Tensor workspace = ws ? ext::new_empty(x, {static_cast<std::int64_t>(ws)}, DType::f32) : Tensor();
        ext::visit_float_or_half(out.dtype(), [&](auto out_zero) {
          using Out = decltype(out_zero);
          kernels::cuda::sum(x.raw<T>(), out.raw<Out>(), outer, reduce, inner, static_cast<float>(scale),
                             ws ? workspace.raw<float>() : nullptr, stream);
        });
      });
  return out;
}

// Sums the dims marked in `mask` and keeps them as size 1. Each run of adjacent marked dims is
// one kernel pass; the scale is applied in the last pass.
Tensor sum_keepdim(const Tensor& x, const std::vector<bool>& mask, double scale) {
  if (is_half(x.dtype()) && !x.is_cuda()) return sum_keepdim(ext::widened(x), mask, scale).to(x.dtype());
  Tensor current = x;
  Shape shape = x.shape();
  const int nd = static_cast<int>(shape.size());
  std::vector<std::pair<int, int>> runs;  // [first, last] dims of each run
  for (int d = 0; d < nd; ++d) {
    if (!mask[static_cast<std::size_t>(d)]) continue;
    if (!runs.empty() && runs.back().second == d - 1)
      runs.back().second = d;
    else
      runs.push_back({d, d});
  }
  if (runs.empty()) return x.clone();
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto [first, last] = runs[r];
    std::size_t outer = 1, reduce = 1, inner = 1;
    for (int d = 0; d < first; ++d) outer *= static_cast<std::size_t>(shape[static_cast<std::size_t>(d)]);
    for (int d = first; d <= last; ++d) reduce *= static_cast<std::size_t>(shape[static_cast<std::size_t>(d)]);
    for (int d = last + 1; d < nd; ++d) inner *= static_cast<std::size_t>(shape[static_cast<std::size_t>(d)]);
    for (int d = first; d <= last; ++d) shape[static_cast<std::size_t>(d)] = 1;
    const bool last_pass = r + 1 == runs.size();
    const DType between = is_half(x.dtype()) ? DType::f32 : x.dtype();
    current = sum_pass(current, last_pass ? x.dtype() : between, shape, outer, reduce, inner, last_pass ? scale : 1.0);
  }
  return current;
}

// Broadcasts `g` (whose shape broadcasts to `shape`) up to `shape`, times `scale` (16-bit data on
// a widened copy: the product rounded once).
Tensor expand_to(const Tensor& g, const Shape& shape, double scale) {
  if (is_half(g.dtype())) return expand_to(ext::widened(g), shape, scale).to(g.dtype());
  Tensor out = ext::new_empty(g, shape);
  kernels::BroadcastLayout layout;
  layout.ndim = static_cast<int>(shape.size());
  const Shape& gs = g.shape();
  long long stride = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::size_t d = shape.size() - 1 - i;
    const std::int64_t gd = i < gs.size() ? gs[gs.size() - 1 - i] : 1;
    layout.out_shape[d] = shape[d];
    layout.a_stride[d] = gd == 1 ? 0 : stride;
    stride *= gd;
  }
  ext::dispatch(
      g,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::expand<T>(g.raw<T>(), out.raw<T>(), layout, static_cast<T>(scale));
      },
      [&](auto stream) {
        kernels::cuda::expand(g.raw<float>(), out.raw<float>(), layout, static_cast<float>(scale), stream);
      });
  return out;
}

Tensor reduce(const char* name, const Tensor& x, std::vector<int> dims, bool keepdim, bool mean) {
  ext::check_defined(name, {"input", x});
  ext::check_floating(name, {"input", x});
  // Note [half precision]: CUDA sums 16-bit data itself (f32 sums, one rounding: the same bits).
  if (is_half(x.dtype()) && !x.is_cuda())
    return reduce(name, ext::widened(x), std::move(dims), keepdim, mean).to(x.dtype());
  const int nd = x.dim();
  std::vector<bool> mask(static_cast<std::size_t>(nd), dims.empty());
  for (int d : dims) {
    const int n = ext::normalize_dim(name, d, nd);
    EMBER_CHECK(!mask[static_cast<std::size_t>(n)], ValueError, name, ": dim ", d, " appears more than once");
    mask[static_cast<std::size_t>(n)] = true;
  }
  std::int64_t count = 1;
  Shape out_shape;
  for (int d = 0; d < nd; ++d) {
    const std::int64_t extent = x.shape()[static_cast<std::size_t>(d)];
    if (mask[static_cast<std::size_t>(d)]) count *= extent;
    if (!mask[static_cast<std::size_t>(d)])
      out_shape.push_back(extent);
    else if (keepdim)
      out_shape.push_back(1);
  }
  const double scale = mean ? 1.0 / static_cast<double>(count) : 1.0;  // mean of nothing is NaN, as in PyTorch
  Tensor out;
  {
    NoGradGuard no_grad;  // the passes below are one op for autograd
    out = sum_keepdim(x, mask, scale).reshape(out_shape);
  }
  if (autograd::needs_recording({&x})) {
    Shape kept = x.shape();
    for (int d = 0; d < nd; ++d)
      if (mask[static_cast<std::size_t>(d)]) kept[static_cast<std::size_t>(d)] = 1;
    autograd::record(out, name, {&x}, [kept, full = x.shape(), scale](const Tensor& g, NeedsGrad) {
      return Gradients{expand_to(g.reshape(kept), full, scale)};
    });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) {
  if (const ext::AutocastInputs cast{OpKey::sum, {&x}}) return sum(cast[0]);
  return reduce("sum", x, {}, false, false);
}
Tensor sum(const Tensor& x, std::vector<int> dims, bool keepdim) {
  if (const ext::AutocastInputs cast{OpKey::sum, {&x}}) return sum(cast[0], std::move(dims), keepdim);
  EMBER_CHECK(!dims.empty(), ValueError, "sum: the list of dims is empty; call sum(x) to sum everything");
  return reduce("sum", x, std::move(dims), keepdim, false);
}
Tensor mean(const Tensor& x) { return reduce("mean", x, {}, false, true); }
Tensor mean(const Tensor& x, std::vector<int> dims, bool keepdim) {
  EMBER_CHECK(!dims.empty(), ValueError, "mean: the list of dims is empty; call mean(x) to average everything");
  return reduce("mean", x, std::move(dims), keepdim, true);
}

namespace {
// From existing ops (dims empty: everything), so that autograd and both devices come with them.
Tensor variance(const Tensor& x, const std::vector<int>& dims, int correction, bool keepdim) {
  ext::check_defined("var", {"input", x});
  ext::check_floating("var", {"input", x});
  EMBER_CHECK(correction >= 0, ValueError, "var: correction must be non-negative, got ", correction);
  if (is_half(x.dtype())) return variance(ext::widened(x), dims, correction, keepdim).to(x.dtype());
  std::int64_t count = dims.empty() ? x.numel() : 1;
  for (int d : dims) count *= x.size(d);
  const Tensor centered = dims.empty() ? x - mean(x) : x - mean(x, dims, true);
  const Tensor squares = centered * centered;
  const Tensor total = dims.empty() ? sum(squares) : sum(squares, dims, keepdim);
  // N ≤ correction: the result is inf or NaN, as in PyTorch.
  return total / static_cast<double>(count - correction);
}
}  // namespace

Tensor var(const Tensor& x) { return variance(x, {}, 1, false); }
Tensor std(const Tensor& x) {
  if (x.defined() && is_half(x.dtype())) return std(ext::widened(x)).to(x.dtype());  // rounded once
  return sqrt(var(x));
}
Tensor var(const Tensor& x, std::vector<int> dims, int correction, bool keepdim) {
  EMBER_CHECK(!dims.empty(), ValueError, "var: the list of dims is empty; call var(x) for everything");
  return variance(x, dims, correction, keepdim);
}
Tensor std(const Tensor& x, std::vector<int> dims, int correction, bool keepdim) {
  if (x.defined() && is_half(x.dtype()))
    return std(ext::widened(x), std::move(dims), correction, keepdim).to(x.dtype());
  return sqrt(var(x, std::move(dims), correction, keepdim));
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const Shape& xs = x.shape();
  EMBER_CHECK(shape.size() <= xs.size(), ShapeError, "sum_to: cannot sum shape ", shape_str(xs), " down to ",
              shape_str(shape));
  const std::size_t lead = xs.size() - shape.size();
  std::vector<int> dims;
  for (std::size_t d = 0; d < xs.size(); ++d) {
    if (d < lead) {
      dims.push_back(static_cast<int>(d));
      continue;
    }
    const std::int64_t target = shape[d - lead];
    EMBER_CHECK(target == xs[d] || target == 1, ShapeError, "sum_to: shape ", shape_str(shape),
                " does not broadcast to ", shape_str(xs));
    if (target == 1 && xs[d] != 1) dims.push_back(static_cast<int>(d));
  }
  if (dims.empty()) return x.reshape(shape);
  return reduce("sum_to", x, dims, true, false).reshape(shape);
}

Tensor max(const Tensor& x, int dim) {
  ext::check_defined("max", {"input", x});
  ext::check_floating("max", {"input", x});
  if (is_half(x.dtype())) return max(ext::widened(x), dim).to(x.dtype());
  EMBER_CHECK(x.dim() >= 1 && ext::normalize_dim("max", dim, x.dim()) == x.dim() - 1, ValueError,
              "max: only the last dim is supported (dim=-1)");
  const std::size_t cols = static_cast<std::size_t>(x.shape().back());
  EMBER_CHECK(cols > 0, ShapeError, "max: cannot reduce an empty last dim (shape ", shape_str(x.shape()), ")");
  const std::size_t rows = static_cast<std::size_t>(x.numel()) / cols;
  Tensor values = ext::new_empty(x, Shape(x.shape().begin(), x.shape().end() - 1));
  ext::dispatch(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::max_last_dim<T>(x.raw<T>(), values.raw<T>(), nullptr, rows, cols);
      },
      [&](auto stream) {
        kernels::cuda::max_last_dim(x.raw<float>(), values.raw<float>(), nullptr, rows, cols, stream);
      });
  return values;
}

Tensor argmax(const Tensor& x, int dim) {
  ext::check_defined("argmax", {"input", x});
  ext::check_floating("argmax", {"input", x});
  if (is_half(x.dtype())) return argmax(ext::widened(x), dim);
  EMBER_CHECK(x.dim() >= 1 && ext::normalize_dim("argmax", dim, x.dim()) == x.dim() - 1, ValueError,
              "argmax: only the last dim is supported (dim=-1)");
  const std::size_t cols = static_cast<std::size_t>(x.shape().back());
  EMBER_CHECK(cols > 0, ShapeError, "argmax: cannot reduce an empty last dim (shape ", shape_str(x.shape()), ")");
  const std::size_t rows = static_cast<std::size_t>(x.numel()) / cols;
  Tensor indices = ext::new_empty(x, Shape(x.shape().begin(), x.shape().end() - 1), DType::i64);
  ext::dispatch(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::max_last_dim<T>(x.raw<T>(), nullptr, indices.raw<std::int64_t>(), rows, cols);
      },
      [&](auto stream) {
        kernels::cuda::max_last_dim(x.raw<float>(), nullptr, indices.raw<std::int64_t>(), rows, cols, stream);
      });
  return indices;
}

Tensor count_equal(const Tensor& a, const Tensor& b) {
  ext::check_defined("count_equal", {"input", a});
  ext::check_defined("count_equal", {"other", b});
  ext::check_same_device("count_equal", {{"input", a}, {"other", b}});
  ext::check_dtype("count_equal", {"input", a}, {DType::i64, DType::i32});
  ext::check_dtype("count_equal", {"other", b}, {DType::i64, DType::i32});
  EMBER_CHECK(a.numel() == b.numel(), ShapeError, "count_equal: 'input' has ", a.numel(), " elements (shape ",
              shape_str(a.shape()), ") but 'other' has ", b.numel(), " (shape ", shape_str(b.shape()), ")");
  // The kernels are instantiated for (i64, i32), (i64, i64) and (i32, i32); order the pair so.
  const Tensor& wide = a.dtype() == DType::i64 ? a : b;
  const Tensor& narrow = a.dtype() == DType::i64 ? b : a;
  Tensor count = ext::new_empty(a, {}, DType::i64);
  const std::size_t n = static_cast<std::size_t>(a.numel());
  auto run = [&](auto x_zero, auto y_zero) {
    using X = decltype(x_zero);
    using Y = decltype(y_zero);
    ext::dispatch_device(
        a, [&] { kernels::cpu::count_equal<X, Y>(wide.raw<X>(), narrow.raw<Y>(), count.raw<std::int64_t>(), n); },
        [&](auto stream) {
          kernels::cuda::count_equal<X, Y>(wide.raw<X>(), narrow.raw<Y>(), count.raw<std::int64_t>(), n, stream);
        });
  };
  if (wide.dtype() == DType::i32)
    run(std::int32_t{}, std::int32_t{});
  else if (narrow.dtype() == DType::i32)
    run(std::int64_t{}, std::int32_t{});
  else
    run(std::int64_t{}, std::int64_t{});
  return count;
}

Tensor accuracy(const Tensor& logits, const Tensor& target) {
  ext::check_defined("accuracy", {"input", logits});
  ext::check_defined("accuracy", {"target", target});
  ext::check_same_device("accuracy", {{"input", logits}, {"target", target}});
  ext::check_dim("accuracy", {"input", logits}, 2);
  EMBER_CHECK(target.dim() == 1 && target.shape()[0] == logits.shape()[0], ShapeError,
              "accuracy: 'target' must have "
              "shape [",
              logits.shape()[0], "] to match 'input' of shape ", shape_str(logits.shape()), ", but it has shape ",
              shape_str(target.shape()));
  NoGradGuard no_grad;
  const Tensor count = count_equal(argmax(logits.detach()), target).to(DType::f32);
  const double rows = static_cast<double>(logits.shape()[0]);
  return affine(count, rows > 0 ? 1.0 / rows : 0.0, 0.0);
}

}  // namespace ember
