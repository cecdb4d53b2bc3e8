// Training checkpoints as a pair of files:
//   PATH                 the model file: the model's tensors under PyTorch's names and the model's
//                        description in __metadata__ — PyTorch's strict load_state_dict and
//                        mnist_predict read it as it is;
//   state_path_for(PATH) the training state beside it: the optimizer's tensors and settings, the
//                        epoch, the data order, the schedule, and the SHA-256 of the model file it
//                        belongs to.
//
// Two files cannot be replaced atomically together. The state is written first, then the model,
// each atomically: a crash between the two leaves a state whose recorded hash does not match the
// model file, and resuming refuses the pair (naming both files) rather than continue from two
// different epochs. Single-file checkpoints of ember 0.1 (model and "optimizer." tensors in one
// file) still resume.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "layers/dropout.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace ember::train {

using Metadata = std::map<std::string, std::string>;

// m.safetensors → m.state.safetensors; any other name gets ".state.safetensors" appended.
std::string state_path_for(const std::string& model_path);

// Writes the pair. `model_metadata` describes the model (it travels with it); `state_metadata`
// is what a resume needs beyond the tensors.
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const Metadata& model_metadata, const Metadata& state_metadata);

struct LoadedCheckpoint {
  std::string model_path, state_path;  // state_path is empty for a single-file checkpoint
  Metadata metadata;                   // the model's and the state's, merged
};

// Restores model and optimizer (which must be of the kind that saved the state) from a pair —
// `path` may name either file — or from a single-file checkpoint. ValueError naming the files
// for a missing state, a pair that does not belong together, or tensors that do not fit.
LoadedCheckpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer);

// The hex SHA-256 of a file's bytes (IoError naming it when it cannot be read).
std::string file_sha256(const std::string& path);

// ---- a training run's checkpoint: the pair above, with what an exact resume needs -----------------
// The Dropout layers of a model, in order (their positions in their random streams make a resumed
// run drop what an uninterrupted one would).
std::vector<nn::Dropout*> dropout_layers(nn::Module& model);

// save_checkpoint, with the epochs done ("epoch") and the Dropout layers' stream positions
// ("dropout_offsets") added to the state's metadata.
void save_training_checkpoint(const std::string& path, nn::Module& model, const optim::Optimizer& optimizer,
                              int epochs_done, Metadata model_metadata, Metadata state_metadata);

struct ResumedTraining {
  LoadedCheckpoint checkpoint;
  int start_epoch = 0;  // the epoch to train next
};

// load_checkpoint, then the Dropout layers' stream positions restored (each rank's own in a
// data-parallel run: separate_dropout_streams): the run continues at start_epoch as if it had
// not stopped.
ResumedTraining resume_training_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer);

// ---- a run's settings, kept in its checkpoints ---------------------------------------------------
// A resumed run compares its settings (key → value, as saved in the state's metadata) with the
// checkpoint's. A key of `must_match` that the checkpoint records with another value cannot
// continue (another model, another dataset): a ValueError naming the file, the key and both
// values. A key of `noted` that differs is allowed, and a line saying so is returned for each.
struct SettingsCheck {
  std::vector<std::string> must_match, noted;
};
std::vector<std::string> compare_settings(const LoadedCheckpoint& saved, const Metadata& now,
                                          const SettingsCheck& check);

// Checkpointing for fit's on_epoch hook: save_training_checkpoint after every epoch, the run's
// settings in the state. Rank 0 of dist:: alone writes (the ranks hold the same parameters); every
// rank remembers the last epoch saved, so that a run failing later names the file to go back to.
class EpochCheckpoints {
 public:
  // An empty path saves nothing. `epochs_done`: a resumed run's start.
  EpochCheckpoints(std::string path, nn::Module& model, const optim::Optimizer& optimizer, Metadata model_metadata,
                   Metadata settings, int epochs_done);
  void save(int epochs_done);
  // "; the last good checkpoint is PATH (N epochs)", to append to an error; empty when nothing is saved.
  std::string last_good() const;

 private:
  std::string path_;
  nn::Module& model_;
  const optim::Optimizer& optimizer_;
  Metadata model_metadata_, settings_;
  int last_saved_;
};

}  // namespace ember::train
