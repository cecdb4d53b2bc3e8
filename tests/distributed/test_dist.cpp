// dist:: in a world of one process (no mpirun: init_single_process): the collectives, the
// agreement checks, and the bucketed GradientReducer — its buckets, its hooks, the sum it leaves
// in .grad. Two ranks are tested end to end by test_distributed.py under mpirun.
#include <catch2/catch.hpp>

#include "core/ops/ops.h"
#include "distributed/dist.h"
#include "distributed/reducer.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

namespace {
struct World {
  World() { dist::init_single_process(); }
};
const World world;
}  // namespace

TEST_CASE("a world of one: collectives keep the values, checks pass") {
  REQUIRE(dist::is_initialized());
  CHECK(dist::rank() == 0);
  CHECK(dist::world_size() == 1);
  CHECK(dist::is_main());
  Tensor t = from_vector<float>({1.5f, -2, 3}, {3});
  dist::all_reduce(t);
  CHECK(t.to_vector<float>() == std::vector<float>{1.5f, -2, 3});
  dist::all_reduce(t, dist::ReduceOp::max);
  dist::broadcast(t, 0);
  CHECK(t.to_vector<float>() == std::vector<float>{1.5f, -2, 3});
  CHECK(dist::all_gather(42) == std::vector<std::uint64_t>{42});
  CHECK(dist::broadcast_string("lr=0.5") == "lr=0.5");
  CHECK(dist::all_agree(true));
  CHECK_FALSE(dist::all_agree(false));
  dist::check_same_on_all_ranks("options", "a=1;b=2");
  dist::check_identical("t", std::vector<Tensor>{t});
  auto work = dist::all_reduce_async(t);
  work->wait();
  CHECK(work->test());
}

TEST_CASE("hash_tensors changes with one bit, a shape or a dtype") {
  const Tensor a = from_vector<float>({1, 2, 3, 4}, {4});
  Tensor b = a.clone();
  const std::uint64_t h = dist::hash_tensors(std::vector<Tensor>{a});
  CHECK(dist::hash_tensors(std::vector<Tensor>{b}) == h);
  b.data<float>()[3] = std::nextafter(4.0f, 5.0f);
  CHECK(dist::hash_tensors(std::vector<Tensor>{b}) != h);
  CHECK(dist::hash_tensors(std::vector<Tensor>{a.reshape({2, 2})}) != h);
  CHECK(dist::hash_tensors(std::vector<Tensor>{a.to(DType::f64)}) != h);
}

TEST_CASE("the reducer buckets parameters in reverse order and leaves the average in .grad") {
  Tensor w1 = uniform({40, 30}, -1, 1).set_requires_grad();  // 4,800 bytes
  Tensor b1 = zeros({40}).set_requires_grad();
  Tensor w2 = uniform({10, 40}, -1, 1).set_requires_grad();  // 1,600 bytes
  Tensor b2 = zeros({10}).set_requires_grad();
  Tensor unused = zeros({3}).set_requires_grad();
  dist::GradientReducer reducer({w1, b1, w2, b2, unused}, {.bucket_bytes = 1700});
  // From the last: [unused, b2, w2] (1,652 bytes), [b1] (with it 1,812 would pass 1,700), [w1].
  CHECK(reducer.bucket_count() == 3);
  const Tensor x = uniform({8, 30}, -1, 1);
  const Tensor loss = sum(relu(linear(relu(linear(x, w1, b1)), w2, b2)));
  loss.backward();
  const std::vector<float> g1 = w1.grad().to_vector<float>(), g2 = w2.grad().to_vector<float>();
  reducer.finish();
  CHECK(w1.grad().to_vector<float>() == g1);  // one rank: the average is the gradient itself
  CHECK(w2.grad().to_vector<float>() == g2);
  REQUIRE(unused.grad().defined());  // never used: a zero gradient
  CHECK(unused.grad().to_vector<float>() == std::vector<float>(3, 0.0f));
  // A second step, then one whose micro-batch is only accumulated (hooks off).
  for (Tensor p : {w1, b1, w2, b2}) p.grad().zero_();
  reducer.set_enabled(false);
  sum(relu(linear(relu(linear(x, w1, b1)), w2, b2))).backward();
  reducer.set_enabled(true);
  sum(relu(linear(relu(linear(x, w1, b1)), w2, b2))).backward();
  reducer.finish();
  const std::vector<float> twice = w1.grad().to_vector<float>();
  for (std::size_t i = 0; i < g1.size(); ++i) CHECK(twice[i] == g1[i] + g1[i]);
}

TEST_CASE("a parameter whose gradient arrives twice in one backward is refused") {
  Tensor w = uniform({4, 4}, -1, 1).set_requires_grad();
  dist::GradientReducer reducer({w});
  const Tensor x = uniform({2, 4}, -1, 1);
  const std::string message = message_of<dist::DistError>([&] { sum(matmul(matmul(x, w), w)).backward(); });
  CHECK_THAT(message, Contains("received a gradient twice in one backward"));
}
