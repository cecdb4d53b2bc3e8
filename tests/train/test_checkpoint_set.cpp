// The checkpoint set (Note [checkpoint set]): numbered pairs, the stable name, pruning, the newest
// complete one found past incomplete ones, the lock, stale temporaries. The faults themselves are
// injected at every file operation by tests/apps/checkpoint_faults.sh.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/io/durable_file.h"
#include "core/ops/ops.h"
#include "core/tensor/autograd.h"
#include "layers/nn.h"
#include "optim/optimizer.h"
#include "support/helpers.h"
#include "train/checkpoint_set.h"

using namespace ember;
using Catch::Matchers::Contains;
using ember::testing::message_of;
namespace fs = std::filesystem;

namespace {

fs::path work_dir(const std::string& name) { return ember::testing::fresh_dir("set", name); }

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("a checkpoint set keeps the newest complete pairs and names the newest model stably") {
  const fs::path dir = work_dir("keep");
  const std::string path = (dir / "m.safetensors").string();
  Generator g(3);
  auto model = nn::mlp(4, {3}, 2, &g);
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  auto train_on = [&] {  // each checkpoint other weights
    NoGradGuard no_grad;
    mul_(model->parameters()[0], 0.5);
  };
  train::CheckpointSet set(path, 2);
  CHECK_FALSE(set.newest().has_value());
  for (const train::Position at : {train::Position{1, 0}, {2, 0}, {2, 5}}) {
    train_on();
    set.save(at, *model, sgd, {}, {});
  }
  // Two kept: epoch 2 and epoch 2 step 5; epoch 1 pruned, state and model.
  CHECK(names_in(dir) == std::vector<std::string>{"m.epoch-2.safetensors", "m.epoch-2.state.safetensors",
                                                  "m.epoch-2.step-5.safetensors", "m.epoch-2.step-5.state.safetensors",
                                                  "m.safetensors"});
  CHECK(fs::equivalent(path, dir / "m.epoch-2.step-5.safetensors"));  // the stable name: the newest
  CHECK(set.newest()->at == train::Position{2, 5});

  // A newer pair whose model file is gone (a kill between the two files): passed over, with why.
  train_on();
  set.save({3, 0}, *model, sgd, {}, {});
  fs::remove(dir / "m.epoch-3.safetensors");
  const auto found = set.newest();
  REQUIRE(found.has_value());
  CHECK(found->at == train::Position{2, 5});
  REQUIRE(found->passed_over.size() == 1);
  CHECK_THAT(found->passed_over[0], Contains("m.epoch-3.safetensors (its model file") && Contains("is missing"));
  // A stable name left at an older model (a save stopped before publishing it) is put right.
  CHECK(set.republish_newest());
  CHECK(fs::equivalent(path, dir / "m.epoch-2.step-5.safetensors"));
  CHECK_FALSE(set.republish_newest());
  // find_checkpoint: from the stable name the newest complete one; a numbered file exactly.
  CHECK(train::find_checkpoint(path)->at == train::Position{2, 5});
  CHECK(train::find_checkpoint((dir / "m.epoch-2.step-5.safetensors").string())->at == train::Position{2, 5});
  CHECK_THAT(message_of<ValueError>([&] { train::find_checkpoint((dir / "m.epoch-3.state.safetensors").string()); }),
             Contains("not a complete checkpoint"));
  // A file that is no set's: left to load_checkpoint.
  CHECK_FALSE(train::find_checkpoint((dir / "other.safetensors").string()).has_value());

  // A saved epoch 1 after epoch 2 step 5 (a run resumed from further back): the newer ones are an
  // abandoned line, pruned once the new checkpoint is complete.
  train::CheckpointSet(path, 2).save({1, 0}, *model, sgd, {}, {});
  CHECK(set.positions() == std::vector<train::Position>{{1, 0}});
  fs::remove_all(dir);
}

TEST_CASE("no complete checkpoint: the error names each one and why") {
  const fs::path dir = work_dir("none");
  std::ofstream(dir / "m.epoch-1.state.safetensors") << "not safetensors";
  CHECK_THAT(message_of<train::IncompleteSet>([&] { train::find_checkpoint((dir / "m.safetensors").string()); }),
             Contains("no checkpoint of this set is complete: m.epoch-1.safetensors (its training state is damaged") &&
                 Contains("start the run anew, without --resume"));
  fs::remove_all(dir);
}

TEST_CASE("one run holds a set's lock; the temporaries under it are stale") {
  const fs::path dir = work_dir("lock");
  const std::string path = (dir / "m.safetensors").string();
  {
    train::SaveLock lock(path);
    // flock is held per open file: a second lock in this process is refused as another run's would be.
    CHECK_THAT(message_of<ValueError>([&] { train::SaveLock second(path); }),
               Contains("m.safetensors is being written by another run") && Contains("is locked by process ") &&
                   Contains(" on host "));
  }
  train::SaveLock again(path);  // released with its holder
  std::ofstream(dir / (io::temporary_prefix(path) + "123")) << "torn";
  std::ofstream(dir / ".m.epoch-2.state.safetensors.tmp.77") << "torn";
  std::ofstream(dir / ".other.safetensors.tmp.5") << "not ours";
  CHECK(train::CheckpointSet(path, 2).remove_stale_temporaries() == 2);
  CHECK(names_in(dir) == std::vector<std::string>{".other.safetensors.tmp.5", "m.safetensors.lock"});
  fs::remove_all(dir);
}

TEST_CASE("a failed write says which file and why, and leaves the old file as it was") {
  const fs::path dir = work_dir("fail");
  const std::string path = (dir / "f.bin").string();
  const std::vector<std::uint8_t> old{1, 2, 3};
  io::write_file_atomically(path, old);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  if (::geteuid() != 0) {  // root writes anywhere: the folder's permissions cannot refuse it
    const auto message = message_of<IoError>([&] { io::write_file_atomically(path, std::vector<std::uint8_t>{9}); });
    CHECK_THAT(message, Contains("f.bin: cannot write (create: Permission denied)"));
  }
  fs::permissions(dir, fs::perms::owner_all);
  std::ifstream in(path, std::ios::binary);
  CHECK(std::vector<std::uint8_t>{std::istreambuf_iterator<char>(in), {}} == old);
  fs::remove_all(dir);
}
