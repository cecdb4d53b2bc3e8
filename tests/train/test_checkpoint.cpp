// The training library's checkpoints (train/checkpoint.h): the pair of files, their hash, and a
// training run's resume state.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/optimizer.h"
#include "support/helpers.h"
#include "train/checkpoint.h"
#include "train/run_checkpoints.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;
using ember::testing::state_values;
namespace fs = std::filesystem;

namespace {

fs::path work_dir(const std::string& name) { return ember::testing::fresh_dir("apps", name); }

// A model and an optimizer with state: two SGD steps with momentum on random data.
struct Trained {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> sgd;
};

Trained trained(std::uint64_t seed) {
  Generator g(seed);
  Trained t{nn::mlp(6, {5}, 3, &g), nullptr};
  t.sgd = std::make_unique<optim::SGD>(t.model->parameters(), optim::GroupOptions{.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 2; ++step) {
    Tensor loss = cross_entropy((*t.model)(rand({4, 6}, {}, &g)), from_vector<std::int32_t>({0, 1, 2, 1}, {4}));
    t.sgd->zero_grad();
    loss.backward();
    t.sgd->step();
  }
  return t;
}

}  // namespace

TEST_CASE("checkpoint pairs: the model file alone, the state beside it, tied by the model's hash") {
  const fs::path dir = work_dir("pair");
  CHECK(train::state_path_for("a/m.safetensors") == "a/m.state.safetensors");
  CHECK(train::state_path_for("model.bin") == "model.bin.state.safetensors");

  Trained a = trained(1);
  const std::string path = (dir / "m.safetensors").string();
  train::save_checkpoint(path, *a.model, *a.sgd, {{"dataset", "mnist"}}, {{"epoch", "3"}});
  // The model file holds the model's tensors only, under PyTorch's names.
  const Checkpoint model_file = load_safetensors(path);
  REQUIRE(model_file.tensors.size() == 4);
  CHECK(model_file.tensors[0].first == "0.weight");
  CHECK(model_file.metadata.at("format") == "pt");
  const Checkpoint state_file = load_safetensors(train::state_path_for(path));
  CHECK(state_file.metadata.at("model_sha256") == train::file_sha256(path));
  CHECK(state_file.metadata.at("model_file") == "m.safetensors");

  // Resuming restores the model and the optimizer's momentum: the next step matches.
  Trained b = trained(2);
  const train::LoadedCheckpoint loaded = train::load_checkpoint(path, *b.model, *b.sgd);
  CHECK(loaded.metadata.at("epoch") == "3");
  CHECK(loaded.metadata.at("dataset") == "mnist");
  CHECK(state_values(*b.model) == state_values(*a.model));
  Trained c = trained(3);
  train::load_checkpoint(train::state_path_for(path), *c.model, *c.sgd);  // either file names the pair
  CHECK(state_values(*c.model) == state_values(*a.model));
  for (Trained* t : {&a, &b}) {
    Tensor loss = cross_entropy((*t->model)(ones({2, 6})), from_vector<std::int32_t>({2, 0}, {2}));
    t->sgd->zero_grad();
    loss.backward();
    t->sgd->step();
  }
  CHECK(state_values(*b.model) == state_values(*a.model));

  // Another run's state beside this model: refused, naming both files.
  const std::string other = (dir / "other.safetensors").string();
  train::save_checkpoint(other, *trained(4).model, *trained(4).sgd, {}, {});
  fs::copy_file(train::state_path_for(other), train::state_path_for(path), fs::copy_options::overwrite_existing);
  Trained d = trained(5);
  const std::string mismatch = message_of<ValueError>([&] { train::load_checkpoint(path, *d.model, *d.sgd); });
  CHECK_THAT(mismatch, Contains(path + " and " + train::state_path_for(path) + " do not belong together"));
  // A model file without its state: says to use --init.
  fs::remove(train::state_path_for(path));
  CHECK_THAT(message_of<ValueError>([&] { train::load_checkpoint(path, *d.model, *d.sgd); }),
             Contains("no training state beside it"));

  // ember 0.1's single file: model, "optimizer." tensors and metadata in one.
  StateDict single = a.model->state_dict();
  const Checkpoint opt = a.sgd->state_dict();
  std::map<std::string, std::string> meta{{"epoch", "7"}};
  for (const auto& [name, t] : opt.tensors) single.emplace_back("optimizer." + name, t);
  for (const auto& [key, value] : opt.metadata) meta["optimizer." + key] = value;
  const std::string old = (dir / "old.safetensors").string();
  save_safetensors(old, single, meta);
  Trained e = trained(6);
  CHECK(train::load_checkpoint(old, *e.model, *e.sgd).metadata.at("epoch") == "7");
  CHECK(state_values(*e.model) == state_values(*a.model));
}

TEST_CASE("a run's settings travel with its checkpoints: saved every epoch, compared on resume") {
  const fs::path dir = work_dir("settings");
  const std::string path = (dir / "run.safetensors").string();
  Trained a = trained(7);
  const train::Metadata settings{{"model_kind", "mlp"}, {"dataset", "mnist"}, {"batch_size", "128"}};
  train::RunCheckpoints checkpoints(path, 2);
  CHECK_THAT(checkpoints.resumable(), Contains("no checkpoint of " + path + " was saved yet"));
  checkpoints.save({2, 0}, *a.model, *a.sgd, {{{"model_kind", "mlp"}}, settings, "{\"epoch\":1}\n", Tensor()});
  CHECK(checkpoints.resumable() ==
        "the newest complete checkpoint is run.epoch-2.safetensors (epoch 2): resume with "
        "--resume " +
            path);
  CHECK(train::RunCheckpoints("", 2).resumable() == "nothing was saved (no --save)");

  Trained b = trained(8);
  const train::ResumedRun run = train::resume_run(path, *b.model, *b.sgd);
  CHECK(run.at == train::Position{2, 0});
  CHECK(run.history == "{\"epoch\":1}\n");
  CHECK(run.report == "resuming from run.epoch-2.safetensors (epoch 2)");
  CHECK(state_values(*b.model) == state_values(*a.model));
  const train::SettingsCheck check{.must_match = {"model_kind", "dataset"}, .noted = {"batch_size", "world_size"}};
  // The same settings: nothing to say. A changed batch: a note. Another dataset: refused.
  CHECK(train::compare_settings(run.checkpoint, settings, check).empty());
  train::Metadata now = settings;
  now["batch_size"] = "64";
  now["world_size"] = "2";  // not in the checkpoint: nothing to compare
  CHECK(train::compare_settings(run.checkpoint, now, check) ==
        std::vector<std::string>{"the checkpoint was saved with batch_size 128, this run has 64"});
  now["dataset"] = "fashion-mnist";
  CHECK_THAT(message_of<ValueError>([&] { train::compare_settings(run.checkpoint, now, check); }),
             Contains(": the checkpoint was saved with dataset mnist, this run has fashion-mnist"));
}
