// A training program's checkpoints from start to stop: the set under --save and its lock
// (train/checkpoint_set.h), saves at every epoch's end and at a stop mid-epoch, the run's history
// (its JSON-lines log) kept in each state so that a resume continues the log and the plot instead
// of erasing them, and a resume that takes the newest complete checkpoint and says why.
//
// Note [checkpoints without a shared disk]
// Hosts of a data-parallel run need not share a folder. Every host that holds ranks gets the
// checkpoints: rank 0 writes them, and so does the first rank of each other host whose --save
// path does not lead to rank 0's files — told by rank 0's lock file (its host, process and start
// time), which that rank does or does not find there. Why each host writes its own copy rather
// than receiving rank 0's bytes: the parameters and the optimizer's state are the same bits on
// every rank (the ranks compare their hashes after every epoch), so sending them would move the
// whole model over the network at every save for nothing; what differs — each rank's Dropout
// positions, and the log only rank 0 keeps — is rank 0's metadata, which it broadcasts, so every
// host's files are rank 0's byte for byte. A resume needs no shared folder either (resume_run):
// rank 0 finds the checkpoint, and a rank that does not hold the same bytes under that path
// receives them from rank 0 and loads a private copy.
//
//   train::RunCheckpoints checkpoints(save_path, keep);          // locks, removes stale temporaries
//   train::ResumedRun resumed = train::resume_run(path, model, optimizer);
//   ... fit(...) with checkpoints.save(...) in on_epoch and at a stop ...
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "train/checkpoint.h"
#include "train/checkpoint_set.h"

namespace ember::train {

// What a save records beyond the model and the optimizer.
struct SaveContext {
  Metadata model_metadata;  // travels with the model file (the model card)
  Metadata settings;        // the run's settings, compared by a resume (compare_settings)
  std::string history;      // the run's log so far: JSON lines (JsonLinesLog::text)
  Tensor loss_sum;          // at a stop mid-epoch: Step::loss_sum(), restored by the resume
};

class RunCheckpoints {
 public:
  // An empty path saves nothing. Otherwise, on each rank that writes (rank 0, and one rank on each
  // host that does not see its folder: Note [checkpoints without a shared disk]): locks PATH.lock
  // for the object's life (SaveLock) and removes the set's stale temporary files. With several
  // ranks, every rank constructs it at the same point (it takes part in collectives).
  RunCheckpoints(std::string path, int keep);

  // A complete checkpoint at `at`, the same bytes from every rank that writes (every rank
  // remembers it; a collective where several ranks run, and rank 0's metadata). A failed save throws
  // an Error (not bad input: exit 1 in a program) saying which checkpoint is still resumable and, for a full disk, what
  // to do.
  void save(const Position& at, nn::Module& model, const optim::Optimizer& optimizer, const SaveContext& context);

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::optional<Position> last_saved() const { return last_saved_; }
  // "the newest complete checkpoint is m.epoch-2.safetensors (epoch 2)", or why there is none.
  std::string resumable() const;
  // The set's checkpoints before this run's first save, when the run did not resume from them:
  // "epochs 4, 5" (they are replaced), else empty.
  std::string earlier_run() const;

 private:
  std::string path_;
  bool writes_ = true;        // this rank writes the set (rank 0, or its host's own copy)
  bool hosts_write_ = false;  // some rank other than rank 0 writes a copy on its host
  std::unique_ptr<SaveLock> lock_;
  std::unique_ptr<CheckpointSet> set_;
  std::optional<Position> last_saved_;
};

struct ResumedRun {
  LoadedCheckpoint checkpoint;  // the files read and their metadata (the run's settings among them)
  Position at;                  // where the run continues
  std::string history;          // the log up to there
  Tensor loss_sum;              // the stopped epoch's loss sum so far (undefined at a boundary)
  std::string report;           // "resuming from m.epoch-2.safetensors (epoch 2)..." and why, for the user
};

// Finds the checkpoint `path` names (find_checkpoint: the newest complete one of a set, or a pair
// or single file of earlier versions) and restores model, optimizer and the Dropout streams;
// `before_restoring` sees its metadata first (load_checkpoint).
ResumedRun resume_run(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                      const std::function<void(const LoadedCheckpoint&)>& before_restoring = {});

// The hex SHA-256 of the tensors' bytes, in order: a content fingerprint of a dataset.
std::string tensors_sha256(std::span<const Tensor> tensors);
// The hex SHA-256 of `parts` byte strings in order, part(i) the i-th.
std::string sha256_of(std::size_t parts, const std::function<std::string_view(std::size_t)>& part);

}  // namespace ember::train
