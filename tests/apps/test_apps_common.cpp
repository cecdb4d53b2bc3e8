// What the programs share: model cards, preparing photos like each dataset, the curves' axes, and
// the checks of options and devices (checkpoints: tests/train/test_checkpoint.cpp).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "apps/common/images.h"
#include "apps/common/model_card.h"
#include "apps/common/plot.h"
#include "apps/common/program.h"
#include "core/cuda/runtime.h"
#include "core/ops/ops.h"
#include "layers/models.h"
#include "layers/nn.h"
#include "optim/optimizer.h"
#include "support/helpers.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;
using ember::testing::state_values;
namespace fs = std::filesystem;

TEST_CASE("model cards travel with the model and rebuild it") {
  apps::ModelCard card{.kind = "cnn",
                       .height = 10,
                       .width = 12,
                       .classes = {"a", "b", "c"},
                       .dataset = "idx",
                       .preprocess = "plain",
                       .normalization = {0.25f, 0.5f},
                       .normalization_assumed = {},
                       .hidden = {4},
                       .channels = {2, 3}};
  // A new model from the card is the one its architecture names, initialized alike.
  Generator g(3), again(3);
  auto model = nn::cnn(nn::CnnShape{.c1 = 2, .c2 = 3, .hidden = 4, .height = 10, .width = 12, .classes = 3}, &g);
  CHECK(state_values(*apps::new_model(card, &again, FusionOptions::none())) == state_values(*model));
  const Checkpoint file{model->state_dict(), card.to_metadata()};
  CHECK((file.metadata.at("hidden") == "4" && file.metadata.at("channels") == "2,3"));
  const apps::ModelCard back = apps::read_model_card(file, "f");
  CHECK((back.kind == "cnn" && back.height == 10 && back.width == 12 && back.classes == card.classes));
  CHECK((back.normalization.mean == 0.25f && back.normalization.std == 0.5f && back.preprocess == "plain"));
  CHECK(state_values(*apps::build_model(back, file, "f")) == state_values(*model));

  // Names that do not fit the model's outputs.
  Checkpoint wrong = file;
  wrong.metadata["classes"] = R"(["a","b"])";
  CHECK_THAT(message_of<FormatError>([&] { apps::read_model_card(wrong, "f"); }),
             Contains("f: the metadata names 2 classes but the model has 3 outputs"));
  // A file from PyTorch (no metadata): MNIST's conventions, the architecture from the shapes.
  const Checkpoint bare{nn::mlp(784, {8}, 10, &g)->state_dict(), {}};
  const apps::ModelCard plain = apps::read_model_card(bare, "bare");
  CHECK((plain.kind == "mlp" && plain.height == 28 && plain.classes.size() == 10 && plain.preprocess == "digit"));
  CHECK((plain.normalization.mean == 0.0f && plain.normalization.std == 1.0f));
  // ember 0.1's flag for MNIST's normalization.
  const Checkpoint v01{bare.tensors, {{"normalize", "1"}}};
  CHECK(apps::read_model_card(v01, "v01").normalization.mean == 0.1307f);
  // An MLP of 36 inputs without a recorded size: a 6×6 image; of 35, no square: refused.
  CHECK(apps::read_model_card({nn::mlp(36, {}, 2, &g)->state_dict(), {}}, "s").height == 6);
  CHECK_THROWS_AS(apps::read_model_card({nn::mlp(35, {}, 2, &g)->state_dict(), {}}, "s"), FormatError);
}

