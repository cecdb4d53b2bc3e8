// The software GPU's cuDNN model against naive formulas of its own, and the checks it makes on
// wrong calls: the three convolutions against an im2col reference and bit for bit against their
// documented order of summation in both modes, descriptors that disagree, a workspace too small,
// ALGO_0's non-determinism, the bf16 and f16 configurations and the ones it refuses. Independent of
// how ember uses it.
#include <catch2/catch.hpp>

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "copies.cuh"
#include "launch_raw.cuh"
#include "library_calls.cuh"

TEST_CASE("cuDNN's convolutions match a naive cross-correlation, forward and both gradients") {
  Conv g;
  const std::size_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.k * g.oh() * g.ow(), nw = g.k * g.c * g.kh * g.kw;
  const auto x = random_values(nx, 6), w = random_values(nw, 7), dy = random_values(ny, 8);
  DeviceBuffer<float> dx(nx), dw(nw), dyb(ny), out_y(ny), out_dx(nx), out_dw(nw), ws(1 << 16);
  to_device(dx.data, x);
  to_device(dw.data, w);
  to_device(dyb.data, dy);
  std::vector<double> y(ny, 0), gx(nx, 0), gw(nw, 0);
  g.taps([&](int yi, int xi, int wi) {
    y[yi] += x[xi] * w[wi];
    gx[xi] += dy[yi] * w[wi];
    gw[wi] += dy[yi] * x[xi];
  });
  const float one = 1.0f, zero = 0.0f;
  cudnnConvolutionFwdAlgoPerf_t fwd[4];
  int found = 0;
  REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, g.f, g.conv, g.y, 4, &found, fwd) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(found > 0);
  for (int a = 0; a < found; ++a) {
    std::size_t need = 0;
    REQUIRE(cudnnGetConvolutionForwardWorkspaceSize(g.handle, g.x, g.f, g.conv, g.y, fwd[a].algo, &need) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(need <= (1u << 16) * sizeof(float));
    REQUIRE(cudnnConvolutionForward(g.handle, &one, g.x, dx.data, g.f, dw.data, g.conv, fwd[a].algo, ws.data,
                                    (1u << 16) * sizeof(float), &zero, g.y, out_y.data) == CUDNN_STATUS_SUCCESS);
    const auto got = to_host(out_y.data, ny);
    for (std::size_t i = 0; i < ny; ++i) REQUIRE(got[i] == Approx(y[i]).margin(1e-5));
  }
  REQUIRE(cudnnConvolutionBackwardData(g.handle, &one, g.f, dw.data, g.y, dyb.data, g.conv,
                                       CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws.data, (1u << 16) * sizeof(float), &zero,
                                       g.x, out_dx.data) == CUDNN_STATUS_SUCCESS);
  const auto got_dx = to_host(out_dx.data, nx);
  for (std::size_t i = 0; i < nx; ++i) REQUIRE(got_dx[i] == Approx(gx[i]).margin(1e-5));
  REQUIRE(cudnnConvolutionBackwardFilter(g.handle, &one, g.x, dx.data, g.y, dyb.data, g.conv,
                                         CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws.data, (1u << 16) * sizeof(float),
                                         &zero, g.f, out_dw.data) == CUDNN_STATUS_SUCCESS);
  const auto got_dw = to_host(out_dw.data, nw);
  for (std::size_t i = 0; i < nw; ++i) REQUIRE(got_dw[i] == Approx(gw[i]).margin(1e-5));
}

