// A run's checkpoints as a set that no kill, full disk or write error loses: numbered pairs, a
// stable name for the newest model, pruning to the last few, and a lock held by the one run that
// writes them.
//
// Note [checkpoint set]
//   `--save m.safetensors` keeps, in m's folder:
//     m.epoch-3.safetensors, m.epoch-3.state.safetensors   a complete checkpoint after epoch 3
//     m.epoch-2.step-57.safetensors (and its state)         one taken 57 steps into epoch 2 (a stop)
//     m.safetensors                                        the newest model: a hard link (a copy
//                                                          where the file system has none), the
//                                                          stable name PyTorch and mnist_predict open
//     m.safetensors.lock                                   locked by the run writing the set
//   A save writes, each through io::write_file_atomically (temporary file, fsync, rename, fsync of
//   the folder): the model, then its state, which records the model file's name and SHA-256. The
//   state is the commit record, as torch.distributed.checkpoint's metadata file is: a checkpoint is
//   complete when its state exists and the model file it names has that hash. Then the stable name
//   is published (a link under a temporary name, renamed over m.safetensors, fsync of the folder),
//   and the set is pruned to the newest `keep` complete checkpoints (each state removed before its
//   model, so a half-pruned checkpoint is incomplete, never taken for whole; then fsync of the folder).
//   So at every instant the newest complete checkpoint is the previous one or the new one.
//   Checkpoints numbered after the one just saved belong to an abandoned line (an earlier run in the
//   same place, or one resumed from an older checkpoint) and are pruned with the rest, only once the
//   new one is complete. Resuming takes the newest complete checkpoint and says why it passed over
//   any newer one. The lock is an flock on m.safetensors.lock for the whole run: a second run on the
//   same path is refused, naming the holder that the lock file describes. Liveness is never judged
//   by a PID (PIDs are reused, containers have their own, the folder may be shared between hosts):
//   whoever holds the lock owns every temporary file of the set, so those left by a killed save are
//   stale and removed by the next save or resume.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/checkpoint.h"

namespace ember::train {

// Where training stands: `epoch` epochs done and `step` steps of the next one (0: a boundary).
struct Position {
  int epoch = 0;
  std::int64_t step = 0;
  auto operator<=>(const Position&) const = default;
  std::string str() const;  // "epoch 3" or "epoch 2, step 57"
};

// An exclusive lock on PATH.lock for the life of the object. ValueError naming the holder (as its
// lock file describes it: host, process, start time) when another run holds it.
class SaveLock {
 public:
  explicit SaveLock(const std::string& path);
  ~SaveLock();
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes the temporary files io::write_file_atomically left for `path` (".NAME.tmp.*"), stale
// when the caller owns `path`; returns how many.
int remove_stale_temporaries(const std::string& path);

// A set whose checkpoints are all incomplete: every save so far was interrupted.
class IncompleteSet : public ValueError {
 public:
  using ValueError::ValueError;
};

struct FoundCheckpoint {
  std::string state_path;                // the complete checkpoint's state file
  Position at;                           // where it stands
  std::vector<std::string> passed_over;  // newer ones that were not complete, each with the reason
};

class CheckpointSet {
 public:
  // `path`: the stable model name (--save); `keep` ≥ 1 complete checkpoints are kept.
  CheckpointSet(std::string path, int keep);

  // Saves a complete checkpoint at `at` (model, then state), publishes the stable name and prunes.
  // io::FileError when a file operation fails: the set then still holds its newest complete
  // checkpoint (newest() says which).
  void save(const Position& at, const nn::Module& model, const optim::Optimizer& optimizer,
            const Metadata& model_metadata, const Metadata& state_metadata);

  // The newest complete checkpoint; nothing when the set has no checkpoint at all, IncompleteSet
  // when it has only incomplete ones (each named, with why).
  std::optional<FoundCheckpoint> newest() const;
  // The positions of every numbered checkpoint in the folder, complete or not (newest first).
  std::vector<Position> positions() const;
  // Removes this set's stale temporary files (call while holding its SaveLock); returns how many.
  int remove_stale_temporaries() const;
  // Points the stable name at the newest complete checkpoint where a save was stopped between its
  // state and the stable name (call while holding the SaveLock); true when it had to.
  bool republish_newest() const;

  const std::string& path() const { return path_; }
  std::string model_path(const Position& at) const;  // m.epoch-3.safetensors

 private:
  void publish(const std::string& model_file) const;

  std::string path_, folder_, stem_;
  int keep_;
};

// The checkpoint `path` names for --resume: the newest complete one of the set whose stable name
// it is, or exactly the numbered file it names. Nothing when `path` is no set's (a pair or single
// file of ember 0.2 and before: load_checkpoint reads those). IncompleteSet when the set has
// checkpoints but none complete, naming each and why.
std::optional<FoundCheckpoint> find_checkpoint(const std::string& path);

}  // namespace ember::train
