// Binary elementwise ops and comparisons, with NumPy's broadcasting: forward through
// kernels/elementwise.h (their formulas in kernels/elementwise_math.h), derivative rules beside
// each forward. The unary ops and activations are in core/ops/unary.cpp.
#include <algorithm>

#include "core/ops/dispatch.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/elementwise.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;
using ext::Arg;
using kernels::BinaryOp;

// Output shape and per-input strides for broadcasting a ∘ b, NumPy's rules: align shapes on the
// right; each pair of sizes must be equal or one of them 1.
kernels::BroadcastLayout broadcast_layout(const char* op, const Shape& a, const Shape& b, Shape& out_shape) {
  const std::size_t nd = std::max(a.size(), b.size());
  EMBER_CHECK(nd <= static_cast<std::size_t>(kernels::kMaxDims), ShapeError, op, ": broadcasting supports at most ",
              kernels::kMaxDims, " dims, got shapes ", shape_str(a), " and ", shape_str(b));
  kernels::BroadcastLayout layout;
  layout.ndim = static_cast<int>(nd);
  out_shape.assign(nd, 1);
  long long stride_a = 1, stride_b = 1;
  for (std::size_t i = 0; i < nd; ++i) {
    const std::size_t d = nd - 1 - i;
    const std::int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const std::int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    EMBER_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                " cannot be broadcast together (dim ", -static_cast<long long>(i) - 1, ": ", da, " vs ", db, ")");
    out_shape[d] = da == 1 ? db : da;
    layout.out_shape[d] = out_shape[d];
    layout.a_stride[d] = da == 1 ? 0 : stride_a;
    layout.b_stride[d] = db == 1 ? 0 : stride_b;
    stride_a *= da;
    stride_b *= db;
  }
  return layout;
}

void check_binary(const char* op, const Tensor& a, const Tensor& b) {
  ext::check_defined(op, {"input", a});
  ext::check_defined(op, {"other", b});
  ext::check_same_device(op, {{"input", a}, {"other", b}});
  ext::check_same_dtype(op, {"input", a}, {"other", b});
  ext::check_floating(op, {"input", a});
}

// Note [half precision]: whether the op computes on widened copies (after its argument checks).
bool half_operands(const char* op, const Tensor& a, const Tensor& b) {
  check_binary(op, a, b);
  return is_half(a.dtype());
}
// The same for add, sub, mul and div: CUDA's binary kernels take 16-bit data themselves (f32
// arithmetic, one rounding), and their gradients compute in f32 where a widened op's would
// (widened_grad): the widened op's bits, with no widened copies of the operands.
bool half_operands_on_cpu(const char* op, const Tensor& a, const Tensor& b) {
  return half_operands(op, a, b) && !a.is_cuda();
}
// A gradient formula f(g, saved...) as the widened op computes it: for 16-bit g in f32, the result
// rounded once to g's dtype.
template <class F, class... Saved>
Tensor widened_grad(F&& f, const Tensor& g, const Saved&... saved) {
  if (!is_half(g.dtype())) return f(g, saved...);
  return f(ext::widened(g), ext::widened(saved)...).to(g.dtype());
}

// out = a ∘ b, into `out` when given (in-place updates), else into a new tensor.
Tensor binary_kernel(BinaryOp op, const char* name, const Tensor& a, const Tensor& b, Tensor out = Tensor()) {
  check_binary(name, a, b);
  Shape out_shape;
  const bool same_shape = a.shape() == b.shape();
  kernels::BroadcastLayout layout;
  if (same_shape)
    out_shape = a.shape();
  else
    layout = broadcast_layout(name, a.shape(), b.shape(), out_shape);
  if (out.defined()) {
    EMBER_CHECK(out.shape() == out_shape, ShapeError, name, ": the result has shape ", shape_str(out_shape),
                " but the in-place target has shape ", shape_str(out.shape()));
  } else {
    out = ext::new_empty(a, out_shape);
  }
  const std::size_t n = static_cast<std::size_t>(out.numel());
  ext::dispatch_with_cuda_half(
      a,
      [&](auto zero) {
        using T = decltype(zero);
        if (same_shape)
          kernels::cpu::binary<T>(op, a.raw<T>(), b.raw<T>(), out.raw<T>(), n);
        else
          kernels::cpu::binary_broadcast<T>(op, a.raw<T>(), b.raw<T>(), out.raw<T>(), layout);
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        if (same_shape)
          kernels::cuda::binary(op, a.raw<T>(), b.raw<T>(), out.raw<T>(), n, stream);
        else
          kernels::cuda::binary_broadcast(op, a.raw<T>(), b.raw<T>(), out.raw<T>(), layout, stream);
      });
  return out;
}

