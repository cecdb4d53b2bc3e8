// nn::Loss and the loss Modules: PyTorch's criteria by name and argument, what they compute against
// the ops they name, the weight moved with the module, and the refusals. The ops themselves are in
// the op table (nll_loss, mse_loss, cross_entropy's options), against PyTorch and across devices.
#include <catch2/catch.hpp>

#include "core/ops/ops.h"
#include "core/tensor/random.h"
#include "layers/nn.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;

namespace {

double value(const Tensor& t) { return t.item<double>(); }

}  // namespace

TEST_CASE("the loss Modules compute their op with PyTorch's arguments and print as PyTorch does") {
  Generator g(11);
  const Tensor logits = randn({6, 4}, {}, &g), target = from_vector<std::int64_t>({0, 1, 3, 1, 2, 0}, {6});
  const Tensor weight = from_vector<float>({0.5f, 1.0f, 2.0f, 1.5f}, {4});
  nn::CrossEntropyLoss plain;
  CHECK(value(plain(logits, target)) == value(cross_entropy(logits, target)));
  CHECK(plain.repr() == "CrossEntropyLoss()");
  CHECK(plain.loss().is_plain_cross_entropy());
  nn::CrossEntropyLoss full(weight, 1, 0.1);
  const CrossEntropyOptions options{.weight = weight, .ignore_index = 1, .label_smoothing = 0.1};
  CHECK(value(full(logits, target)) == value(cross_entropy(logits, target, options)));
  CHECK(full.repr() == "CrossEntropyLoss(weight=[4], ignore_index=1, label_smoothing=0.1)");
  CHECK_FALSE(full.loss().is_plain_cross_entropy());
  // The weight is a buffer (state_dict, to(device)), as torch.nn.CrossEntropyLoss registers it.
  REQUIRE(full.named_buffers().size() == 1);
  CHECK(full.named_buffers()[0].first == "weight");
  const Tensor log_probs = log_softmax(logits);
  nn::NLLLoss nll(weight);
  CHECK(value(nll(log_probs, target)) == value(nll_loss(log_probs, target, weight)));
  // Without options, NLL of log_softmax is the cross-entropy, to rounding.
  CHECK(value(nn::NLLLoss()(log_probs, target)) == Approx(value(plain(logits, target))).epsilon(1e-6));
  nn::MSELoss mse;
  const Tensor other = randn({6, 4}, {}, &g);
  CHECK(value(mse(logits, other)) == value(mean((logits - other) * (logits - other))));
  CHECK(mse.repr() == "MSELoss()");
}

TEST_CASE("an ignored target leaves its row out of the loss and of the mean's count") {
  const Tensor logits = from_vector<float>({2, 0, 0, 0, 3, 0, 1, 1, 1}, {3, 3});
  const Tensor kept_rows = from_vector<float>({2, 0, 0, 1, 1, 1}, {2, 3});
  const Tensor target = from_vector<std::int64_t>({0, 2, 1}, {3});
  // Row 1's target is 2: ignored, the loss is the mean over rows 0 and 2 alone.
  const double ignored = value(cross_entropy(logits, target, CrossEntropyOptions{.ignore_index = 2}));
  CHECK(ignored == Approx(value(cross_entropy(kept_rows, from_vector<std::int64_t>({0, 1}, {2})))).epsilon(1e-6));
  // Every row ignored: 0/0, NaN, as PyTorch gives.
  CHECK(std::isnan(value(nll_loss(logits, from_vector<std::int64_t>({5, 5, 5}, {3}), Tensor(), 5))));
}

TEST_CASE("a loss refuses what it does not take, naming it") {
  const Tensor logits = zeros({2, 3}), target = from_vector<std::int64_t>({0, 2}, {2});
  CHECK_THAT(message_of<ValueError>([] { nn::CrossEntropyLoss(Tensor(), std::nullopt, 1.5); }),
             Contains("label_smoothing must be in [0, 1]"));
  CHECK_THAT(message_of<ValueError>([] {
               nn::Loss{nn::Loss::Kind::mse, {.ignore_index = 0}}.check();
             }),
             Contains("MSELoss takes no weight and no ignore_index"));
  CHECK_THAT(message_of<ValueError>([] {
               nn::Loss{nn::Loss::Kind::nll, {.label_smoothing = 0.1}}.check();
             }),
             Contains("only CrossEntropyLoss takes label_smoothing"));
  CHECK_THAT(message_of<ShapeError>([&] { nn::CrossEntropyLoss(ones({2}))(logits, target); }),
             Contains("'weight' must have one value per class, shape [3]"));
  CHECK_THAT(message_of<ShapeError>([&] { mse_loss(logits, zeros({3, 2})); }), Contains("they must be equal"));
  CHECK_THAT(message_of<ValueError>([&] { nn::MSELoss().forward(logits); }), Contains("an output and a target"));
  // A target outside [0, C) that is not ignored is an error, as in PyTorch.
  CHECK_THROWS_AS(cross_entropy(logits, from_vector<std::int64_t>({0, 3}, {2}), CrossEntropyOptions{.ignore_index = 1}),
                  IndexError);
}
