// Convolution, pooling and batch normalization on the CPU: against a naive direct convolution,
// gradchecks in f64, running statistics as PyTorch keeps them, and the layers' names and shapes.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/ops/fused.h"
#include "core/ops/gradcheck.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "kernels/conv.h"
#include "layers/nn.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

Tensor random(const Shape& shape, std::uint64_t seed, double lo = -1, double hi = 1) {
  Generator g(seed);
  return uniform(shape, lo, hi, {.dtype = DType::f64}, &g);
}

// The definition: y[n,k,oy,ox] = b[k] + Σ_{c,ky,kx} w[k,c,ky,kx]·x[n,c,oy·s+ky−p,ox·s+kx−p].
std::vector<double> naive_conv(const Tensor& x, const Tensor& w, const Tensor& b, int s, int p) {
  const auto xs = x.shape(), ws = w.shape();
  const std::int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], k = ws[0], kh = ws[2], kw = ws[3];
  const std::int64_t oh = (h + 2 * p - kh) / s + 1, ow = (wd + 2 * p - kw) / s + 1;
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> y(static_cast<std::size_t>(n * k * oh * ow));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t o = 0; o < k; ++o)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double acc = bv[static_cast<std::size_t>(o)];
          for (std::int64_t ci = 0; ci < c; ++ci)
            for (std::int64_t ky = 0; ky < kh; ++ky)
              for (std::int64_t kx = 0; kx < kw; ++kx) {
                const std::int64_t iy = oy * s + ky - p, ix = ox * s + kx - p;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += wv[static_cast<std::size_t>(((o * c + ci) * kh + ky) * kw + kx)] *
                       xv[static_cast<std::size_t>(((i * c + ci) * h + iy) * wd + ix)];
              }
          y[static_cast<std::size_t>(((i * k + o) * oh + oy) * ow + ox)] = acc;
        }
  return y;
}

// The definition's adjoints: dx[n,c,iy,ix] = Σ w[k,c,ky,kx]·dy[n,k,oy,ox] and
// dw[k,c,ky,kx] = Σ x[n,c,iy,ix]·dy[n,k,oy,ox] over iy = oy·s+ky−p, ix = ox·s+kx−p inside the image.
std::pair<std::vector<double>, std::vector<double>> naive_conv_grads(const Tensor& x, const Tensor& w, const Tensor& dy,
                                                                     int s, int p) {
  const auto xs = x.shape(), ws = w.shape(), ys = dy.shape();
  const std::int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], k = ws[0], kh = ws[2], kw = ws[3], oh = ys[2],
                     ow = ys[3];
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), dyv = dy.to_vector<double>();
  std::vector<double> dx(xv.size()), dw(wv.size());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t o = 0; o < k; ++o)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          const double g = dyv[static_cast<std::size_t>(((i * k + o) * oh + oy) * ow + ox)];
          for (std::int64_t ci = 0; ci < c; ++ci)
            for (std::int64_t ky = 0; ky < kh; ++ky)
              for (std::int64_t kx = 0; kx < kw; ++kx) {
                const std::int64_t iy = oy * s + ky - p, ix = ox * s + kx - p;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const auto xi = static_cast<std::size_t>(((i * c + ci) * h + iy) * wd + ix);
                const auto wi = static_cast<std::size_t>(((o * c + ci) * kh + ky) * kw + kx);
                dx[xi] += wv[wi] * g;
                dw[wi] += xv[xi] * g;
              }
        }
  return {dx, dw};
}

void require_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& in) {
  const GradcheckResult r = gradcheck(fn, in);
  INFO(r.report);
  REQUIRE(r.passed);
}

}  // namespace

TEST_CASE("conv2d equals a naive direct convolution for several geometries") {
  for (auto [stride, pad, size] :
       {std::tuple{1, 0, 7}, std::tuple{2, 1, 8}, std::tuple{1, 2, 5}, std::tuple{3, 0, 9}}) {
    INFO("stride " << stride << " padding " << pad << " size " << size);
    const Tensor x = random({2, 3, size, size + 1}, 1), w = random({4, 3, 3, 2}, 2), b = random({4}, 3);
    const Tensor y = conv2d(x, w, b, stride, pad);
    CHECK(y.shape()[2] == (size + 2 * pad - 3) / stride + 1);
    EMBER_REQUIRE_CLOSE(y.to_vector<double>(), naive_conv(x, w, b, stride, pad), 1e-12, 1e-12);
  }
  CHECK_THAT(ember::testing::message_of<ShapeError>([] {
               conv2d(zeros({1, 2, 5, 5}), zeros({3, 4, 3, 3}));
             }),
             Contains("'input' has 2 channels"));
}

