// Training checkpoints: model + optimizer state + metadata in one safetensors file.
#include "apps/common/train_state.h"

#include "core/config.h"
#include "core/error.h"

namespace ember::apps {

namespace {
const std::string kOptimizerPrefix = "optimizer.";
}

void save_training_state(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                         std::map<std::string, std::string> metadata) {
  StateDict tensors = model.state_dict();
  const Checkpoint opt = optimizer.state_dict();
  for (const auto& [name, t] : opt.tensors) tensors.emplace_back(kOptimizerPrefix + name, t);
  for (const auto& [key, value] : opt.metadata) metadata[kOptimizerPrefix + key] = value;
  metadata["format"] = "ember";
  metadata["ember_version"] = EMBER_VERSION;
  metadata["model"] = model.repr();
  save_safetensors(path, tensors, metadata);
}

std::map<std::string, std::string> load_training_state(const std::string& path, nn::Module& model,
                                                       optim::Optimizer& optimizer) {
  Checkpoint file = load_safetensors(path, Device::cpu());
  StateDict model_state;
  Checkpoint opt;
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(kOptimizerPrefix, 0) == 0) opt.tensors.emplace_back(name.substr(kOptimizerPrefix.size()), t);
    else model_state.emplace_back(name, t);
  }
  for (const auto& [key, value] : file.metadata)
    if (key.rfind(kOptimizerPrefix, 0) == 0) opt.metadata[key.substr(kOptimizerPrefix.size())] = value;
  if (opt.metadata.empty())
    throw ValueError(detail::concat(path, ": has no optimizer state (a model-only checkpoint?); use --init to start "
                                          "from its weights instead of --resume"));
  try {
    model.load_state_dict(model_state);
    optimizer.load_state_dict(opt);
  } catch (const ValueError& e) {
    throw ValueError(detail::concat(path, ": ", e.what()));
  }
  return file.metadata;
}

}  // namespace ember::apps
