// Matrix ops: matmul, linear and transpose, on cuBLAS / OpenBLAS through kernels/gemm.h.
// A transpose in a product is a flag to the GEMM, never a copy.
#include "core/ops/autocast.h"
#include "core/ops/dispatch.h"
#include "core/ops/fused.h"
#include "core/ops/op_helpers.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/bias_activation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/layout.h"
#include "kernels/reduce.h"

namespace ember {
namespace {

using autograd::Gradients;
using autograd::NeedsGrad;
using kernels::Transpose;

// c = op(a)·op(b) + beta·c for 2-D a, b, c (row-major, dense).
void gemm_into(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b, Tensor& c, double beta) {
  const std::size_t m = static_cast<std::size_t>(c.shape()[0]);
  const std::size_t n = static_cast<std::size_t>(c.shape()[1]);
  const std::size_t k = static_cast<std::size_t>(ta == Transpose::no ? a.shape()[1] : a.shape()[0]);
  const std::size_t lda = static_cast<std::size_t>(a.shape()[1]);
  const std::size_t ldb = static_cast<std::size_t>(b.shape()[1]);
  ext::dispatch(
      a,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::gemm<T>(ta, tb, m, n, k, T(1), a.raw<T>(), lda, b.raw<T>(), ldb, static_cast<T>(beta), c.raw<T>(),
                              n);
      },
      [&](auto stream) {
        kernels::cuda::gemm(ta, tb, m, n, k, 1.0f, a.raw<float>(), lda, b.raw<float>(), ldb, static_cast<float>(beta),
                            c.raw<float>(), n, stream);
      });
}

// The CPU's bf16 GEMM on op(a)·op(b) into c [m, n]: `product(m, n, k, a, lda, b, ldb)` calls
// gemm_bf16 or gemm_bf16_rounded with c. It reads A as stored, so a transposed A is copied first.
template <class Product>
void bf16_product(Transpose ta, const Tensor& a, const Tensor& b, const Tensor& c, Product product) {
  const Tensor a_rows = ta == Transpose::yes ? transpose(a.detach()) : a;
  const auto k = static_cast<std::size_t>(a_rows.shape()[1]);
  product(static_cast<std::size_t>(c.shape()[0]), static_cast<std::size_t>(c.shape()[1]), k, a_rows.raw<bfloat16>(), k,
          b.raw<bfloat16>(), static_cast<std::size_t>(b.shape()[1]));
}

// cuBLAS's bf16/f16 GEMM on CUDA (f32 compute, tensor cores) into c: f32 (added to when
// `accumulate`), or a's dtype with each sum rounded once.
void cuda_half_product(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b, const Tensor& c, bool accumulate) {
  const auto k = static_cast<std::size_t>(ta == Transpose::no ? a.shape()[1] : a.shape()[0]);
  ext::dispatch_device(
      a.device(), [] { throw DeviceError("cuda_half_product: a CPU tensor"); },
      [&](auto stream) {
        kernels::cuda::gemm_half(ta, tb, static_cast<std::size_t>(c.shape()[0]), static_cast<std::size_t>(c.shape()[1]),
                                 k, a.dtype(), a.raw_bytes(), static_cast<std::size_t>(a.shape()[1]), b.raw_bytes(),
                                 static_cast<std::size_t>(b.shape()[1]), c.dtype(), c.raw_bytes(),
                                 static_cast<std::size_t>(c.shape()[1]), accumulate, stream);
      });
}

// A product of bf16 or f16 operands in f32 (Note [half precision]), plus c (f32) when c is given:
// the bf16 GEMM for bf16 on the CPU, cuBLAS's half GEMM on CUDA, else the f32 GEMM on widened
// copies.
Tensor half_product(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b, Tensor c = Tensor()) {
  const std::int64_t m = ta == Transpose::no ? a.shape()[0] : a.shape()[1];
  const std::int64_t n = tb == Transpose::no ? b.shape()[1] : b.shape()[0];
  const bool accumulate = c.defined();
  if (!accumulate) c = ext::new_empty(a, {m, n}, DType::f32);
  if (ext::uses_cpu_bf16_kernels(a)) {
    bf16_product(ta, a, b, c, [&](auto m_, auto n_, auto k, auto a_, auto lda, auto b_, auto ldb) {
      kernels::cpu::gemm_bf16(tb, m_, n_, k, a_, lda, b_, ldb, c.raw<float>(), n_, accumulate);
    });
    return c;
  }
  if (a.is_cuda()) {
    cuda_half_product(ta, tb, a, b, c, accumulate);
    return c;
  }
  gemm_into(ta, tb, a.detach().to(DType::f32), b.detach().to(DType::f32), c, accumulate ? 1.0 : 0.0);
  return c;
}

// op(a)·op(b) in a and b's dtype (a 16-bit product is rounded once from its f32 result; the CPU's
// bf16 GEMM and cuBLAS round their own sums, without an f32 matrix).
Tensor gemm(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b) {
  const auto rounded_here = [&] {
    return ext::new_empty(
        a, {ta == Transpose::no ? a.shape()[0] : a.shape()[1], tb == Transpose::no ? b.shape()[1] : b.shape()[0]});
  };
  if (ext::uses_cpu_bf16_kernels(a)) {
    Tensor c = rounded_here();
    bf16_product(ta, a, b, c, [&](auto m, auto n, auto k, auto a_, auto lda, auto b_, auto ldb) {
      kernels::cpu::gemm_bf16_rounded(tb, m, n, k, a_, lda, b_, ldb, c.raw<bfloat16>(), n);
    });
    return c;
  }
  if (is_half(a.dtype()) && a.is_cuda()) {
    Tensor c = rounded_here();
    cuda_half_product(ta, tb, a, b, c, false);
    return c;
  }
  if (is_half(a.dtype())) return half_product(ta, tb, a, b).to(a.dtype());
  const std::int64_t m = ta == Transpose::no ? a.shape()[0] : a.shape()[1];
  const std::int64_t n = tb == Transpose::no ? b.shape()[1] : b.shape()[0];
  Tensor c = ext::new_empty(a, {m, n});
  gemm_into(ta, tb, a, b, c, 0.0);
  return c;
}

// bias [n] repeated over m rows, as the starting value of a GEMM with beta = 1.
Tensor rows_of(const Tensor& bias, std::int64_t m) {
  Tensor out = ext::new_empty(bias, {m, bias.shape()[0]});
  kernels::BroadcastLayout layout;
  layout.ndim = 2;
  layout.out_shape[0] = m;
  layout.out_shape[1] = bias.shape()[0];
  layout.a_stride[0] = 0;
  layout.a_stride[1] = 1;
  ext::dispatch(
      bias,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::expand<T>(bias.raw<T>(), out.raw<T>(), layout, T(1));
      },
      [&](auto stream) { kernels::cuda::expand(bias.raw<float>(), out.raw<float>(), layout, 1.0f, stream); });
  return out;
}