TEST_CASE("3×3 stride-1 convolutions with 8+ channels (Winograd F(4×4, 3×3)) equal the definition") {
  // Outputs that fill whole 4×4 tiles and ones that leave part of the last tile empty, padding
  // 0–2 (backward data pads by 2 − p), one image and several chunks of images (32×32 outputs:
  // 64 tiles an image, 8 images a chunk).
  for (auto [n, c, k, h, w, pad] :
       {std::tuple{2, 8, 9, 6, 7, 0}, std::tuple{3, 9, 8, 5, 5, 1}, std::tuple{1, 8, 8, 4, 9, 2},
        std::tuple{2, 8, 8, 10, 14, 0}, std::tuple{19, 8, 10, 32, 32, 1}}) {
    INFO("n " << n << " c " << c << " k " << k << " input " << h << "x" << w << " padding " << pad);
    const kernels::ConvGeometry g{static_cast<std::size_t>(n),
                                  static_cast<std::size_t>(c),
                                  static_cast<std::size_t>(h),
                                  static_cast<std::size_t>(w),
                                  static_cast<std::size_t>(k),
                                  3,
                                  3,
                                  1,
                                  static_cast<std::size_t>(pad)};
    REQUIRE(kernels::cpu::winograd_applies(g));
    const Tensor x = random({n, c, h, w}, 31).set_requires_grad(), wt = random({k, c, 3, 3}, 32).set_requires_grad(),
                 b = random({k}, 33).set_requires_grad();
    const Tensor y = conv2d(x, wt, b, 1, pad);
    EMBER_REQUIRE_CLOSE(y.to_vector<double>(), naive_conv(x, wt, b, 1, pad), 1e-12, 1e-12);
    const Tensor dy = random(y.shape(), 34);
    sum(y * dy).backward();
    const auto [dx, dw] = naive_conv_grads(x, wt, dy, 1, pad);
    EMBER_REQUIRE_CLOSE(x.grad().to_vector<double>(), dx, 1e-12, 1e-12);
    EMBER_REQUIRE_CLOSE(wt.grad().to_vector<double>(), dw, 1e-12, 1e-12);
    // In f32, within F(4×4, 3×3)'s rounding of the f64 result: its transforms scale a tile by up
    // to 100 (Bᵀ's 4s and 5s, twice) before Aᵀ's differences bring it back, so the error is about
    // 1e-5 of outputs near 1 (measured up to 2.0e-5 here), some 10× the direct sum's.
    const Tensor y32 = conv2d(x.detach().to(DType::f32), wt.detach().to(DType::f32), b.detach().to(DType::f32), 1, pad);
    EMBER_REQUIRE_CLOSE(y32.to_vector<double>(), y.to_vector<double>(), 1e-4, 1e-4);
  }
  SECTION("gradcheck, with ReLU fused") {
    require_gradcheck([](const std::vector<Tensor>& v) { return fused::conv2d_relu(v[0], v[1], v[2], 1, 1); },
                      {random({2, 8, 5, 6}, 35).set_requires_grad(), random({8, 8, 3, 3}, 36).set_requires_grad(),
                       random({8}, 37).set_requires_grad()});
  }
  SECTION("fewer than 8 channels, a stride or another kernel size take im2col") {
    CHECK_FALSE(kernels::cpu::winograd_applies({2, 7, 8, 8, 8, 3, 3, 1, 1}));
    CHECK_FALSE(kernels::cpu::winograd_applies({2, 8, 8, 8, 8, 3, 3, 2, 1}));
    CHECK_FALSE(kernels::cpu::winograd_applies({2, 8, 8, 8, 8, 5, 5, 1, 1}));
    CHECK_FALSE(kernels::cpu::winograd_applies({2, 8, 8, 8, 8, 3, 3, 1, 3}));
  }
}

TEST_CASE("conv2d_relu is relu(conv2d) in values and gradients, and Sequential fuses Conv2d→ReLU") {
  for (auto [stride, pad] : {std::pair{1, 0}, std::pair{2, 1}}) {
    INFO("stride " << stride << " padding " << pad);
    const Tensor x = random({2, 3, 6, 7}, 21), w = random({4, 3, 3, 3}, 22), b = random({4}, 23);
    EMBER_REQUIRE_CLOSE(fused::conv2d_relu(x, w, b, stride, pad).to_vector<double>(),
                        relu(conv2d(x, w, b, stride, pad)).to_vector<double>(), 0.0, 0.0);
    require_gradcheck(
        [s = stride, p = pad](const std::vector<Tensor>& v) { return fused::conv2d_relu(v[0], v[1], v[2], s, p); },
        {x.clone().set_requires_grad(), w.clone().set_requires_grad(), b.clone().set_requires_grad()});
  }
}