// maximum/minimum: the value, and each operand's share of the gradient (½ at ties).
Tensor extreme(BinaryOp op, BinaryOp share, const char* name, const Tensor& a, const Tensor& b) {
  if (half_operands(name, a, b)) return extreme(op, share, name, ext::widened(a), ext::widened(b)).to(a.dtype());
  Tensor out = binary_kernel(op, name, a, b);
  if (autograd::needs_recording({&a, &b})) {
    autograd::record(
        out, name, {&a, &b},
        [share, name, a_saved = a.detach(), b_saved = b.detach()](const Tensor& g, NeedsGrad needs) {
          const auto part = [&](const Tensor& self, const Tensor& other) {
            return sum_to(mul(g, binary_kernel(share, name, self, other)), self.shape());
          };
          return Gradients{needs[0] ? part(a_saved, b_saved) : Tensor(), needs[1] ? part(b_saved, a_saved) : Tensor()};
        });
  }
  return out;
}

// out = cond ? a : b for same-shape, dense operands (cond u8).
Tensor select_kernel(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = ext::new_empty(a, a.shape());
  const std::size_t n = static_cast<std::size_t>(a.numel());
  ext::dispatch(
      a,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::select<T>(cond.raw<std::uint8_t>(), a.raw<T>(), b.raw<T>(), out.raw<T>(), n);
      },
      [&](auto stream) {
        kernels::cuda::select(cond.raw<std::uint8_t>(), a.raw<float>(), b.raw<float>(), out.raw<float>(), n, stream);
      });
  return out;
}

