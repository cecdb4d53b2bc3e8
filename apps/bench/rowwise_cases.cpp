// Families over [rows, cols] layouts: reductions, softmax, cross-entropy, bias epilogues, copies.
#include "apps/bench/case.h"
#include "core/cuda/runtime.h"
#include "kernels/bias_activation.h"
#include "kernels/layout.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

namespace ember::apps::bench {
namespace {

namespace kc = kernels::cpu;
using kernels::SoftmaxKind;
using kernels::WriteMode;

// One input set: logits [rows, 10] with their targets; the bias+ReLU epilogue of a linear layer
// over the same elements as [br, 32]; a square [side, side] for the transpose.
struct Rows {
  std::size_t rows = 0, cols = 10, m = 0, br = 0, bc = 32, side = 0;
  float scale = 1;  // 1/rows: the mean over the batch
  // Columns of many rows split into row chunks across blocks (sum_workspace_size): the
  // workspaces of the column sums, the total and the bias gradient (0: none needed).
  std::size_t dim0_ws = 0, all_ws = 0, bias_ws = 0;
  Tensor x, g, t;            // logits, an incoming gradient, i32 targets
  Tensor y, max_in, sum_in;  // softmax(x); the cross-entropy forward's row maxima and sums
  Tensor pre, yb;            // [br, 32]: a GEMM's output (also the gradient into the epilogue), the epilogue's output
  Tensor square;
  Tensor out, out_rows, row_max, row_sum, cols_out, all_out, bout, db, square_out;  // outputs
  Tensor one, bias, scalars, counter, dim0_workspace, all_workspace, bias_workspace;
  std::vector<Tensor*> per_set() {
    return {&x,   &g,        &t,       &y,       &max_in,   &sum_in,  &pre,  &yb, &square,
            &out, &out_rows, &row_max, &row_sum, &cols_out, &all_out, &bout, &db, &square_out};
  }
  std::vector<Tensor*> shared() {
    return {&one, &bias, &scalars, &counter, &dim0_workspace, &all_workspace, &bias_workspace};
  }
};

Shape dims(std::size_t rows) { return {static_cast<std::int64_t>(rows)}; }
Shape dims(std::size_t rows, std::size_t cols) {
  return {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)};
}

Tensor workspace(std::size_t size) { return zeros(dims(std::max<std::size_t>(size, 1))); }

Rows host_set(std::size_t n) {
  Rows s;
  s.rows = std::max<std::size_t>(1, n / s.cols);
  s.m = s.rows * s.cols;
  s.scale = 1.0f / static_cast<float>(s.rows);
  const auto xh = random_vector(s.m, s.m + 7, -6.0f, 6.0f), gh = random_vector(s.m, s.m + 8);
  std::vector<std::int32_t> th(s.rows);
  for (std::size_t r = 0; r < s.rows; ++r) th[r] = static_cast<std::int32_t>((r * 7) % s.cols);
  std::vector<float> y(s.m), loss(s.rows), row_max(s.rows), row_sum(s.rows);
  kc::softmax_forward(SoftmaxKind::softmax, xh.data(), y.data(), s.rows, s.cols);
  kernels::DeviceErrorRecord record;
  kc::cross_entropy_forward(xh.data(), th.data(), loss.data(), row_max.data(), row_sum.data(), s.rows, s.cols, &record);
  s.x = from_vector(xh, dims(s.rows, s.cols));
  s.g = from_vector(gh, dims(s.rows, s.cols));
  s.t = from_vector(th, dims(s.rows));
  s.y = from_vector(y, dims(s.rows, s.cols));
  s.max_in = from_vector(row_max, dims(s.rows));
  s.sum_in = from_vector(row_sum, dims(s.rows));
  s.out = zeros(s.x.shape());
  for (Tensor* t : {&s.out_rows, &s.row_max, &s.row_sum}) *t = zeros(dims(s.rows));
  s.cols_out = zeros(dims(s.cols));
  s.all_out = zeros({1});
  s.one = full({1}, 1.0);
  s.scalars = zeros({2});  // the fused loss's batch loss and running sum
  s.counter = zeros({1}, {.dtype = DType::i32});
  s.dim0_ws = kernels::sum_workspace_size(1, s.rows, s.cols);
  s.all_ws = kernels::sum_workspace_size(1, s.m, 1);
  s.dim0_workspace = workspace(s.dim0_ws);
  s.all_workspace = workspace(s.all_ws);
  // The fused bias+ReLU epilogue of a linear layer, [rows·10/32, 32].
  s.br = std::max<std::size_t>(1, s.m / s.bc);
  const auto bias = random_vector(s.bc, 3), pre = random_vector(s.br * s.bc, s.br);
  std::vector<float> yb = pre;
  kc::bias_relu_forward(yb.data(), bias.data(), s.br, s.bc);
  s.bias = from_vector(bias, dims(s.bc));
  s.pre = from_vector(pre, dims(s.br, s.bc));
  s.yb = from_vector(yb, dims(s.br, s.bc));
  s.bout = zeros(s.pre.shape());
  s.db = zeros(dims(s.bc));
  s.bias_ws = kernels::sum_workspace_size(1, s.br, s.bc);
  s.bias_workspace = workspace(s.bias_ws);
  // A square transpose.
  s.side = static_cast<std::size_t>(std::max(1.0, std::floor(std::sqrt(static_cast<double>(n)))));
  s.square = from_vector(random_vector(s.side * s.side, s.side), dims(s.side, s.side));
  s.square_out = zeros(s.square.shape());
  return s;
}

// out = Σ over `reduce` of x viewed as [outer, reduce, inner]; the CUDA twin takes a workspace.
void sum(Device d, const Tensor& x, const Tensor& out, std::size_t outer, std::size_t reduce, std::size_t inner,
         float* workspace) {
  ext::dispatch_device(
      d, [&] { kc::sum(f32(x), f32(out), outer, reduce, inner, 1.0f); },
      [&](auto stream) { kernels::cuda::sum(f32(x), f32(out), outer, reduce, inner, 1.0f, workspace, stream); });
}

float* workspace_of(const Tensor& t, std::size_t size) { return size ? f32(t) : nullptr; }

}  // namespace