namespace {

// A convolution's geometry and mode for the im2col reference below.
struct Geometry {
  int n, c, h, w, k, kh, kw, pad_h, pad_w, stride_h, stride_w;
  bool flip;  // CUDNN_CONVOLUTION: the filter turned 180°; else cross-correlation
  int oh() const { return (h + 2 * pad_h - kh) / stride_h + 1; }
  int ow() const { return (w + 2 * pad_w - kw) / stride_w + 1; }
  int rows() const { return c * kh * kw; }  // of the im2col matrix, one per (channel, tap)
};

// The convolution as matrices, written apart from the model's loops: per image the im2col matrix
// X (rows × oh·ow), the filter as a matrix W (k × rows, its taps flipped for CUDNN_CONVOLUTION);
// y = W·X, dX = Wᵀ·dy scattered back (col2im), dW = Σ dy·Xᵀ.
struct Im2colReference {
  std::vector<double> y, dx, dw;
  Im2colReference(const Geometry& g, const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>& dy) {
    const int pixels = g.oh() * g.ow();
    y.assign(static_cast<std::size_t>(g.n * g.k * pixels), 0.0);
    dx.assign(x.size(), 0.0);
    dw.assign(w.size(), 0.0);
    // W[o][row]: the filter value that multiplies row `row` of X.
    const auto filter_index = [&](int o, int row) {
      const int ch = row / (g.kh * g.kw), u = row / g.kw % g.kh, v = row % g.kw;
      const int fu = g.flip ? g.kh - 1 - u : u, fv = g.flip ? g.kw - 1 - v : v;
      return static_cast<std::size_t>(((o * g.c + ch) * g.kh + fu) * g.kw + fv);
    };
    // X[row][pixel]'s element of x, or -1 in the padding.
    const auto input_index = [&](int b, int row, int pixel) -> long {
      const int ch = row / (g.kh * g.kw), u = row / g.kw % g.kh, v = row % g.kw;
      const int iy = pixel / g.ow() * g.stride_h - g.pad_h + u, ix = pixel % g.ow() * g.stride_w - g.pad_w + v;
      if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return -1;
      return ((static_cast<long>(b) * g.c + ch) * g.h + iy) * g.w + ix;
    };
    for (int b = 0; b < g.n; ++b) {
      std::vector<double> cols(static_cast<std::size_t>(g.rows() * pixels), 0.0), dcols(cols.size(), 0.0);
      for (int row = 0; row < g.rows(); ++row)
        for (int p = 0; p < pixels; ++p) {
          const long i = input_index(b, row, p);
          if (i >= 0) cols[static_cast<std::size_t>(row * pixels + p)] = x[static_cast<std::size_t>(i)];
        }
      for (int o = 0; o < g.k; ++o)
        for (int row = 0; row < g.rows(); ++row) {
          const double wv = w[filter_index(o, row)];
          for (int p = 0; p < pixels; ++p) {
            const std::size_t yi = static_cast<std::size_t>((b * g.k + o) * pixels + p);
            y[yi] += wv * cols[static_cast<std::size_t>(row * pixels + p)];
            dcols[static_cast<std::size_t>(row * pixels + p)] += wv * dy[yi];
            dw[filter_index(o, row)] += dy[yi] * cols[static_cast<std::size_t>(row * pixels + p)];
          }
        }
      for (int row = 0; row < g.rows(); ++row)
        for (int p = 0; p < pixels; ++p) {
          const long i = input_index(b, row, p);
          if (i >= 0) dx[static_cast<std::size_t>(i)] += dcols[static_cast<std::size_t>(row * pixels + p)];
        }
    }
  }
};

// The model's documented summation order (sim/src/convolution.h), in f32 as the model sums: every
// (output, input, weight) triple in the nesting image, filter, output row, output column, channel,
// kernel row, kernel column, each product added to its output, input or weight sum in that order.
// The model's loops visit them in other nestings; its bits must be these.
struct OrderedSums {
  std::vector<float> y, dx, dw;
  OrderedSums(const Geometry& g, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dy)
      : y(dy.size(), 0.0f), dx(x.size(), 0.0f), dw(w.size(), 0.0f) {
    for (int b = 0; b < g.n; ++b)
      for (int f = 0; f < g.k; ++f)
        for (int oy = 0; oy < g.oh(); ++oy)
          for (int ox = 0; ox < g.ow(); ++ox)
            for (int ch = 0; ch < g.c; ++ch)
              for (int ky = 0; ky < g.kh; ++ky)
                for (int kx = 0; kx < g.kw; ++kx) {
                  const int iy = oy * g.stride_h - g.pad_h + ky, ix = ox * g.stride_w - g.pad_w + kx;
                  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                  const int wy = g.flip ? g.kh - 1 - ky : ky, wx = g.flip ? g.kw - 1 - kx : kx;
                  const std::size_t yi = static_cast<std::size_t>(((b * g.k + f) * g.oh() + oy) * g.ow() + ox);
                  const std::size_t xi = static_cast<std::size_t>(((b * g.c + ch) * g.h + iy) * g.w + ix);
                  const std::size_t wi = static_cast<std::size_t>(((f * g.c + ch) * g.kh + wy) * g.kw + wx);
                  y[yi] += x[xi] * w[wi];
                  dx[xi] += dy[yi] * w[wi];
                  dw[wi] += dy[yi] * x[xi];
                }
  }
};

}  // namespace