TEST_CASE("a new MLP from its card, and the training curves drawn as epochs come") {
  apps::ModelCard card;
  card.height = 4;
  card.width = 5;
  card.classes = {"x", "y"};
  card.hidden = {6, 3};
  Generator g(2), again(2);
  CHECK(state_values(*apps::new_model(card, &g, FusionOptions::none())) ==
        state_values(*nn::mlp(20, {6, 3}, 2, &again)));
  card.kind = "cnn";  // a CNN needs one hidden width and two channel widths
  CHECK_THAT(message_of<ValueError>([&] { apps::new_model(card, &g, FusionOptions::none()); }),
             Contains("the card has cnn with 2 and 0"));

  const auto svg = fs::temp_directory_path() / ("ember_curves_" + std::to_string(::getpid()) + ".svg");
  apps::TrainingCurves curves(svg.string(), "a run");
  train::EpochReport report;
  report.train.loss = 0.9;
  report.validation = {.loss = 0.8, .accuracy = 0.7};
  curves.add(report);
  report.epoch = 1;
  curves.add(report);
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Contains("<svg") && Contains("a run") && Contains("</svg>"));
  fs::remove(svg);
  apps::TrainingCurves("", "nowhere").add(report);  // an empty path writes nothing
}

TEST_CASE("the curves' axes: accuracy within [0, 1], loss from 0 up, also for a single epoch") {
  using Range = std::pair<double, double>;
  // One epoch (or the first after a resume): a window around the value, not -0.14 to 2.06.
  const Range accuracy = apps::axis_range({0.96}, 0.0, 1.0);
  CHECK((accuracy.first > 0.8 && accuracy.first < 0.96 && accuracy.second == 1.0));
  const Range loss = apps::axis_range({0.3, 0.3}, 0.0, HUGE_VAL);
  CHECK((loss.first > 0.2 && loss.first < 0.3 && loss.second > 0.3 && loss.second < 0.4));
  CHECK(apps::axis_range({0.0}, 0.0, HUGE_VAL).first == 0.0);
  CHECK(apps::axis_range({1.0}, 0.0, 1.0).second == 1.0);
  // Several epochs: their range padded by 5%, the padding stopping at the bounds.
  const Range rising = apps::axis_range({0.90, 0.999}, 0.0, 1.0);
  CHECK((std::abs(rising.first - 0.89505) < 1e-12 && rising.second == 1.0));
  const Range falling = apps::axis_range({0.02, 2.0}, 0.0, HUGE_VAL);
  CHECK((falling.first == 0.0 && std::abs(falling.second - 2.099) < 1e-12));
  // Nothing finite to show: the bounds, or [floor, floor + 1] when there is no ceiling.
  CHECK(apps::axis_range({NAN}, 0.0, 1.0) == Range{0.0, 1.0});
  CHECK(apps::axis_range({}, 0.0, HUGE_VAL) == Range{0.0, 1.0});

  // The picture of one epoch: no tick below 0 or above 1 on the accuracy axis.
  const auto svg = fs::temp_directory_path() / ("ember_one_epoch_" + std::to_string(::getpid()) + ".svg");
  apps::write_svg_plot(svg.string(), {{.epoch = 0, .train_loss = 0.4, .val_loss = 0.3, .val_acc = 0.96}}, "one");
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(svg);
  const std::regex tick("text-anchor='end' font-size='10'>([^<]*)<");  // the values' axes' labels
  int ticks = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), tick); it != std::sregex_iterator(); ++it, ++ticks) {
    const double v = std::stod((*it)[1].str());
    INFO("tick " << v);
    CHECK((v >= 0.0 && v <= 1.0));
  }
  CHECK(ticks == 10);  // five on each axis
}

