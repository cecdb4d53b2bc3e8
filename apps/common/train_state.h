// A training checkpoint: the model's state dict, the optimizer's state under "optimizer.", and
// metadata (epochs done, settings). The model tensors keep PyTorch's names, so the file also
// loads as a plain model checkpoint (the optimizer keys are then ignored or filtered out).
#pragma once

#include <map>
#include <string>

#include "layers/module.h"
#include "optim/optimizer.h"

namespace ember::apps {

void save_training_state(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                         std::map<std::string, std::string> metadata);

// Restores model and optimizer (the optimizer must be of the kind that saved the state) and
// returns the metadata. Errors name the file.
std::map<std::string, std::string> load_training_state(const std::string& path, nn::Module& model,
                                                       optim::Optimizer& optimizer);

}  // namespace ember::apps
