// A training program's checkpoints from start to stop: the set under --save and its lock
// (train/checkpoint_set.h), saves at every epoch's end and at a stop mid-epoch, the run's history
// (its JSON-lines log) kept in each state so that a resume continues the log and the plot instead
// of erasing them, and a resume that takes the newest complete checkpoint and says why.
//
//   train::RunCheckpoints checkpoints(save_path, keep);          // locks, removes stale temporaries
//   train::ResumedRun resumed = train::resume_run(path, model, optimizer);
//   ... fit(...) with checkpoints.save(...) in on_epoch and at a stop ...
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

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
  // An empty path saves nothing. Otherwise, on rank 0 of dist:: (the only rank that writes): locks
  // PATH.lock for the object's life (SaveLock) and removes the set's stale temporary files.
  RunCheckpoints(std::string path, int keep);

  // A complete checkpoint at `at` (rank 0 writes; every rank remembers it). A failed save throws
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

}  // namespace ember::train