void add_rowwise(std::vector<Case>& cases, const Arena& arena, std::size_t n) {
  const Rows host = host_set(n);
  const double m = static_cast<double>(host.m), rows = static_cast<double>(host.rows),
               bias_grid = static_cast<double>(host.br * host.bc), square = static_cast<double>(host.side * host.side);
  const std::string bias_shape = std::to_string(host.br) + "x32",
                    square_shape = std::to_string(host.side) + "x" + std::to_string(host.side);
  // A column of `rows` terms: float rounding grows with rows (CPU sums in double).
  const double sum_tol = 1e-6 * rows * 6.0;
  const std::vector<Entry<Rows>> table{
      {"softmax_forward", 8 * m, &Rows::out, 1e-6, 1e-5,
       [](Device d, const Rows& s) {
         EMBER_BENCH_CALL(d, softmax_forward, SoftmaxKind::softmax, f32(s.x), f32(s.out), s.rows, s.cols);
       }},
      {"softmax_backward", 12 * m, &Rows::out, 1e-6, 1e-5,
       [](Device d, const Rows& s) {
         EMBER_BENCH_CALL(d, softmax_backward, SoftmaxKind::softmax, f32(s.g), f32(s.y), f32(s.out), s.rows, s.cols,
                          WriteMode::overwrite);
       }},
      {"cross_entropy_forward", 4 * m + 16 * rows, &Rows::out_rows, 1e-5, 1e-5,
       [](Device d, const Rows& s) {
         ext::dispatch_device(
             d,
             [&] {
               kernels::DeviceErrorRecord e;
               kc::cross_entropy_forward(f32(s.x), s.t.raw<std::int32_t>(), f32(s.out_rows), f32(s.row_max),
                                         f32(s.row_sum), s.rows, s.cols, &e);
             },
             [&](auto stream) {
               kernels::cuda::cross_entropy_forward(f32(s.x), s.t.raw<std::int32_t>(), f32(s.out_rows), f32(s.row_max),
                                                    f32(s.row_sum), s.rows, s.cols, cuda::device_error_record(d),
                                                    stream);
             });
       }},
      {"cross_entropy_backward", 8 * m + 12 * rows, &Rows::out, 1e-7, 1e-5,
       [](Device d, const Rows& s) {
         EMBER_BENCH_CALL(d, cross_entropy_backward, f32(s.x), s.t.raw<std::int32_t>(), f32(s.max_in), f32(s.sum_in),
                          f32(s.one), s.scale, f32(s.out), s.rows, s.cols, WriteMode::overwrite);
       }},
      // Loss, gradient and the loss sum in one pass: a training step's whole loss (the counter and
      // the two scalars are this case's own; the sum just keeps growing).
      {"cross_entropy_fused", 8 * m + 8 * rows, &Rows::out, 1e-7, 1e-5,
       [](Device d, const Rows& s) {
         float* scalars = f32(s.scalars);
         ext::dispatch_device(
             d,
             [&] {
               kc::cross_entropy_fused(f32(s.x), s.t.raw<std::int32_t>(), f32(s.out), f32(s.out_rows), scalars,
                                       scalars + 1, s.rows, s.cols, s.scale, nullptr);
             },
             [&](auto stream) {
               kernels::cuda::cross_entropy_fused(f32(s.x), s.t.raw<std::int32_t>(), f32(s.out), f32(s.out_rows),
                                                  scalars, scalars + 1, s.rows, s.cols, s.scale,
                                                  cuda::device_error_record(d),
                                                  reinterpret_cast<unsigned*>(s.counter.raw<std::int32_t>()), stream);
             });
       }},
      {"max_last_dim", 4 * m + 4 * rows, &Rows::out_rows, 0.0, 0.0,
       [](Device d, const Rows& s) {
         EMBER_BENCH_CALL(d, max_last_dim, f32(s.x), f32(s.out_rows), nullptr, s.rows, s.cols);
       }},
      // Sums: every row of 10 (inner = 1), the bias-gradient layout [rows, 10] over dim 0, everything.
      {"sum_rows", 4 * m + 4 * rows, &Rows::out_rows, 1e-5, 1e-5,
       [](Device d, const Rows& s) { sum(d, s.x, s.out_rows, s.rows, s.cols, 1, nullptr); }},
      {"sum_dim0", 4 * m, &Rows::cols_out, sum_tol, 1e-5,
       [](Device d, const Rows& s) {
         sum(d, s.x, s.cols_out, 1, s.rows, s.cols, workspace_of(s.dim0_workspace, s.dim0_ws));
       }},
      {"sum_all", 4 * m, &Rows::all_out, 1e-6 * m * 6.0, 1e-5,
       [](Device d, const Rows& s) { sum(d, s.x, s.all_out, 1, s.m, 1, workspace_of(s.all_workspace, s.all_ws)); }},
      {"bias_relu_forward",
       8 * bias_grid + 8 * bias_grid,  // the restoring copy is in the timing, so its bytes count too
       &Rows::bout, 1e-6, 1e-6,
       [](Device d, const Rows& s) {
         Tensor(s.bout).copy_(s.pre);  // in place: restore the GEMM output first (not timed separately)
         EMBER_BENCH_CALL(d, bias_relu_forward, f32(s.bout), f32(s.bias), s.br, s.bc);
       },
       bias_shape},
      {"bias_relu_backward", 12 * bias_grid, &Rows::bout, 0.0, 0.0,
       [](Device d, const Rows& s) {
         ext::dispatch_device(
             d, [&] { kc::bias_relu_backward(f32(s.pre), f32(s.yb), f32(s.bout), f32(s.db), s.br, s.bc); },
             [&](auto stream) {
               kernels::cuda::bias_relu_backward(f32(s.pre), f32(s.yb), f32(s.bout), f32(s.db), s.br, s.bc,
                                                 workspace_of(s.bias_workspace, s.bias_ws), stream);
             });
       },
       bias_shape},
      {"transpose", 8 * square, &Rows::square_out, 0.0, 0.0,
       [](Device d, const Rows& s) {
         EMBER_BENCH_CALL(d, transpose_last2, f32(s.square), f32(s.square_out), 1, s.side, s.side);
       },
       square_shape},
  };
  add_table(cases, arena, host, arena.rotations(12 * host.m),
            std::to_string(host.rows) + "x" + std::to_string(host.cols), table);
}

}  // namespace ember::apps::bench
