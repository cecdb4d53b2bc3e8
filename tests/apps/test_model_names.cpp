// Model files under other names: pytorch/examples' MNIST Net renamed to nn::cnn's (Note
// [pytorch/examples' Net names]), files of no naming ember reads, and non-finite weights.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "apps/common/model_card.h"
#include "apps/common/model_names.h"
#include "layers/models.h"
#include "layers/nn.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;
using ember::testing::state_values;
namespace fs = std::filesystem;

namespace {

// A model's state dict under the Net's names: 0.weight → conv1.weight, ..., 10.bias → fc2.bias.
StateDict as_example_net(const nn::Module& model) {
  StateDict net;
  for (const auto& [name, t] : model.state_dict()) {
    const std::string index = name.substr(0, name.find('.')), field = name.substr(name.find('.'));
    for (const apps::NameAlias& alias : apps::kExampleNetNames)
      if (index == alias.ours) net.emplace_back(alias.theirs + field, t);
  }
  return net;
}

Tensor& tensor_named(StateDict& state, const std::string& name) {
  for (auto& [key, t] : state)
    if (key == name) return t;
  FAIL("no tensor " << name);
  throw;
}

}  // namespace

TEST_CASE("pytorch/examples' Net loads under its own names, its input scaling assumed and said") {
  Generator g(5);
  auto model = nn::cnn(nn::CnnShape{.c1 = 2, .c2 = 3, .hidden = 4}, &g);
  const StateDict net = as_example_net(*model);
  REQUIRE(net.size() == 8);
  CHECK(apps::naming_of(net) == apps::Naming::example_net);
  CHECK(apps::naming_of(model->state_dict()) == apps::Naming::ember);

  const Checkpoint file{net, {}};
  const apps::ModelCard card = apps::read_model_card(file, "net");
  CHECK((card.kind == "cnn" && card.height == 28 && card.classes.size() == 10));
  CHECK((card.normalization.mean == 0.1307f && card.normalization.std == 0.3081f));
  CHECK_THAT(card.normalization_assumed, Contains("Normalize((0.1307,), (0.3081,))"));
  CHECK(state_values(*apps::build_model(card, file, "net")) == state_values(*model));
  // The scaling recorded: nothing assumed. Another file without it: pixel/255, said so.
  const apps::ModelCard recorded = apps::read_model_card({net, {{"input_mean", "0.5"}, {"input_std", "0.25"}}}, "n");
  CHECK((recorded.normalization_assumed.empty() && recorded.normalization.mean == 0.5f));
  const apps::ModelCard plain = apps::read_model_card({nn::mlp(784, {4}, 10, &g)->state_dict(), {}}, "mlp");
  CHECK((plain.normalization.mean == 0.0f && plain.normalization.std == 1.0f));
  CHECK_THAT(plain.normalization_assumed, Contains("pixel/255"));

  // load_weights (mnist_train --init): into a CNN of the same widths; an MLP is told what the file
  // holds; a CNN of other widths gets load_state_dict's message, with the renaming named.
  const auto path = fs::temp_directory_path() / ("ember_example_net_" + std::to_string(::getpid()) + ".safetensors");
  save_safetensors(path.string(), net);
  Generator other(6);
  auto target = nn::cnn(nn::CnnShape{.c1 = 2, .c2 = 3, .hidden = 4}, &other);
  apps::load_weights(*target, card, path.string());
  CHECK(state_values(*target) == state_values(*model));
  apps::ModelCard mlp_card;
  const std::string as_mlp =
      message_of<FormatError>([&] { apps::load_weights(*nn::mlp(784, {4}, 10), mlp_card, path.string()); });
  CHECK_THAT(as_mlp, Contains("(pytorch/examples' MNIST Net), which ember's cnn matches after renaming (conv1 → 0, "
                              "conv2 → 2, fc1 → 7, fc2 → 10); the model it is to load into is an mlp"));
  auto wider = nn::cnn(nn::CnnShape{.c1 = 5, .c2 = 3, .hidden = 4});
  const std::string widths = message_of<ValueError>([&] { apps::load_weights(*wider, card, path.string()); });
  CHECK_THAT(widths, Contains("pytorch/examples' MNIST Net") && Contains("size mismatch for 0.weight"));
  fs::remove(path);
}

TEST_CASE("a file ember cannot build is described: its tensors, and what ember reads") {
  Generator g(7);
  StateDict net = as_example_net(*nn::cnn(nn::CnnShape{.c1 = 2, .c2 = 3, .hidden = 4}, &g));
  // The Net's names with 5×5 kernels: the shapes found and those needed.
  StateDict five = net;
  tensor_named(five, "conv1.weight") = zeros({2, 1, 5, 5});
  CHECK_THAT(message_of<FormatError>([&] {
               apps::read_model_card({five, {}}, "five");
             }),
             Contains("five: the tensors have the names of pytorch/examples' MNIST Net") &&
                 Contains("conv1.weight [2, 1, 5, 5]") && Contains("needs conv1.weight [C1, 1, 3, 3]") &&
                 Contains("fc1.weight [H, C2·12·12]"));
  // Names of no model ember builds, and the Net's names with one more tensor.
  const StateDict foreign{{"features.0.weight", zeros({2, 1, 3, 3})}, {"classifier.weight", zeros({10, 8})}};
  CHECK_THAT(message_of<FormatError>([&] {
               apps::read_model_card({foreign, {}}, "f");
             }),
             Contains("f: not a model ember can build: the file holds features.0.weight [2, 1, 3, 3], "
                      "classifier.weight [10, 8] (2 tensors)") &&
                 Contains("0.*, 2.*, 7.*, 10.*") && Contains("conv1.*, conv2.*, fc1.*, fc2.*"));
  StateDict more = net;
  more.emplace_back("fc3.weight", zeros({10, 10}));
  CHECK_THAT(message_of<FormatError>([&] {
               apps::read_model_card({more, {}}, "m");
             }),
             Contains("some of the names of pytorch/examples' MNIST Net but not exactly its eight tensors"));
  // A NaN or an infinity: refused, naming the file's tensor.
  const apps::ModelCard card = apps::read_model_card({net, {}}, "net");
  StateDict bad = net;
  tensor_named(bad, "conv2.weight") = tensor_named(bad, "conv2.weight").clone();
  tensor_named(bad, "conv2.weight").data<float>()[4] = NAN;
  CHECK_THAT(message_of<FormatError>([&] {
               apps::build_model(card, {bad, {}}, "bad.safetensors");
             }),
             Contains("bad.safetensors: tensor conv2.weight holds NaN or infinite values"));
  tensor_named(bad, "conv2.weight").data<float>()[4] = -INFINITY;
  CHECK_THROWS_AS(apps::build_model(card, {bad, {}}, "bad"), FormatError);
}