TEST_CASE("cuDNN's three convolutions match an im2col reference in both modes, with strides, padding and 1x1") {
  const Geometry cases[] = {{2, 3, 7, 6, 4, 3, 3, 1, 1, 2, 2, false},
                            {2, 3, 7, 6, 4, 3, 3, 1, 1, 2, 2, true},
                            {2, 5, 4, 3, 3, 1, 1, 0, 0, 1, 1, false},
                            {1, 2, 6, 7, 3, 3, 2, 2, 1, 1, 2, true},
                            {1, 2, 6, 7, 3, 3, 2, 2, 1, 1, 2, false}};
  cudnnHandle_t handle = nullptr;
  REQUIRE(cudnnCreate(&handle) == CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
  cudnnFilterDescriptor_t fd = nullptr;
  cudnnConvolutionDescriptor_t cd = nullptr;
  cudnnCreateTensorDescriptor(&xd);
  cudnnCreateTensorDescriptor(&yd);
  cudnnCreateFilterDescriptor(&fd);
  cudnnCreateConvolutionDescriptor(&cd);
  unsigned seed = 20;
  for (const Geometry& g : cases) {
    INFO((g.flip ? "CUDNN_CONVOLUTION " : "CUDNN_CROSS_CORRELATION ")
         << g.kh << "x" << g.kw << " pad " << g.pad_h << "," << g.pad_w << " stride " << g.stride_h << ","
         << g.stride_w);
    REQUIRE(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.c, g.h, g.w) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.k, g.oh(), g.ow()) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g.k, g.c, g.kh, g.kw) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(cd, g.pad_h, g.pad_w, g.stride_h, g.stride_w, 1, 1,
                                            g.flip ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS);
    // f32 exact: the default math type lets cuDNN round to TF32 (the TF32 test below).
    REQUIRE(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH) == CUDNN_STATUS_SUCCESS);
    const std::size_t nx = static_cast<std::size_t>(g.n * g.c * g.h * g.w),
                      nw = static_cast<std::size_t>(g.k * g.rows()),
                      ny = static_cast<std::size_t>(g.n * g.k * g.oh() * g.ow());
    const auto x = random_values(nx, seed++), w = random_values(nw, seed++), dy = random_values(ny, seed++);
    const Im2colReference want(g, x, w, dy);
    const OrderedSums ordered(g, x, w, dy);
    DeviceBuffer<float> dx_in(nx), dw_in(nw), ddy(ny), out(std::max({nx, nw, ny})), ws(1 << 16);
    to_device(dx_in.data, x);
    to_device(dw_in.data, w);
    to_device(ddy.data, dy);
    const std::size_t ws_bytes = (1u << 16) * sizeof(float);
    const float one = 1.0f, zero = 0.0f;
    // Within 1e-5 of the im2col reference, and the same bits as the documented order's sums.
    const auto compare = [&](const std::vector<double>& reference, const std::vector<float>& in_order) {
      const auto got = to_host(out.data, reference.size());
      for (std::size_t i = 0; i < reference.size(); ++i) {
        REQUIRE(got[i] == Approx(reference[i]).margin(1e-5));
        REQUIRE(got[i] == in_order[i]);
      }
    };
    REQUIRE(cudnnConvolutionForward(handle, &one, xd, dx_in.data, fd, dw_in.data, cd,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, ws.data, ws_bytes, &zero, yd,
                                    out.data) == CUDNN_STATUS_SUCCESS);
    compare(want.y, ordered.y);
    REQUIRE(cudnnConvolutionBackwardData(handle, &one, fd, dw_in.data, yd, ddy.data, cd,
                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws.data, ws_bytes, &zero, xd,
                                         out.data) == CUDNN_STATUS_SUCCESS);
    compare(want.dx, ordered.dx);
    REQUIRE(cudnnConvolutionBackwardFilter(handle, &one, xd, dx_in.data, yd, ddy.data, cd,
                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws.data, ws_bytes, &zero, fd,
                                           out.data) == CUDNN_STATUS_SUCCESS);
    compare(want.dw, ordered.dw);
  }
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(fd);
  cudnnDestroyConvolutionDescriptor(cd);
  cudnnDestroy(handle);
}

