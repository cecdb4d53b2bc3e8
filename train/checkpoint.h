// Training checkpoints as a pair of files:
//   PATH                 the model file: the model's tensors under PyTorch's names and the model's
//                        description in __metadata__ — PyTorch's strict load_state_dict and
//                        mnist_predict read it as it is;
//   state_path_for(PATH) the training state beside it: the optimizer's tensors and settings, the
//                        epoch, the data order, the schedule, and the SHA-256 of the model file it
//                        belongs to.
//
// Two files cannot be replaced atomically together: the model is written first, then the state,
// each atomically, and the state records the model file's hash. A crash between the two leaves a
// pair whose hashes disagree, and resuming refuses it (naming both files) rather than continue from
// two different epochs. A training run's --save never replaces a pair in place: it keeps numbered
// pairs (train/checkpoint_set.h, Note [checkpoint set]), so that a fault never loses the last one. Single-file
// checkpoints of ember 0.1 (model and "optimizer." tensors in one file) still resume.
#pragma once

#include <cstdint>
#include <functional>
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

// The two files' bytes, the state naming `model_path`'s file name and its SHA-256.
struct EncodedCheckpoint {
  std::vector<std::uint8_t> model, state;
};
EncodedCheckpoint encode_checkpoint(const std::string& model_path, const nn::Module& model,
                                    const optim::Optimizer& optimizer, const Metadata& model_metadata,
                                    const Metadata& state_metadata);

// Why the state file at `state_path` and the model file it names do not make a complete checkpoint
// ("its model file ... is missing", "... is damaged: ...", "its model file's hash differs"), or
// empty when they do. Reads both files; changes nothing.
std::string pair_problem(const std::string& state_path);

struct LoadedCheckpoint {
  std::string model_path, state_path;  // state_path is empty for a single-file checkpoint
  Metadata metadata;                   // the model's and the state's, merged
};

// Restores model and optimizer (which must be of the kind that saved the state) from a pair —
// `path` may name either file — or from a single-file checkpoint. ValueError naming the files
// for a missing state, a pair that does not belong together, or tensors that do not fit.
// `before_restoring` sees the files' metadata before anything is restored (to refuse a checkpoint
// of other settings by name rather than by the shapes that do not fit).
LoadedCheckpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                                 const std::function<void(const LoadedCheckpoint&)>& before_restoring = {});

// The hex SHA-256 of a file's bytes (IoError naming it when it cannot be read).
std::string file_sha256(const std::string& path);

// ---- a training run's checkpoint: the pair above, with what an exact resume needs -----------------
// The positions of a model's random streams (Module::random_offset: its Dropout layers and
// attention dropouts), in order: they make a resumed run drop what an uninterrupted one would.
std::vector<std::uint64_t*> random_offsets(nn::Module& model);

// What an exact resume needs beyond the tensors, for the state's metadata: the epochs done
// ("epoch"), the steps done of the next epoch ("step") and the Dropout layers' stream positions
// ("dropout_offsets").
Metadata training_position_metadata(nn::Module& model, int epochs_done, std::int64_t steps_done);

// save_checkpoint with training_position_metadata at an epoch's end (the model file records the epoch too).
void save_training_checkpoint(const std::string& path, nn::Module& model, const optim::Optimizer& optimizer,
                              int epochs_done, Metadata model_metadata, Metadata state_metadata);

struct ResumedTraining {
  LoadedCheckpoint checkpoint;
  int start_epoch = 0;          // the epoch to train next
  std::int64_t start_step = 0;  // the steps of it already done (a checkpoint taken mid-epoch)
};

// load_checkpoint, then the Dropout layers' stream positions restored (each rank's own in a
// data-parallel run: separate_dropout_streams): the run continues at start_epoch as if it had
// not stopped.
ResumedTraining resume_training_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                                           const std::function<void(const LoadedCheckpoint&)>& before_restoring = {});

// ---- a run's settings, kept in its checkpoints ---------------------------------------------------
// A resumed run compares its settings (key → value, as saved in the state's metadata) with the
// checkpoint's. A key of `must_match` that the checkpoint records with another value cannot
// continue (another model, another dataset): a ValueError naming the file, the key and both
// values. A key of `noted` that differs is allowed, and a line saying so is returned for each.
// `names` says a key as its user knows it (e.g. "seed" → "--seed"); long values (hashes) are cut.
struct SettingsCheck {
  std::vector<std::string> must_match, noted;
  std::map<std::string, std::string> names = {};
};
std::vector<std::string> compare_settings(const LoadedCheckpoint& saved, const Metadata& now,
                                          const SettingsCheck& check);

}  // namespace ember::train