TEST_CASE("Sequential fuses Conv2d→ReLU(→MaxPool2d), with the values and gradients of the plain layers") {
  // conv2 with 8 input channels takes Winograd with the pooling in its tiles; with 4, im2col and
  // the pooling after it.
  const auto c1 = GENERATE(4, 8);
  INFO("conv1 channels " << c1);
  Generator g(5);
  auto model = nn::cnn(nn::CnnShape{.c1 = c1, .c2 = 8, .hidden = 16}, &g, FusionOptions::all());
  // conv1 with its ReLU, conv2 with its ReLU and the pooling, and the Linear with its ReLU.
  CHECK((model->fused_with(0) == 1 && model->fused_with(2) == 2 && model->fused_with(7) == 1));
  const Tensor images = rand({3, 1, 28, 28});
  std::vector<std::vector<float>> outputs, grads;
  model->eval();  // no dropout, so the two passes see the same network
  for (bool fused : {true, false}) {
    if (fused)
      CHECK(model->fuse(FusionOptions::all()) == 3);
    else
      model->unfuse();
    model->zero_grad();
    const Tensor logits = (*model)(images);
    outputs.push_back(logits.to_vector<float>());
    sum(logits).backward();
    std::vector<float> all;
    for (const Tensor& p : model->parameters()) {
      const auto v = p.grad().to_vector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    grads.push_back(all);
  }
  // The convolutions' fused and plain paths agree bit for bit; linear_relu's bias pass rounds
  // differently from the plain Linear's (its own test allows the same).
  EMBER_REQUIRE_CLOSE(outputs[0], outputs[1], 1e-6, 1e-5);
  EMBER_REQUIRE_CLOSE(grads[0], grads[1], 1e-7, 1e-5);
}

TEST_CASE("conv2d_relu_max_pool2d is max_pool2d(conv2d_relu) in values and gradients") {
  // 8 channels, 3×3, stride 1, a 2×2 pooling and even outputs: pooled in the Winograd tiles;
  // odd outputs, a stride or 4 channels: the convolution's output stored and pooled after.
  for (auto [c, size, stride, pad, pool] :
       {std::tuple{8, 6, 1, 0, 2}, std::tuple{8, 8, 1, 1, 2}, std::tuple{8, 7, 1, 0, 2}, std::tuple{8, 6, 1, 0, 3},
        std::tuple{4, 6, 1, 0, 2}, std::tuple{8, 9, 2, 1, 2}}) {
    INFO("channels " << c << " size " << size << " stride " << stride << " padding " << pad << " pool " << pool);
    const kernels::ConvGeometry geometry{
        2, static_cast<std::size_t>(c),      static_cast<std::size_t>(size), static_cast<std::size_t>(size), 8, 3,
        3, static_cast<std::size_t>(stride), static_cast<std::size_t>(pad)};
    const bool tiles = c == 8 && size % 2 == 0 && stride == 1 && pool == 2;
    CHECK(kernels::cpu::winograd_pools_tiles(geometry,
                                             {2, 8, geometry.oh(), geometry.ow(), static_cast<std::size_t>(pool),
                                              static_cast<std::size_t>(pool)}) == tiles);
    const Tensor x = random({2, c, size, size}, 41), w = random({8, c, 3, 3}, 42), b = random({8}, 43);
    std::vector<std::vector<double>> values, grads;
    for (bool fused : {true, false}) {
      const Tensor xg = x.clone().set_requires_grad(), wg = w.clone().set_requires_grad(),
                   bg = b.clone().set_requires_grad();
      const Tensor y = fused ? fused::conv2d_relu_max_pool2d(xg, wg, bg, stride, pad, pool)
                             : max_pool2d(fused::conv2d_relu(xg, wg, bg, stride, pad), pool);
      values.push_back(y.to_vector<double>());
      sum(y * random(y.shape(), 44)).backward();
      for (const Tensor& t : {xg, wg, bg}) {
        const auto v = t.grad().to_vector<double>();
        grads.push_back(v);
      }
    }
    EMBER_REQUIRE_CLOSE(values[0], values[1], 0.0, 0.0);
    for (std::size_t i = 0; i < 3; ++i) EMBER_REQUIRE_CLOSE(grads[i], grads[i + 3], 0.0, 0.0);
  }
  require_gradcheck(
      [](const std::vector<Tensor>& v) { return fused::conv2d_relu_max_pool2d(v[0], v[1], v[2], 1, 1, 2); },
      {random({2, 8, 4, 6}, 45).set_requires_grad(), random({8, 8, 3, 3}, 46).set_requires_grad(),
       random({8}, 47).set_requires_grad()});
}

TEST_CASE("max_pool2d's 2×2 path picks what the window definition does, NaN and ties included") {
  // Odd sizes leave a last row and column outside every window; values from a small set make
  // ties common; some NaNs.
  const std::int64_t n = 2, c = 3, h = 7, w = 9;
  std::vector<float> values(static_cast<std::size_t>(n * c * h * w));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = i % 17 == 5 ? std::nanf("") : static_cast<float>((i * 7) % 5);
  const Tensor x = from_vector(values, {n, c, h, w});
  for (int stride : {2, 1}) {  // 2×2 stride 2 takes the unrolled path, stride 1 the general one
    INFO("stride " << stride);
    const Tensor y = max_pool2d(x, 2, stride);
    const std::int64_t oh = (h - 2) / stride + 1, ow = (w - 2) / stride + 1;
    const auto got = y.to_vector<float>();
    for (std::int64_t p = 0; p < n * c; ++p)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          // The definition: a NaN in the window wins; else the largest value.
          float want = -INFINITY;
          bool nan = false;
          for (std::int64_t ky = 0; ky < 2; ++ky)
            for (std::int64_t kx = 0; kx < 2; ++kx) {
              const float v = values[static_cast<std::size_t>((p * h + oy * stride + ky) * w + ox * stride + kx)];
              nan = nan || std::isnan(v);
              want = std::max(want, v);
            }
          const float have = got[static_cast<std::size_t>((p * oh + oy) * ow + ox)];
          if (nan)
            CHECK(std::isnan(have));
          else
            CHECK(have == want);
        }
  }
  // Ties: the gradient goes to the first of equal values, row by row.
  const Tensor flat = ones({1, 1, 2, 2}).set_requires_grad();
  sum(max_pool2d(flat, 2)).backward();
  CHECK(flat.grad().to_vector<float>() == std::vector<float>{1, 0, 0, 0});
}