TEST_CASE("cuDNN refuses descriptors that disagree and a workspace smaller than its algorithm's") {
  Conv g;
  cudnnFilterDescriptor_t wrong = nullptr;
  cudnnCreateFilterDescriptor(&wrong);
  cudnnSetFilter4dDescriptor(wrong, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g.k, g.c + 1, g.kh, g.kw);  // channels differ
  cudnnConvolutionFwdAlgoPerf_t perf[4];
  int found = 0;
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, wrong, g.conv, g.y, 4, &found, perf) ==
        CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyFilterDescriptor(wrong);
  std::size_t need = 0;
  REQUIRE(cudnnGetConvolutionForwardWorkspaceSize(g.handle, g.x, g.f, g.conv, g.y, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                                  &need) == CUDNN_STATUS_SUCCESS);
  REQUIRE(need > 0);
  DeviceBuffer<float> x(g.n * g.c * g.h * g.w), w(g.k * g.c * g.kh * g.kw), y(g.n * g.k * g.oh() * g.ow()), ws(need);
  const float one = 1.0f, zero = 0.0f;
  CHECK(cudnnConvolutionForward(g.handle, &one, g.x, x.data, g.f, w.data, g.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                ws.data, need - 4, &zero, g.y, y.data) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnConvolutionForward(g.handle, &one, g.x, x.data, g.f, w.data, g.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                nullptr, 0, &zero, g.y, y.data) == CUDNN_STATUS_BAD_PARAM);
}

