// Tensor: factories, views that share storage, copies, conversions, host access and printing.
#include <catch2/catch.hpp>

#include <sstream>

#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

TEST_CASE("factories make the shapes, dtypes and values asked for") {
  const Tensor z = zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dtype() == DType::f32);
  CHECK(z.device() == Device::cpu());
  CHECK(z.numel() == 6);
  CHECK(z.nbytes() == 24);
  CHECK(z.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ones({3}, {.dtype = DType::i64}).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1, 1});
  CHECK(full({2}, 2.5, {.dtype = DType::f64}).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(arange(4).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  CHECK(arange(1.0, 2.0, 0.25).to_vector<float>() == std::vector<float>{1.0f, 1.25f, 1.5f, 1.75f});
  CHECK(arange(0).numel() == 0);
  const Tensor s = scalar_tensor(7.0);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item<float>() == 7.0f);
  const Tensor v = from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v.dtype() == DType::i32);
  CHECK(v.at<std::int32_t>({1, 2}) == 6);
  CHECK_THROWS_AS(from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
  CHECK_THROWS_AS(zeros({2, -1}), ShapeError);
  CHECK(empty({0, 5}).numel() == 0);
}

TEST_CASE("random factories are reproducible from a seed and have the right statistics") {
  Generator a(42), b(42), c(43);
  const auto x = rand({1000}, {}, &a).to_vector<float>();
  CHECK(x == rand({1000}, {}, &b).to_vector<float>());
  CHECK(x != rand({1000}, {}, &c).to_vector<float>());
  double sum = 0;
  for (float v : x) {
    CHECK(v >= 0.0f);
    CHECK(v < 1.0f);
    sum += v;
  }
  CHECK(sum / 1000 == Approx(0.5).margin(0.05));
  Generator g(1);
  const auto n = randn({20000}, {.dtype = DType::f64}, &g).to_vector<double>();
  double mean = 0, sq = 0;
  for (double v : n) mean += v;
  mean /= n.size();
  for (double v : n) sq += (v - mean) * (v - mean);
  CHECK(mean == Approx(0.0).margin(0.03));
  CHECK(std::sqrt(sq / n.size()) == Approx(1.0).margin(0.03));
  const auto r = randint(3, 7, {500}, {.dtype = DType::i64}, &g).to_vector<std::int64_t>();
  for (auto v : r) CHECK((v >= 3 && v < 7));
  manual_seed(5);
  const auto d1 = rand({4}).to_vector<float>();
  manual_seed(5);
  CHECK(d1 == rand({4}).to_vector<float>());
}

TEST_CASE("reshape and view share storage; -1 is inferred") {
  Tensor t = arange(6);
  Tensor r = t.reshape({2, -1});
  CHECK(r.shape() == Shape{2, 3});
  CHECK(r.storage() == t.storage());
  NoGradGuard no_grad;
  r.fill_(1.0);
  CHECK(t.to_vector<float>() == std::vector<float>(6, 1.0f));
  CHECK(t.view({3, 2}).shape() == Shape{3, 2});
  CHECK_THROWS_AS(t.reshape({}), ShapeError);  // 6 elements cannot become a scalar
  CHECK_THAT(message_of<ShapeError>([&] {
               t.reshape({4, 2});
             }),
             Contains("cannot reshape a tensor of shape [6] (6 elements) into [4, 2]"));
  CHECK_THROWS_AS(t.reshape({-1, -1}), ShapeError);
  CHECK(zeros({2, 3, 4}).flatten(1).shape() == Shape{2, 12});
  CHECK(zeros({2, 3, 4}).flatten().shape() == Shape{24});
}

TEST_CASE("narrow along dim 0 shares storage at an offset") {
  Tensor t = arange(12).reshape({4, 3});
  Tensor rows = t.narrow(0, 1, 2);
  CHECK(rows.shape() == Shape{2, 3});
  CHECK(rows.offset() == 3);
  CHECK(rows.storage() == t.storage());
  CHECK(rows.to_vector<float>() == std::vector<float>{3, 4, 5, 6, 7, 8});
  rows.fill_(-1.0);
  CHECK(t.at<float>({1, 0}) == -1.0f);
  CHECK(t.at<float>({3, 0}) == 9.0f);
  CHECK_THROWS_AS(t.narrow(0, 3, 2), IndexError);
  CHECK_THAT(message_of<ShapeError>([&] { t.narrow(1, 0, 1); }), Contains("ember::slice"));
}

TEST_CASE("to(cpu) of a CPU tensor is the tensor itself; clone and copy_ copy") {
  Tensor t = arange(3);
  CHECK(t.to(Device::cpu()).is_same(t));
  CHECK(t.cpu().is_same(t));
  Tensor c = t.clone();
  CHECK_FALSE(c.storage() == t.storage());
  c.fill_(5.0);
  CHECK(t.to_vector<float>() == std::vector<float>{0, 1, 2});
  Tensor dst = zeros({3});
  dst.copy_(t);
  CHECK(dst.to_vector<float>() == std::vector<float>{0, 1, 2});
  Tensor ints = zeros({3}, {.dtype = DType::i32});
  ints.copy_(full({3}, 2.75));  // converts, truncating like C++
  CHECK(ints.to_vector<std::int32_t>() == std::vector<std::int32_t>{2, 2, 2});
  CHECK_THAT(message_of<ShapeError>([&] { dst.copy_(zeros({4})); }), Contains("the source has shape [4]"));
}

TEST_CASE("dtype conversion covers every pair") {
  const Tensor f = from_vector<float>({0.0f, 1.0f, 200.0f, 255.0f}, {4});
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
    const Tensor c = f.to(d);
    CHECK(c.dtype() == d);
    CHECK(c.to_vector<double>() == std::vector<double>{0, 1, 200, 255});
    CHECK(c.to(DType::f32).to_vector<float>() == std::vector<float>{0, 1, 200, 255});
  }
  CHECK(f.to(DType::f32).is_same(f));
  CHECK(from_vector<float>({1.9f, -2.7f}, {2}).to(DType::i64).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{1, -2});  // float to integer truncates, as in C++
}

TEST_CASE("host access checks dtype and element counts") {
  Tensor t = zeros({2, 2});
  CHECK_THAT(message_of<DTypeError>([&] { t.data<double>(); }),
             Contains("expected a tensor of dtype f64, but this tensor has dtype f32"));
  CHECK_THAT(message_of<ValueError>([&] { t.item<float>(); }), Contains("only one-element tensors"));
  CHECK_THROWS_AS(t.at<float>({2, 0}), IndexError);
  CHECK_THROWS_AS(t.at<float>({0}), IndexError);
  CHECK_THROWS_AS(Tensor().shape(), ValueError);
  CHECK(t.size(-1) == 2);
  CHECK_THROWS_AS(t.size(2), IndexError);
}

TEST_CASE("printing shows values, shape, dtype and device") {
  std::ostringstream out;
  out << from_vector<float>({1, 2, 3, 4}, {2, 2});
  CHECK(out.str() == "tensor([[1, 2],\n [3, 4]], shape=[2, 2], dtype=f32, device=cpu)");
  std::ostringstream longer;
  longer << arange(10, {.dtype = DType::i64});
  CHECK(longer.str() == "tensor([0, 1, 2, ..., 7, 8, 9], shape=[10], dtype=i64, device=cpu)");
  std::ostringstream scalar;
  scalar << scalar_tensor(3.5);
  CHECK(scalar.str() == "tensor(3.5, shape=[], dtype=f32, device=cpu)");
  std::ostringstream undefined;
  undefined << Tensor();
  CHECK(undefined.str() == "tensor(undefined)");
}