TEST_CASE("conv2d, max_pool2d and batch_norm pass gradcheck") {
  SECTION("conv2d with padding and stride") {
    require_gradcheck([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], 2, 1); },
                      {random({2, 2, 5, 4}, 4).set_requires_grad(), random({3, 2, 3, 3}, 5).set_requires_grad(),
                       random({3}, 6).set_requires_grad()});
  }
  SECTION("conv2d without bias") {
    require_gradcheck([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1]); },
                      {random({1, 2, 4, 4}, 7).set_requires_grad(), random({2, 2, 2, 2}, 8).set_requires_grad()});
  }
  SECTION("max_pool2d, disjoint and overlapping windows") {
    // Distinct values keep every window's maximum away from a tie, where the derivative jumps.
    std::vector<double> values(2 * 2 * 6 * 6);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<double>(i) * 1.7) * 3;
    const Tensor x = from_vector(values, {2, 2, 6, 6}).set_requires_grad();
    require_gradcheck([](const std::vector<Tensor>& v) { return max_pool2d(v[0], 2); }, {x});
    require_gradcheck([](const std::vector<Tensor>& v) { return max_pool2d(v[0], 3, 2); }, {x});
  }
  SECTION("batch_norm in training mode") {
    require_gradcheck(
        [](const std::vector<Tensor>& v) {
          Tensor rm = zeros({3}, {.dtype = DType::f64}), rv = ones({3}, {.dtype = DType::f64});
          return batch_norm(v[0], v[1], v[2], rm, rv, true);
        },
        {random({4, 3, 2, 2}, 9).set_requires_grad(), random({3}, 10, 0.5, 1.5).set_requires_grad(),
         random({3}, 11).set_requires_grad()});
  }
  SECTION("batch_norm in evaluation mode") {
    require_gradcheck(
        [](const std::vector<Tensor>& v) {
          Tensor rm = from_vector<double>({0.1, -0.2, 0.3}, {3}), rv = from_vector<double>({0.5, 1.5, 2.0}, {3});
          return batch_norm(v[0], v[1], v[2], rm, rv, false);
        },
        {random({2, 3, 2, 2}, 12).set_requires_grad(), random({3}, 13, 0.5, 1.5).set_requires_grad(),
         random({3}, 14).set_requires_grad()});
  }
}