// x·Wᵀ + b: on the CPU the bias added as the GEMM stores its sums (kernels::cpu::gemm_bias), on
// CUDA a GEMM with β = 1 over the bias's rows. The same bits either way.
Tensor biased_product(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const auto m = static_cast<std::size_t>(x.shape()[0]), n = static_cast<std::size_t>(weight.shape()[0]),
             k = static_cast<std::size_t>(x.shape()[1]);
  return ext::dispatch(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        Tensor y = ext::new_empty(x, {x.shape()[0], weight.shape()[0]});
        kernels::cpu::gemm_bias<T>(Transpose::no, Transpose::yes, m, n, k, x.raw<T>(), k, weight.raw<T>(), k,
                                   bias.raw<T>(), y.raw<T>(), n);
        return y;
      },
      [&](auto) {
        Tensor y = rows_of(bias, x.shape()[0]);
        gemm_into(Transpose::no, Transpose::yes, x, weight, y, 1.0);
        return y;
      });
}

}  // namespace

namespace {

// A product of 2-D a and b, recorded for autograd.
Tensor matmul_2d(const Tensor& a, const Tensor& b) {
  Tensor out = gemm(Transpose::no, Transpose::no, a, b);
  if (autograd::needs_recording({&a, &b})) {
    autograd::record(out, "matmul", {&a, &b},
                     [a_saved = a.detach(), b_saved = b.detach()](const Tensor& g, NeedsGrad needs) {
                       return Gradients{needs[0] ? gemm(Transpose::no, Transpose::yes, g, b_saved) : Tensor(),  // g·bᵀ
                                        needs[1] ? gemm(Transpose::yes, Transpose::no, a_saved, g) : Tensor()};  // aᵀ·g
                     });
  }
  return out;
}

// op(a_i)·op(b_i) for every batch index i of a [..., ., .] and b [..., ., .] (f32 or f64) with the
// same batch dims.
Tensor gemm_batched(Transpose ta, Transpose tb, const Tensor& a, const Tensor& b) {
  const std::size_t nd = a.shape().size();
  const auto dim = [](const Tensor& t, std::size_t from_end) {
    return static_cast<std::size_t>(t.shape()[t.shape().size() - from_end]);
  };
  const std::size_t a_rows = dim(a, 2), a_cols = dim(a, 1), b_rows = dim(b, 2), b_cols = dim(b, 1);
  const std::size_t m = ta == Transpose::no ? a_rows : a_cols, k = ta == Transpose::no ? a_cols : a_rows;
  const std::size_t n = tb == Transpose::no ? b_cols : b_rows;
  Shape out_shape(a.shape().begin(), a.shape().end() - 2);
  out_shape.push_back(static_cast<std::int64_t>(m));
  out_shape.push_back(static_cast<std::int64_t>(n));
  Tensor c = ext::new_empty(a, out_shape);
  const std::size_t batch = static_cast<std::size_t>(numel_of(Shape(a.shape().begin(), a.shape().begin() + nd - 2)));
  ext::dispatch(
      a,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::gemm_batched<T>(ta, tb, batch, m, n, k, a.raw<T>(), a_cols, a_rows * a_cols, b.raw<T>(), b_cols,
                                      b_rows * b_cols, c.raw<T>(), n, m * n);
      },
      [&](auto stream) {
        kernels::cuda::gemm_batched(ta, tb, batch, m, n, k, a.raw<float>(), a_cols, a_rows * a_cols, b.raw<float>(),
                                    b_cols, b_rows * b_cols, c.raw<float>(), n, m * n, stream);
      });
  return c;
}

