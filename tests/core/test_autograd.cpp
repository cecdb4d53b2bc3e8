// The autograd engine: recording, leaves, accumulation, retain_graph, detach, NoGradGuard, and
// graphs deep enough to break a recursive implementation.
#include <catch2/catch.hpp>

#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

TEST_CASE("requires_grad propagates; leaves and non-leaves") {
  Tensor x = from_vector<double>({1, 2, 3}, {3}).set_requires_grad();
  Tensor c = from_vector<double>({4, 5, 6}, {3});
  Tensor y = x * c;
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
  CHECK_FALSE(c.requires_grad());
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn() != nullptr);
  CHECK_FALSE((c * c).requires_grad());
  CHECK_THROWS_AS(ones({2}, {.dtype = DType::i64}).set_requires_grad(), DTypeError);
  CHECK_THROWS_AS(y.set_requires_grad(false), AutogradError);
}

TEST_CASE("backward accumulates into leaves' .grad and leaves non-leaves alone") {
  Tensor x = from_vector<double>({1, 2, 3}, {3}).set_requires_grad();
  Tensor y = x * x;
  sum(y).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK_FALSE(y.grad().defined());
  sum(x * 3.0).backward();  // accumulates, like PyTorch
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 7, 9});
  x.set_grad(Tensor());
  sum(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1, 1});
}

TEST_CASE("a tensor used twice receives both gradients") {
  Tensor x = from_vector<double>({2}, {1}).set_requires_grad();
  Tensor y = x * x + x;  // dy/dx = 2x + 1 = 5
  y.backward(ones({1}, {.dtype = DType::f64}));
  CHECK(x.grad().item<double>() == 5.0);
}

TEST_CASE("backward on a non-scalar needs a gradient of the output's shape") {
  Tensor x = ones({2}, {.dtype = DType::f64, .requires_grad = true});
  Tensor y = x * 2.0;
  CHECK_THAT(message_of<AutogradError>([&] { y.backward(); }), Contains("only for a scalar output"));
  CHECK_THAT(message_of<AutogradError>([&] { y.backward(ones({3}, {.dtype = DType::f64})); }),
             Contains("the gradient has shape [3]"));
  y.backward(from_vector<double>({1, 10}, {2}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 20});
}

TEST_CASE("the graph is freed after backward unless retain_graph") {
  Tensor x = from_vector<double>({3}, {1}).set_requires_grad();
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().item<double>() == Approx(2 * std::exp(3.0)));
  CHECK_THAT(message_of<AutogradError>([&] { y.backward(); }), Contains("a second time"));
}

TEST_CASE("detach and NoGradGuard stop recording") {
  Tensor x = ones({2}, {.dtype = DType::f64, .requires_grad = true});
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.storage() == x.storage());
  {
    NoGradGuard guard;
    CHECK_FALSE(autograd::is_grad_enabled());
    CHECK_FALSE((x * 2.0).requires_grad());
  }
  CHECK(autograd::is_grad_enabled());
  CHECK((x * 2.0).requires_grad());
  CHECK_THAT(message_of<AutogradError>([&] { sum(d).backward(); }), Contains("does not require grad"));
}

TEST_CASE("in-place changes to tensors that require grad are refused while recording") {
  Tensor w = ones({2}, {.requires_grad = true});
  CHECK_THAT(message_of<AutogradError>([&] { w.fill_(0.0); }), Contains("NoGradGuard"));
  CHECK_THROWS_AS(add_(w, ones({2})), AutogradError);
  NoGradGuard guard;
  add_(w, ones({2}));
  mul_(w, 3.0);
  CHECK(w.to_vector<float>() == std::vector<float>{6, 6});
}

TEST_CASE("gradients flow through reshape, narrow, clone and to") {
  Tensor x = arange(6, {.dtype = DType::f64}).set_requires_grad();
  Tensor y = x.reshape({3, 2}).narrow(0, 1, 2).clone().to(Device::cpu());
  sum(y * y).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 4, 6, 8, 10});
}

TEST_CASE("a chain of 100,000 ops neither overflows the stack in backward nor when freed") {
  Tensor x = from_vector<double>({1.0}, {1}).set_requires_grad();
  {
    Tensor y = x;
    for (int i = 0; i < 100000; ++i) y = y * 1.0;
    y.backward(ones({1}, {.dtype = DType::f64}));
    CHECK(x.grad().item<double>() == 1.0);
  }
  {
    Tensor y = x;
    for (int i = 0; i < 100000; ++i) y = y + 0.0;
    // freed here without a backward pass: the teardown must be iterative too
  }
  SUCCEED("no stack overflow");
}

TEST_CASE("a derivative rule that returns a wrong shape is reported with the op's name") {
  Tensor x = ones({3}, {.dtype = DType::f64, .requires_grad = true});
  Tensor y = x * 2.0;
  Tensor broken = y.detach();
  autograd::record(broken, "broken_op", {&y}, [](const Tensor&, autograd::NeedsGrad) {
    return autograd::Gradients{ones({4}, {.dtype = DType::f64})};
  });
  CHECK_THAT(message_of<AutogradError>([&] { sum(broken).backward(); }),
             Contains("the derivative rule of 'broken_op' returned a gradient of shape [4]"));
}

TEST_CASE("on_grad_accumulated runs after each addition into a leaf's .grad, until its handle goes") {
  Tensor w = from_vector<double>({1, 2}, {2}).set_requires_grad();
  std::vector<double> seen;
  {
    autograd::HookHandle handle =
        autograd::on_grad_accumulated(w, [&] { seen.push_back(w.grad().to_vector<double>()[0]); });
    sum(w * 3.0).backward();
    CHECK(seen == std::vector<double>{3});
    sum(w * w + w).backward();  // w three times in the graph: three additions, three calls
    REQUIRE(seen.size() == 4);
    CHECK(seen.back() == 3 + 2 * 1 + 1);
    autograd::HookHandle moved = std::move(handle);
    sum(w).backward();
    CHECK(seen.size() == 5);
  }
  sum(w).backward();  // both handles gone: no call
  CHECK(seen.size() == 5);
  CHECK_THROWS_AS(autograd::on_grad_accumulated(w * 2.0, [] {}), AutogradError);  // not a leaf
}