// A comparison as a u8 mask (the formula's 1 and 0, converted).
Tensor compare(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  if (half_operands(name, a, b)) return compare(op, name, ext::widened(a), ext::widened(b));
  NoGradGuard no_grad;
  return binary_kernel(op, name, a, b).to(DType::u8);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  if (half_operands_on_cpu("add", a, b)) return add(ext::widened(a), ext::widened(b)).to(a.dtype());
  Tensor out = binary_kernel(BinaryOp::add, "add", a, b);
  if (autograd::needs_recording({&a, &b})) {
    autograd::record(out, "add", {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g, NeedsGrad needs) {
      return Gradients{needs[0] ? sum_to(g, sa) : Tensor(), needs[1] ? sum_to(g, sb) : Tensor()};
    });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  if (half_operands_on_cpu("sub", a, b)) return sub(ext::widened(a), ext::widened(b)).to(a.dtype());
  Tensor out = binary_kernel(BinaryOp::sub, "sub", a, b);
  if (autograd::needs_recording({&a, &b})) {
    autograd::record(out, "sub", {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g, NeedsGrad needs) {
      return Gradients{needs[0] ? sum_to(g, sa) : Tensor(), needs[1] ? sum_to(neg(g), sb) : Tensor()};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  if (half_operands_on_cpu("mul", a, b)) return mul(ext::widened(a), ext::widened(b)).to(a.dtype());
  Tensor out = binary_kernel(BinaryOp::mul, "mul", a, b);
  if (autograd::needs_recording({&a, &b})) {
    autograd::record(out, "mul", {&a, &b},
                     [a_saved = a.detach(), b_saved = b.detach()](const Tensor& g, NeedsGrad needs) {
                       const auto part = [](const Tensor& g_, const Tensor& other, const Tensor& self) {
                         return sum_to(mul(g_, other), self.shape());
                       };
                       return Gradients{needs[0] ? widened_grad(part, g, b_saved, a_saved) : Tensor(),
                                        needs[1] ? widened_grad(part, g, a_saved, b_saved) : Tensor()};
                     });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  if (half_operands_on_cpu("div", a, b)) return div(ext::widened(a), ext::widened(b)).to(a.dtype());
  Tensor out = binary_kernel(BinaryOp::div, "div", a, b);
  if (autograd::needs_recording({&a, &b})) {
    // d(a/b)/da = 1/b; d(a/b)/db = −a/b² = −out/b, with the f32 quotient for 16-bit data (the
    // widened op's: a/b recomputed from the saved a, not the rounded out).
    const bool half = is_half(a.dtype());
    autograd::record(out, "div", {&a, &b},
                     [sa = a.shape(), b_saved = b.detach(), out_saved = half ? Tensor() : out.detach(),
                      a_saved = half ? a.detach() : Tensor()](const Tensor& g, NeedsGrad needs) {
                       const auto da = [&](const Tensor& g_, const Tensor& b_) { return sum_to(div(g_, b_), sa); };
                       const auto db = [](const Tensor& g_, const Tensor& b_, const Tensor& out_) {
                         return sum_to(neg(div(mul(g_, out_), b_)), b_.shape());
                       };
                       const auto db_half = [&](const Tensor& g_, const Tensor& b_, const Tensor& a_) {
                         return db(g_, b_, div(a_, b_));
                       };
                       Tensor b_grad;
                       if (needs[1])
                         b_grad =
                             a_saved.defined() ? widened_grad(db_half, g, b_saved, a_saved) : db(g, b_saved, out_saved);
                       return Gradients{needs[0] ? widened_grad(da, g, b_saved) : Tensor(), b_grad};
                     });
  }
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return extreme(BinaryOp::maximum, BinaryOp::maximum_share, "maximum", a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return extreme(BinaryOp::minimum, BinaryOp::minimum_share, "minimum", a, b);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (half_operands("where", a, b)) return where(cond, ext::widened(a), ext::widened(b)).to(a.dtype());
  ext::check_defined("where", {"condition", cond});
  ext::check_same_device("where", {{"input", a}, {"condition", cond}});
  Shape ab_shape, shape;
  broadcast_layout("where", a.shape(), b.shape(), ab_shape);
  broadcast_layout("where", cond.shape(), ab_shape, shape);
  Tensor mask, out;
  {
    NoGradGuard no_grad;
    // Nonzero is true, as PyTorch reads a condition: 1 or 0 in a's dtype, broadcast, then u8.
    const Tensor zero = zeros({}, {.dtype = a.dtype(), .device = a.device()});
    mask = broadcast_to(binary_kernel(BinaryOp::ne, "where", cond.to(a.dtype()), zero), shape).to(DType::u8);
    out = select_kernel(mask, broadcast_to(a, shape), broadcast_to(b, shape));
  }
  if (autograd::needs_recording({&a, &b})) {
    autograd::record(out, "where", {&a, &b}, [mask, sa = a.shape(), sb = b.shape()](const Tensor& g, NeedsGrad needs) {
      const Tensor zero = zeros(g.shape(), {.dtype = g.dtype(), .device = g.device()});
      return Gradients{needs[0] ? sum_to(select_kernel(mask, g, zero), sa) : Tensor(),
                       needs[1] ? sum_to(select_kernel(mask, zero, g), sb) : Tensor()};
    });
  }
  return out;
}

Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::gt, "gt", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::lt, "lt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(BinaryOp::ge, "ge", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(BinaryOp::le, "le", a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(BinaryOp::ne, "ne", a, b); }
Tensor gt(const Tensor& a, double b) { return gt(a, full({}, b, {.dtype = a.dtype(), .device = a.device()})); }
Tensor lt(const Tensor& a, double b) { return lt(a, full({}, b, {.dtype = a.dtype(), .device = a.device()})); }

Tensor& add_(Tensor& input, const Tensor& other) {
  EMBER_CHECK(!(autograd::is_grad_enabled() && input.requires_grad()), AutogradError,
              "add_: a tensor that requires grad cannot be modified in place while gradients are recorded; wrap "
              "the update in NoGradGuard");
  if (half_operands("add_", input, other))
    return input.copy_(add(ext::widened(input), ext::widened(other)).to(input.dtype()));
  binary_kernel(BinaryOp::add, "add_", input, other, input);
  return input;
}

}  // namespace ember