TEST_CASE("options: ranges and devices are refused in words that name the option and the way out") {
  CLI::App app;
  int epochs = 1;
  double decay = 0;
  app.add_option("--epochs", epochs)->check(apps::positive);
  app.add_option("--weight-decay", decay)->check(apps::non_negative);
  auto refusal = [&](std::vector<std::string> args) -> std::string {
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    try {
      app.parse(args);
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(refusal({"--epochs", "0"}) == "--epochs: 0 is not a positive number");
  CHECK(refusal({"--epochs", "-3"}) == "--epochs: -3 is not a positive number");
  CHECK(refusal({"--epochs", "many"}) == "--epochs: many is not a number");
  CHECK(refusal({"--weight-decay", "-0.5"}) == "--weight-decay: -0.5 is negative (expected 0 or more)");
  CHECK(refusal({"--weight-decay", "inf"}) == "--weight-decay: inf is not a finite number");
  CHECK(refusal({"--epochs", "2", "--weight-decay", "0"}).empty());
  CHECK((epochs == 2 && decay == 0.0));

  std::string reason;
  CHECK_THAT(message_of<apps::UsageError>([&] { apps::choose_device("--device", "tpu", reason); }),
             Contains("--device tpu: invalid device 'tpu'"));
  if (!cuda::is_available()) {
    // The library's DeviceError suggests Device::best(); a program's user is told the option's values.
    const std::string why = message_of<apps::UsageError>([&] { apps::choose_device("--device", "cuda", reason); });
    CHECK(why ==
          "--device cuda: cannot use cuda:0: " + cuda::unavailable_reason() + "; use --device auto or --device cpu");
    CHECK_THAT(message_of<DeviceError>([] { require_usable(Device::cuda(0)); }), Contains("Device::best()"));
  }
  CHECK(apps::choose_device("--device", "cpu", reason) == Device::cpu());
}

TEST_CASE("photos are prepared the way each dataset was made") {
  // An article: a 10×20 block with a gradient, centred in a 28×28 field as Fashion-MNIST does.
  std::vector<std::uint8_t> sample(28 * 28, 0);
  for (int y = 4; y < 24; ++y)
    for (int x = 9; x < 19; ++x) sample[static_cast<std::size_t>(y * 28 + x)] = static_cast<std::uint8_t>(100 + 5 * y);
  // Given back as a photo: 3× larger, dark on a white background with some grain, off-centre.
  const int w = 120, h = 100;
  apps::GrayImage photo{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w * h))};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const int sx = (x - 10) / 3, sy = (y - 5) / 3;
      const int v = x >= 10 && sx < 28 && y >= 5 && sy < 28 ? sample[static_cast<std::size_t>(sy * 28 + sx)] : 0;
      photo.pixels[static_cast<std::size_t>(y * w + x)] = static_cast<std::uint8_t>(255 - v - (x * 7 + y * 3) % 4);
    }
  // The article is trimmed, its longer side fitted to the field: 20 rows become 28.
  const std::vector<std::uint8_t> article = apps::prepare_image(photo, "article", 28, 28);
  int top = 28, bottom = -1, left = 28, right = -1;
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x)
      if (article[static_cast<std::size_t>(y * 28 + x)] > 20) {
        top = std::min(top, y), bottom = std::max(bottom, y), left = std::min(left, x), right = std::max(right, x);
      }
  CHECK((top == 0 && bottom == 27));                              // the longer side fills the field
  CHECK(((right - left + 1) >= 13 && (right - left + 1) <= 15));  // 10·28/20 = 14 columns
  CHECK(std::abs((left + right) / 2.0 - 13.5) <= 1.0);            // centred
  // The same photo as a digit: fitted into 20/28 of the field instead.
  const std::vector<std::uint8_t> digit = apps::prepare_image(photo, "digit", 28, 28);
  int rows = 0;
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x)
      if (digit[static_cast<std::size_t>(y * 28 + x)] > 20) {
        ++rows;
        break;
      }
  CHECK(rows == 20);
  // plain: the whole picture scaled to the field (a 2× enlargement comes back exactly).
  apps::GrayImage big{56, 56, std::vector<std::uint8_t>(56 * 56)};
  for (int y = 0; y < 56; ++y)
    for (int x = 0; x < 56; ++x)
      big.pixels[static_cast<std::size_t>(y * 56 + x)] = sample[static_cast<std::size_t>((y / 2) * 28 + x / 2)];
  CHECK(apps::prepare_image(big, "plain", 28, 28) == sample);
  CHECK(apps::prepare_image(big, "article", 28, 28).size() == 28 * 28);
  CHECK_THROWS_AS(apps::prepare_image(big, "cifar", 28, 28), ValueError);
  apps::GrayImage blank{8, 8, std::vector<std::uint8_t>(64, 255)};
  CHECK_THROWS_AS(apps::prepare_image(blank, "article", 28, 28), ValueError);
}