TEST_CASE("cuDNN's ALGO_0 weight gradient is non-deterministic, as documented; ALGO_1 is not") {
  Conv g;
  g.n = 16;
  REQUIRE(cudnnSetTensor4dDescriptor(g.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.c, g.h, g.w) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(g.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.k, g.oh(), g.ow()) ==
          CUDNN_STATUS_SUCCESS);
  cudnnConvolutionBwdFilterAlgoPerf_t perf[4];
  int found = 0;
  REQUIRE(cudnnGetConvolutionBackwardFilterAlgorithm_v7(g.handle, g.x, g.y, g.conv, g.f, 4, &found, perf) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(found >= 2);
  CHECK(perf[0].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  CHECK(perf[0].determinism == CUDNN_NON_DETERMINISTIC);
  const std::size_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.k * g.oh() * g.ow(), nw = g.k * g.c * g.kh * g.kw;
  DeviceBuffer<float> x(nx), dy(ny), dw(nw), ws(1 << 16);
  to_device(x.data, random_values(nx, 9));
  to_device(dy.data, random_values(ny, 10));
  const auto gradient = [&](cudnnConvolutionBwdFilterAlgo_t algo) {
    const float one = 1.0f, zero = 0.0f;
    REQUIRE(cudnnConvolutionBackwardFilter(g.handle, &one, g.x, x.data, g.y, dy.data, g.conv, algo, ws.data,
                                           (1u << 16) * sizeof(float), &zero, g.f, dw.data) == CUDNN_STATUS_SUCCESS);
    return to_host(dw.data, nw);
  };
  bool differed = false;
  const auto first = gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  for (int run = 0; run < 8 && !differed; ++run) differed = gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0) != first;
  CHECK(differed);
  const auto deterministic = gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  for (int run = 0; run < 3; ++run) CHECK(gradient(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1) == deterministic);
}

TEST_CASE("cuDNN's PSEUDO_BFLOAT16 and PSEUDO_HALF convolutions: f32 sums of the widened values, rounded once") {
  for (const cudnnDataType_t type : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_HALF}) {
    INFO((type == CUDNN_DATA_BFLOAT16 ? "bf16" : "f16"));
    Conv g;
    REQUIRE(cudnnSetTensor4dDescriptor(g.x, CUDNN_TENSOR_NCHW, type, g.n, g.c, g.h, g.w) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(g.y, CUDNN_TENSOR_NCHW, type, g.n, g.k, g.oh(), g.ow()) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(g.f, type, CUDNN_TENSOR_NCHW, g.k, g.c, g.kh, g.kw) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolutionMathType(g.conv, CUDNN_TENSOR_OP_MATH) == CUDNN_STATUS_SUCCESS);
    const std::size_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.k * g.oh() * g.ow(), nw = g.k * g.c * g.kh * g.kw;
    std::vector<float> x(nx), w(nw), dy(ny), prior(ny);
    std::vector<std::uint16_t> x_bits(nx), w_bits(nw), dy_bits(ny), prior_bits(ny);
    const auto rx = random_values(nx, 31), rw = random_values(nw, 32), rdy = random_values(ny, 33),
               rprior = random_values(ny, 34);
    for (std::size_t i = 0; i < nx; ++i) x_bits[i] = narrow(rx[i], type, x[i]);
    for (std::size_t i = 0; i < nw; ++i) w_bits[i] = narrow(rw[i], type, w[i]);
    for (std::size_t i = 0; i < ny; ++i) dy_bits[i] = narrow(rdy[i], type, dy[i]);
    for (std::size_t i = 0; i < ny; ++i) prior_bits[i] = narrow(rprior[i], type, prior[i]);
    DeviceBuffer<std::uint16_t> dx(nx), dw(nw), ddy(ny), out_y(ny), out_dx(nx), out_dw(nw);
    DeviceBuffer<float> ws(1 << 16);
    to_device(dx.data, x_bits);
    to_device(dw.data, w_bits);
    to_device(ddy.data, dy_bits);
    to_device(out_y.data, prior_bits);
    // The reference: exact products summed in double; the model's f32 sums differ by at most
    // K·2⁻²⁴·Σ|products|, and then one rounding to the 16-bit type (half an ulp).
    std::vector<double> y(ny, 0), y_mag(ny, 0), gx(nx, 0), gx_mag(nx, 0), gw(nw, 0), gw_mag(nw, 0);
    g.taps([&](int yi, int xi, int wi) {
      y[yi] += double(x[xi]) * w[wi];
      y_mag[yi] += std::fabs(double(x[xi]) * w[wi]);
      gx[xi] += double(dy[yi]) * w[wi];
      gx_mag[xi] += std::fabs(double(dy[yi]) * w[wi]);
      gw[wi] += double(dy[yi]) * x[xi];
      gw_mag[wi] += std::fabs(double(dy[yi]) * x[xi]);
    });
    const int ulp_bits = type == CUDNN_DATA_BFLOAT16 ? -8 : -11;
    const auto check = [&](const DeviceBuffer<std::uint16_t>& out, const std::vector<double>& want,
                           const std::vector<double>& magnitude, int terms) {
      const auto bits = to_host(out.data, want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        const double bound = terms * std::ldexp(magnitude[i], -24) + std::ldexp(std::fabs(want[i]), ulp_bits);
        REQUIRE(std::fabs(widen(bits[i], type) - want[i]) <= bound + 1e-30);
      }
    };
    const float one = 1.0f, beta_one = 1.0f, zero = 0.0f;
    cudnnConvolutionFwdAlgoPerf_t fwd[4];
    int found = 0;
    REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, g.f, g.conv, g.y, 4, &found, fwd) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(found > 0);
    CHECK(fwd[0].mathType == CUDNN_TENSOR_OP_MATH);
    // β = 1: the sum added to what y held, in f32, and rounded once.
    REQUIRE(cudnnConvolutionForward(g.handle, &one, g.x, dx.data, g.f, dw.data, g.conv,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &beta_one, g.y,
                                    out_y.data) == CUDNN_STATUS_SUCCESS);
    std::vector<double> y_plus(ny);
    for (std::size_t i = 0; i < ny; ++i) y_plus[i] = y[i] + prior[i];
    check(out_y, y_plus, y_mag, g.c * g.kh * g.kw + 1);
    REQUIRE(cudnnConvolutionBackwardData(g.handle, &one, g.f, dw.data, g.y, ddy.data, g.conv,
                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws.data, (1u << 16) * sizeof(float), &zero,
                                         g.x, out_dx.data) == CUDNN_STATUS_SUCCESS);
    check(out_dx, gx, gx_mag, g.k * g.kh * g.kw);
    REQUIRE(cudnnConvolutionBackwardFilter(g.handle, &one, g.x, dx.data, g.y, ddy.data, g.conv,
                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws.data, (1u << 16) * sizeof(float),
                                           &zero, g.f, out_dw.data) == CUDNN_STATUS_SUCCESS);
    check(out_dw, gw, gw_mag, g.n * g.oh() * g.ow());
  }
}

TEST_CASE("cuDNN refuses mixed data types and 16-bit compute; its FMA math keeps f32 exact") {
  Conv g;
  cudnnConvolutionFwdAlgoPerf_t perf[4];
  int found = 0;
  // x in bf16, w and y in f32: not a configuration cuDNN lists.
  REQUIRE(cudnnSetTensor4dDescriptor(g.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, g.n, g.c, g.h, g.w) ==
          CUDNN_STATUS_SUCCESS);
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, g.f, g.conv, g.y, 4, &found, perf) ==
        CUDNN_STATUS_NOT_SUPPORTED);
  // All f16 with f16 compute (TRUE_HALF_CONFIG): not modelled.
  REQUIRE(cudnnSetTensor4dDescriptor(g.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, g.n, g.c, g.h, g.w) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(g.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, g.n, g.k, g.oh(), g.ow()) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetFilter4dDescriptor(g.f, CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW, g.k, g.c, g.kh, g.kw) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetConvolution2dDescriptor(g.conv, g.pad, g.pad, g.stride, g.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_HALF) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(g.handle, g.x, g.f, g.conv, g.y, 4, &found, perf) ==
        CUDNN_STATUS_NOT_SUPPORTED);
}