TEST_CASE("max_pool2d picks window maxima and routes gradients to them") {
  const Tensor x =
      from_vector<float>({1, 5, 2, 0, 3, 4, 9, 8, 0, 0, 1, 1, 7, 0, 1, 6}, {1, 1, 4, 4}).set_requires_grad();
  const Tensor y = max_pool2d(x, 2);
  CHECK(y.to_vector<float>() == std::vector<float>{5, 9, 7, 6});
  sum(y * from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2})).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 4});
}

TEST_CASE("BatchNorm2d keeps PyTorch's running statistics and buffers") {
  nn::BatchNorm2d bn(2);
  std::vector<std::string> names;
  for (const auto& [name, t] : bn.state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  const Tensor x = from_vector<float>({1, 2, 3, 4, 10, 20, 30, 40}, {2, 2, 1, 2});  // channel 0: 1,2,10,20
  const Tensor y = bn(x);
  // Channel 0: mean 8.25, biased var 58.1875, unbiased 77.583…
  const auto yv = y.to_vector<float>();
  CHECK(yv[0] == Approx((1 - 8.25) / std::sqrt(58.1875 + 1e-5)).epsilon(1e-5));
  const auto rm = bn.named_buffers()[0].second.to_vector<float>(), rv = bn.named_buffers()[1].second.to_vector<float>();
  CHECK(rm[0] == Approx(0.1 * 8.25));
  CHECK(rv[0] == Approx(0.9 + 0.1 * 58.1875 * 4 / 3));
  CHECK(bn.named_buffers()[2].second.item<std::int64_t>() == 1);
  bn(x);
  CHECK(bn.named_buffers()[2].second.item<std::int64_t>() == 2);
  bn.eval();
  const Tensor e = bn(x);  // evaluation: the running statistics, and no update
  CHECK(bn.named_buffers()[2].second.item<std::int64_t>() == 2);
  const double mean = bn.named_buffers()[0].second.to_vector<float>()[0];
  const double var = bn.named_buffers()[1].second.to_vector<float>()[0];
  CHECK(e.to_vector<float>()[0] == Approx((1 - mean) / std::sqrt(var + 1e-5)).epsilon(1e-5));
  CHECK(bn.repr() == "BatchNorm2d(2, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
}

TEST_CASE("Conv2d initialization, summary and the MNIST CNN's names") {
  Generator g(1);
  nn::Conv2d conv(3, 8, 5, 1, 2, true, &g);
  const double bound = 1.0 / std::sqrt(3.0 * 25);
  for (float v : conv.weight().to_vector<float>()) CHECK(std::abs(v) <= bound);
  CHECK(conv.repr() == "Conv2d(3, 8, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2))");
  auto model = nn::cnn(4, 8, 16, &g);
  std::vector<std::string> names;
  for (const auto& [name, t] : model->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "7.weight", "7.bias", "10.weight",
                                          "10.bias"});
  CHECK((*model)(rand({3, 1, 28, 28})).shape() == Shape{3, 10});
  const nn::CnnShape shape = nn::cnn_shape_of(model->state_dict(), "cnn");
  CHECK((shape.c1 == 4 && shape.c2 == 8 && shape.hidden == 16));
  CHECK_THROWS_AS(nn::cnn_shape_of(nn::mlp(784, {32}, 10)->state_dict(), "mlp"), FormatError);

  // Other image sizes and class counts: 15×20 inputs pool to 5×8, 3 classes.
  auto wide = nn::cnn(nn::CnnShape{.c1 = 2, .c2 = 3, .hidden = 5, .height = 15, .width = 20, .classes = 3}, &g);
  CHECK((*wide)(rand({2, 1, 15, 20})).shape() == Shape{2, 3});
  const nn::CnnShape back = nn::cnn_shape_of(wide->state_dict(), "wide", 15, 20);
  CHECK((back.c2 == 3 && back.hidden == 5 && back.classes == 3 && back.flat_features() == 3 * 5 * 8));
  CHECK_THROWS_AS(nn::cnn_shape_of(wide->state_dict(), "wide"), FormatError);  // not for 28×28
  CHECK_THROWS_AS(nn::cnn(nn::CnnShape{.height = 5, .width = 28}), ShapeError);
}