// The batch dims of a and b broadcast together (NumPy's rules), or a ShapeError naming both.
Shape broadcast_batch(const Tensor& a, const Tensor& b) {
  const Shape sa(a.shape().begin(), a.shape().end() - 2), sb(b.shape().begin(), b.shape().end() - 2);
  Shape out(std::max(sa.size(), sb.size()), 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t da = i < out.size() - sa.size() ? 1 : sa[i - (out.size() - sa.size())];
    const std::int64_t db = i < out.size() - sb.size() ? 1 : sb[i - (out.size() - sb.size())];
    EMBER_CHECK(da == db || da == 1 || db == 1, ShapeError, "matmul: the batch dims of shapes ", shape_str(a.shape()),
                " and ", shape_str(b.shape()), " do not broadcast (", da, " against ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// a [..., m, k] · b [..., k, n] with broadcast batch dims; each operand first broadcast to the
// common batch (broadcast_to, whose gradient sums back over the dims it repeated).
Tensor matmul_batched(const Tensor& a, const Tensor& b) {
  // 16-bit operands in f32 through the casts (Note [half precision]): a broadcast operand's
  // gradient, a sum over the batch, is then rounded once too.
  if (is_half(a.dtype())) return matmul_batched(a.to(DType::f32), b.to(DType::f32)).to(a.dtype());
  Shape batch = broadcast_batch(a, b);
  const auto widened_to = [&](const Tensor& t) {
    Shape full = batch;
    full.push_back(t.shape()[t.dim() - 2]);
    full.push_back(t.shape().back());
    return t.shape() == full ? t : broadcast_to(t, full);
  };
  const Tensor a3 = widened_to(a), b3 = widened_to(b);
  Tensor out = gemm_batched(Transpose::no, Transpose::no, a3.detach(), b3.detach());
  if (autograd::needs_recording({&a3, &b3})) {
    autograd::record(
        out, "matmul", {&a3, &b3}, [a_saved = a3.detach(), b_saved = b3.detach()](const Tensor& g, NeedsGrad needs) {
          return Gradients{needs[0] ? gemm_batched(Transpose::no, Transpose::yes, g, b_saved) : Tensor(),   // g·bᵀ
                           needs[1] ? gemm_batched(Transpose::yes, Transpose::no, a_saved, g) : Tensor()};  // aᵀ·g
        });
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (const ext::AutocastInputs cast{OpKey::matmul, {&a, &b}}) return matmul(cast[0], cast[1]);
  ext::check_defined("matmul", {"input", a});
  ext::check_defined("matmul", {"other", b});
  ext::check_same_device("matmul", {{"input", a}, {"other", b}});
  ext::check_same_dtype("matmul", {"input", a}, {"other", b});
  ext::check_floating("matmul", {"input", a});
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "matmul: both arguments need at least 1 dim, got shapes ",
              shape_str(a.shape()), " and ", shape_str(b.shape()));
  // Vectors as PyTorch takes them: a 1-D input is a row [1, k], a 1-D other a column [k, 1], and
  // the dim added for it is dropped from the result.
  if (a.dim() == 1 || b.dim() == 1) {
    Shape a_shape = a.shape(), b_shape = b.shape();
    if (a.dim() == 1) a_shape.insert(a_shape.begin(), 1);
    if (b.dim() == 1) b_shape.push_back(1);
    Tensor out = matmul(reshape(a, a_shape), reshape(b, b_shape));
    Shape out_shape = out.shape();
    if (b.dim() == 1) out_shape.pop_back();
    if (a.dim() == 1) out_shape.erase(out_shape.end() - (b.dim() == 1 ? 1 : 2));
    return reshape(out, out_shape);
  }
  EMBER_CHECK(a.shape().back() == b.shape()[b.dim() - 2], ShapeError, "matmul: shapes ", shape_str(a.shape()), " and ",
              shape_str(b.shape()), " cannot be multiplied (", a.shape().back(), " != ", b.shape()[b.dim() - 2], ")");
  return a.dim() == 2 && b.dim() == 2 ? matmul_2d(a, b) : matmul_batched(a, b);
}

namespace {

// The checks linear and linear_relu share; returns the number of rows of the flattened input.
std::int64_t check_linear(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias) {
  ext::check_defined(op, {"input", input});
  ext::check_defined(op, {"weight", weight});
  ext::check_same_device(op, {{"input", input}, {"weight", weight}, {"bias", bias}});
  ext::check_same_dtype(op, {"input", input}, {"weight", weight});
  ext::check_floating(op, {"input", input});
  ext::check_dim(op, {"weight", weight}, 2);
  EMBER_CHECK(input.dim() >= 1 && input.shape().back() == weight.shape()[1], ShapeError, op, ": 'input' of shape ",
              shape_str(input.shape()), " does not match 'weight' of shape ", shape_str(weight.shape()),
              " (expected input's last dim to be ", weight.shape()[1], ")");
  if (bias.defined()) {
    ext::check_same_dtype(op, {"input", input}, {"bias", bias});
    EMBER_CHECK(bias.dim() == 1 && bias.shape()[0] == weight.shape()[0], ShapeError, op, ": 'bias' must have shape [",
                weight.shape()[0], "], but it has shape ", shape_str(bias.shape()));
  }
  return numel_of(Shape(input.shape().begin(), input.shape().end() - 1));
}

Shape with_last(Shape shape, std::int64_t last) {
  shape.back() = last;
  return shape;
}

}  // namespace

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (const ext::AutocastInputs cast{OpKey::linear, {&input, &weight, &bias}}) return linear(cast[0], cast[1], cast[2]);
  const std::int64_t rows = check_linear("linear", input, weight, bias);
  const std::int64_t in = weight.shape()[1], out_features = weight.shape()[0];
  const Tensor x2 = input.detach().reshape({rows, in});
  Tensor y;
  if (is_half(input.dtype())) {  // x·Wᵀ + b in f32, rounded once
    const Tensor start = bias.defined() ? rows_of(bias.detach().to(DType::f32), rows) : Tensor();
    y = half_product(Transpose::no, Transpose::yes, x2, weight, start).to(input.dtype());
  } else if (bias.defined()) {
    y = biased_product(x2, weight.detach(), bias.detach());
  } else {
    y = gemm(Transpose::no, Transpose::yes, x2, weight);
  }
  if (input.dim() != 2) y = y.reshape(with_last(input.shape(), out_features));
  if (autograd::needs_recording({&input, &weight, &bias})) {
    autograd::record(
        y, "linear", {&input, &weight, &bias},
        [x_saved = x2, w_saved = weight.detach(), in_shape = input.shape()](const Tensor& g, NeedsGrad needs) {
          const Tensor g2 = g.dim() == 2 ? g : g.reshape({x_saved.shape()[0], w_saved.shape()[0]});
          Gradients grads(3);
          if (needs[0]) {
            grads[0] = gemm(Transpose::no, Transpose::no, g2, w_saved);
            if (in_shape.size() != 2) grads[0] = grads[0].reshape(in_shape);
          }
          if (needs[1]) grads[1] = gemm(Transpose::yes, Transpose::no, g2, x_saved);  // gᵀ·x
          if (needs[2]) grads[2] = sum(g2, {0});
          return grads;
        });
  }
  return y;
}

Tensor fused::linear_relu(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (const ext::AutocastInputs cast{OpKey::fused_linear_relu, {&input, &weight, &bias}})
    return linear_relu(cast[0], cast[1], cast[2]);
  EMBER_CHECK(bias.defined(), ValueError, "linear_relu: needs a bias (use relu(linear(x, w)) without one)");
  const std::int64_t rows = check_linear("linear_relu", input, weight, bias);
  const std::int64_t in = weight.shape()[1], out_features = weight.shape()[0];
  const Tensor x2 = input.detach().reshape({rows, in});
  // y = max(0, x·Wᵀ + b): the GEMM, then bias and ReLU in one pass over its output (in f32 for
  // 16-bit operands, rounded once after).
  const bool half = is_half(input.dtype());
  Tensor y =
      half ? half_product(Transpose::no, Transpose::yes, x2, weight) : gemm(Transpose::no, Transpose::yes, x2, weight);
  const Tensor bias_wide = ext::widened(bias.detach());
  const auto r = static_cast<std::size_t>(rows), c = static_cast<std::size_t>(out_features);
  ext::dispatch(
      y,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::bias_relu_forward<T>(y.raw<T>(), bias_wide.raw<T>(), r, c);
      },
      [&](auto stream) { kernels::cuda::bias_relu_forward(y.raw<float>(), bias_wide.raw<float>(), r, c, stream); });
  if (half) y = y.to(input.dtype());
  const Tensor y2 = y.detach();
  if (input.dim() != 2) y = y.reshape(with_last(input.shape(), out_features));
  if (autograd::needs_recording({&input, &weight, &bias})) {
    autograd::record(y, "linear_relu", {&input, &weight, &bias},
                     [x_saved = x2, w_saved = weight.detach(), y_saved = y2, in_shape = input.shape()](
                         const Tensor& g, NeedsGrad needs) {
                       const std::size_t rows = static_cast<std::size_t>(x_saved.shape()[0]);
                       const std::size_t cols = static_cast<std::size_t>(w_saved.shape()[0]);
                       // The ReLU mask and the bias gradient in one pass: for 16-bit operands the bias gradient
                       // summed in f32 and rounded once (by the 16-bit kernels of CUDA and of the CPU's bf16,
                       // and on widened copies for the CPU's f16).
                       const Tensor g_rows = g.dim() == 2 ? g : g.reshape({x_saved.shape()[0], w_saved.shape()[0]});
                       const bool widen = is_half(g.dtype()) && !g.is_cuda() && !ext::is_cpu_bf16(g);
                       const Tensor g2 = widen ? ext::widened(g_rows) : g_rows;
                       const Tensor y2 = widen ? ext::widened(y_saved) : y_saved;
                       Tensor masked = ext::new_empty(g2, {x_saved.shape()[0], w_saved.shape()[0]});
                       Tensor dbias = ext::new_empty(g2, {w_saved.shape()[0]});
                       ext::dispatch_with_half(
                           g2,
                           [&](auto zero) {
                             using T = decltype(zero);
                             kernels::cpu::bias_relu_backward<T>(g2.raw<T>(), y2.raw<T>(), masked.raw<T>(),
                                                                 dbias.raw<T>(), rows, cols);
                           },
                           [&](auto zero, auto stream) {
                             using T = decltype(zero);
                             const std::size_t ws = kernels::sum_workspace_size(1, rows, cols);
                             const Tensor workspace =
                                 ws ? ext::new_empty(g2, {static_cast<std::int64_t>(ws)}, DType::f32) : Tensor();
                             kernels::cuda::bias_relu_backward(g2.raw<T>(), y2.raw<T>(), masked.raw<T>(),
                                                               dbias.raw<T>(), rows, cols,
                                                               ws ? workspace.raw<float>() : nullptr, stream);
                           });
                       if (widen) {
                         masked = masked.to(g.dtype());
                         dbias = dbias.to(g.dtype());
                       }
                       Gradients grads(3);
                       if (needs[0]) {
                         grads[0] = gemm(Transpose::no, Transpose::no, masked, w_saved);
                         if (in_shape.size() != 2) grads[0] = grads[0].reshape(in_shape);
                       }
                       if (needs[1]) grads[1] = gemm(Transpose::yes, Transpose::no, masked, x_saved);
                       if (needs[2]) grads[2] = dbias;
                       return grads;
                     });
  }
  return y;
}

Tensor transpose(const Tensor& x) {
  ext::check_defined("transpose", {"input", x});
  EMBER_CHECK(x.dim() >= 2, ShapeError, "transpose: needs at least 2 dims, got shape ", shape_str(x.shape()));
  Shape out_shape = x.shape();
  std::swap(out_shape[out_shape.size() - 1], out_shape[out_shape.size() - 2]);
  Tensor out = ext::new_empty(x, out_shape);
  const std::size_t rows = static_cast<std::size_t>(x.shape()[x.shape().size() - 2]);
  const std::size_t cols = static_cast<std::size_t>(x.shape().back());
  const std::size_t batch = rows * cols == 0 ? 0 : static_cast<std::size_t>(x.numel()) / (rows * cols);
  ext::dispatch_dtype(
      x,
      [&](auto zero) {
        using T = decltype(zero);
        kernels::cpu::transpose_last2<T>(x.raw<T>(), out.raw<T>(), batch, rows, cols);
      },
      [&](auto zero, auto stream) {
        using T = decltype(zero);
        kernels::cuda::transpose_last2<T>(x.raw<T>(), out.raw<T>(), batch, rows, cols, stream);
      });
  if (autograd::needs_recording({&x})) {
    autograd::record(out, "transpose", {&x}, [](const Tensor& g, NeedsGrad) { return Gradients{transpose(g)}; });
  }
  return out;
}

}  // namespace ember
